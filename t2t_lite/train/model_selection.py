"""Keeping a run's best model and stopping when it stops improving (not in the paper; fairseq's
--best-checkpoint-metric and --patience, Marian's --keep-best and --early-stopping).

At each evaluation the run's selection metric is compared with the best so far:
  - better: the weights just evaluated (the moving averages when the run keeps them) are
    written to model_dir/best/, a run directory of its own that decode, average and export
    take as it is, with best.json recording the metric, its value and the step;
  - otherwise the evaluations without improvement are counted; at `cooldown_patience` the
    run's cooldown starts (run_schedule.RunSchedule.cool_down_from; when it is done the run
    stops), at `patience` the run stops; either way exit status 0, with the reason printed and
    in best.json, and a resumed run does not train on.
The state (best value and step, evaluations without improvement, where the cooldown started,
stopped) is in the trainer's checkpoints, so that a run resumed after SIGTERM or SIGKILL goes on
where it was (a cooldown by wall time starts again: the clock is not in a checkpoint).
"""
import math

import tensorflow as tf

from t2t_lite.errors import RunFailure
from t2t_lite.rundir import checkpoints, run_files


def metric_name(config, problem, decodes):
  """The evaluation metric config.best_metric selects on ("dev_paper_bleu", "loss", ...), or
  None: "none", or "auto" in a run without evaluations. `decodes`: whether the run's
  evaluations decode dev sentences (they give the problem's own metric)."""
  choice = config.best_metric
  if choice == "auto":
    choice = "none" if not config.eval_steps else "dev_metric" if decodes else "loss"
  if choice == "none":
    return None
  return f"dev_{problem.selection_metric}" if choice == "dev_metric" else choice


class ModelSelection:
  """The best-so-far of one metric, and the patience left.

  Args:
    metric: the name of an evaluation metric ("loss" and "perplexity": lower is better).
    patience: evaluations without improvement before the run stops (None: never).
    cooldown_patience: evaluations without improvement before the cooldown starts (None: never).
    model_dir: the run directory, whose best/ it keeps.
    writes: whether this worker writes the run directory (the chief).
    log: where its lines go.
  """

  def __init__(self, metric, patience, model_dir, writes=True, log=print,
               cooldown_patience=None):
    self.metric, self.patience, self.cooldown_patience = metric, patience, cooldown_patience
    self.best_dir, self.model_dir = run_files.path(model_dir, run_files.BEST_DIR), model_dir
    self.writes, self.log = writes, log
    self.lower_is_better = metric in ("loss", "perplexity")
    worst = math.inf if self.lower_is_better else -math.inf
    self.best_value = tf.Variable(worst, dtype=tf.float64, trainable=False, name="best_value")
    self.best_step = tf.Variable(-1, dtype=tf.int64, trainable=False, name="best_step")
    self.stale = tf.Variable(0, dtype=tf.int64, trainable=False, name="evals_without_gain")
    self.stopped = tf.Variable(False, trainable=False, name="stopped_early")
    self.cooldown_step = tf.Variable(-1, dtype=tf.int64, trainable=False, name="cooldown_step")

  def checkpoint_objects(self):
    """The state that goes into the trainer's checkpoints."""
    return {"best_value": self.best_value, "best_step": self.best_step, "stale": self.stale,
            "stopped": self.stopped, "cooldown_step": self.cooldown_step}

  def record(self):
    """What best.json says."""
    record = {"metric": self.metric, "value": float(self.best_value.numpy()),
              "step": int(self.best_step.numpy())}
    if self.cooling_since is not None:
      record["cooldown_from_step"] = self.cooling_since
    return record

  @property
  def cooling_since(self):
    """The step at which the metric stalled and the cooldown started, or None."""
    step = int(self.cooldown_step.numpy())
    return None if step < 0 else step

  def steer(self, schedule):
    """Once the metric has stalled, the run's RunSchedule ends with the cooldown from there."""
    if self.cooling_since is not None:
      schedule.cool_down_from(self.cooling_since)

  def cooled_down(self, step):
    """Whether the run, ended at `step` by time, had started its cooldown: then it is done (a
    resume does not train on; best.json says why)."""
    if self.cooling_since is None:
      return False
    self.stopped.assign(True)
    self._write_record(step)
    return True

  def evaluated(self, step, metrics, save_weights):
    """Counts an evaluation; when `metrics` are the best so far, save_weights(best_dir) writes
    the weights evaluated there (every worker calls it), with the run files beside them.
    best.json records the best and, once the run is to stop, why."""
    if self._improved(step, metrics):
      try:
        if self.writes:
          run_files.copy_run_files(self.model_dir, self.best_dir)
        save_weights(self.best_dir)
      except tf.errors.OpError as e:
        raise RunFailure(f"saving the best model (step {step}) in {self.best_dir} failed: "
                         f"{checkpoints.reason(e)}") from None
      self.log(f"best {self.metric} so far: {float(metrics[self.metric]):.4f} at step {step}, "
               f"kept in {self.best_dir}")
    self._write_record(step)

  def _write_record(self, step):
    if self.writes:
      record = self.record()
      if self.should_stop:
        record["stopped_early"] = {"step": step, "reason": self.stop_reason()}
      run_files.write_best_record(self.model_dir, record)

  def _improved(self, step, metrics):
    if self.metric not in metrics:
      raise KeyError(f"the evaluation gave no {self.metric!r} (it gave "
                     f"{', '.join(sorted(metrics))})")
    value, best = float(metrics[self.metric]), float(self.best_value.numpy())
    improved = value < best if self.lower_is_better else value > best
    if improved:
      self.best_value.assign(value)
      self.best_step.assign(step)
      self.stale.assign(0)
    else:
      self.stale.assign_add(1)
      stale = int(self.stale.numpy())
      if self.patience is not None and stale >= self.patience:
        self.stopped.assign(True)
      if (self.cooldown_patience is not None and stale >= self.cooldown_patience
          and self.cooling_since is None):
        self.cooldown_step.assign(step)
        self.log(f"{self.metric} did not improve in {stale} evaluation(s) (cooldown_patience "
                 f"{self.cooldown_patience}): the learning rate falls to 0 over the cooldown "
                 "from here, then the run stops")
    return improved

  @property
  def should_stop(self):
    return bool(self.stopped.numpy())

  def stop_reason(self):
    best, stale = self.record(), int(self.stale.numpy())
    if self.patience is not None and stale >= self.patience:
      why = f"{self.metric} did not improve in {stale} evaluations (patience {self.patience})"
    else:
      why = (f"{self.metric} stalled at step {self.cooling_since} (cooldown_patience "
             f"{self.cooldown_patience}) and the cooldown from there is done")
    return f"{why}; the best, {best['value']:.4f}, was at step {best['step']}"
