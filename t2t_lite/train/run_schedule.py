"""When a run logs, evaluates, saves and stops. Every decision to stop is made here, after each
host call: the step budget (train_steps), the time budget (train_minutes, with the cooldown
over its last minutes, or from when the dev metric stalled), early stopping and a cooldown that
is done (read from the run's best-model record, model_selection.py), and SIGTERM
(preemption.py); with several workers one vote makes them all decide alike.

  with RunSchedule(config, steps_per_execution, vote, selection) as schedule:
    stop = schedule.stop_at_start(step)
    while not stop and step < config.train_steps:
      run schedule.steps_until_event(step) steps, evaluate if schedule.evaluates_at(step)
      stop, save = schedule.after(step)
    if stop: stop = schedule.ended(step, stop)  (after a final evaluation when by_clock)
"""
import dataclasses
import time

from t2t_lite.train import preemption


@dataclasses.dataclass(frozen=True)
class Stop:
  """Why a run stops before its step budget: kind "time", "early" or "SIGTERM", the line that
  says so, and whether its clock ended it (such a run evaluates once more before its last
  save)."""
  kind: str
  line: str
  by_clock: bool = False


class RunSchedule:
  """The events of one run, from the moment it is made (the time budget starts then).

  Args:
    config: the run's TrainConfig (budgets, intervals, patience, cooldown_patience).
    steps_per_execution: optimizer steps per host call.
    vote: vote(flags) -> flags, each True if it is on any worker (distribute.WorkerVote);
      default: this process alone.
    selection: the run's model_selection.ModelSelection, or None.
  While entered, SIGTERM asks the run to stop (the previous handler is put back on exit).
  """

  def __init__(self, config, steps_per_execution, vote=None, selection=None):
    self.config, self.steps_per_execution = config, steps_per_execution
    self.vote, self.selection = vote or (lambda flags: flags), selection
    self.start = self.last_save = time.time()
    minutes = config.train_minutes
    self.end = self.start + minutes * 60 if minutes else None  # None: no time budget
    self.end_reason = f"the {minutes} minute budget is spent"
    self._sigterm = preemption.StopOnSigterm()
    self._steer()

  def __enter__(self):
    self._sigterm.__enter__()
    return self

  def __exit__(self, *unused):
    self._sigterm.__exit__(*unused)

  # ------------------------------------------------------------------ what happens when
  def steps_until_event(self, step):
    """Steps to run in the next host call: steps_per_execution, cut at the next log, eval or
    the end."""
    config = self.config
    n = min(self.steps_per_execution, config.train_steps - step)
    for every in (config.log_every, config.eval_every if config.eval_steps else 0):
      if every:
        n = min(n, every - step % every)
    return max(n, 1)

  def logs_at(self, step):
    return step % self.config.log_every == 0 or step == self.config.train_steps

  def evaluates_at(self, step):
    config = self.config
    return bool(config.eval_steps) and (step % config.eval_every == 0
                                        or step == config.train_steps)

  def seconds_left(self):
    """Of the time budget (None without one)."""
    return None if self.end is None else max(0.0, self.end - time.time())

  def learning_rate_factor(self):
    """The cooldown: 1 until the last cooldown_minutes before the end, then falling linearly
    to 0 by wall time (1 without a cooldown)."""
    if not self.config.cooldown_minutes:
      return 1.0
    return min(1.0, max(0.0, self.seconds_left() / (self.config.cooldown_minutes * 60)))

  # ------------------------------------------------------------------ stopping
  def stop_at_start(self, step):
    """A run resumed after it stopped early does not train on -> its Stop, else None."""
    selection = self.selection
    if selection is None or not selection.has_stopped:
      return None
    return Stop("early", f"{self.config.model_dir} stopped early at step {step}: "
                         f"{self._early_reason()}; {selection.best_so_far()}; nothing to train "
                         "(fine-tune from it with --init_from, or use a new --model_dir)")

  def after(self, step):
    """After the host call (and evaluation) that ended at `step` -> (Stop or None, whether to
    save a checkpoint now). Every worker must call it at the same steps: one vote decides. A
    Stop by the clock is final only after `ended`."""
    self._steer(step)
    selection, patience = self.selection, self.config.patience
    stalled = (selection is not None and patience is not None
               and selection.evaluations_without_gain >= patience)
    early, sigterm, out_of_time, save = self.vote(
        [stalled, self._sigterm.requested, self.seconds_left() == 0.0,
         time.time() - self.last_save >= self.config.checkpoint_every_minutes * 60])
    stopping = f"stopping at step {step}: "
    if early:
      self.selection.mark_stopped(step, self._early_reason())
      return Stop("early", stopping + self.selection.stop_reason), False
    if sigterm:
      return Stop("SIGTERM", stopping + "SIGTERM received; saving a checkpoint"), False
    if out_of_time:
      return Stop("time", stopping + self.end_reason, by_clock=True), False
    if save:
      self.last_save = time.time()
    return None, save

  def ended(self, step, stop):
    """The last word on a run that stops at `step` (after the final evaluation a stop by the
    clock makes): a run whose cooldown from a stall had started is done, and a resume does not
    train on it -> the Stop, "early" then."""
    self._steer(step)
    if stop.kind != "time" or self.selection is None or self.selection.cooling_since is None:
      return stop
    self.selection.mark_stopped(step, self._early_reason())
    return Stop("early", stop.line, by_clock=True)

  def _early_reason(self):
    selection, config = self.selection, self.config
    stale = selection.evaluations_without_gain
    if config.patience is not None and stale >= config.patience:
      return (f"{selection.metric} did not improve in {stale} evaluations (patience "
              f"{config.patience})")
    return (f"{selection.metric} stalled at step {selection.cooling_since} (cooldown_patience "
            f"{config.cooldown_patience}) and the cooldown from there is done")

  def _steer(self, step=None):
    """The cooldown from a stall: started at the evaluation that makes cooldown_patience
    evaluations without improvement (cooldown_patience), then the run ends cooldown_minutes
    later, or at its budget if that is sooner, its learning rate falling to 0 on the way. A
    resumed run whose cooldown had started cools down again from its start."""
    selection, patience = self.selection, self.config.cooldown_patience
    if selection is None or patience is None:
      return
    if (selection.cooling_since is None and step is not None
        and selection.evaluations_without_gain >= patience):
      selection.start_cooldown(step, f"cooldown_patience {patience}")
    since = selection.cooling_since
    end = time.time() + self.config.cooldown_minutes * 60
    if since is not None and end < self.end:  # Called again later, it changes nothing.
      self.end = end
      self.end_reason = f"the cooldown from step {since}, where the dev metric stalled, is done"
