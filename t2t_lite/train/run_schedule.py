"""When a run logs, evaluates, saves and stops: its step budget (train_steps), its time budget
(train_minutes, and the cooldown over its last minutes, or from when the dev metric stalls),
and the log, eval and checkpoint intervals of its TrainConfig. The trainer asks this at every
host call.
"""
import time


class RunSchedule:
  """The events of one run, from the moment it is made (the time budget starts then)."""

  def __init__(self, config, steps_per_execution):
    self.config, self.steps_per_execution = config, steps_per_execution
    self.start = self.last_save = time.time()
    minutes = config.train_minutes
    self.end = self.start + minutes * 60 if minutes else None  # None: no time budget
    self.end_reason = f"the {minutes} minute budget is spent"

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

  def out_of_time(self):
    return self.seconds_left() == 0.0

  def cool_down_from(self, step):
    """The dev metric stalled at `step` (config.cooldown_patience): the run now ends
    cooldown_minutes from now, or at its budget if that is sooner, its rate falling to 0 on the
    way. Calling it again changes nothing."""
    end = time.time() + self.config.cooldown_minutes * 60
    if end < self.end:
      self.end = end
      self.end_reason = f"the cooldown from step {step}, where the dev metric stalled, is done"

  def learning_rate_factor(self):
    """The cooldown: 1 until the last cooldown_minutes before the end, then falling linearly
    to 0 by wall time."""
    return min(1.0, max(0.0, self.seconds_left() / (self.config.cooldown_minutes * 60)))

  def checkpoint_due(self):
    return time.time() - self.last_save >= self.config.checkpoint_every_minutes * 60

  def saved(self):
    self.last_save = time.time()
