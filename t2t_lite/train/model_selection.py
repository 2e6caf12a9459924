"""Keeping a run's best model and stopping when it stops improving (not in the paper; fairseq's
--best-checkpoint-metric and --patience, Marian's --keep-best and --early-stopping).

At each evaluation the run's selection metric is compared with the best so far:
  - better: the weights just evaluated (the moving averages when the run keeps them) are
    written to model_dir/best/, a run directory of its own that decode, average and export
    take as it is, with best.json recording the metric, its value and the step;
  - otherwise the evaluations without improvement are counted.
This module keeps that record; what it means for the run (its cooldown starts at
`cooldown_patience` evaluations without improvement, the run stops at `patience` or when the
cooldown is done, and a resumed run that stopped does not train on) is decided by the run's
schedule (run_schedule.py), which has every decision to stop. Either way the exit status is 0,
with the reason printed and in best.json.
The record (best value and step, evaluations without improvement, where the cooldown started,
stopped) is in the trainer's checkpoints, so that a run resumed after SIGTERM or SIGKILL goes on
where it was (a cooldown by wall time starts again: the clock is not in a checkpoint).
"""
import math

import tensorflow as tf

from t2t_lite import errors
from t2t_lite.errors import RunFailure
from t2t_lite.rundir import run_files


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


def lower_is_better(metric):
  """Whether a lower value of the evaluation metric `metric` is better (the dev loss and
  perplexity; BLEU, bracket F1 and accuracy are better higher)."""
  return metric in ("loss", "perplexity")


class ModelSelection:
  """The best-so-far of one metric, the evaluations since it, and why the run stopped.

  Args:
    metric: the name of an evaluation metric ("loss" and "perplexity": lower is better).
    model_dir: the run directory, whose best/ it keeps.
    writes: whether this worker writes the run directory (the chief).
    log: where its lines go.
  """

  def __init__(self, metric, model_dir, writes=True, log=print):
    self.metric, self.model_dir, self.writes, self.log = metric, model_dir, writes, log
    self.best_dir = run_files.path(model_dir, run_files.BEST_DIR)
    self.lower_is_better = lower_is_better(metric)
    worst = math.inf if self.lower_is_better else -math.inf
    self.best_value = tf.Variable(worst, dtype=tf.float64, trainable=False, name="best_value")
    self.best_step = tf.Variable(-1, dtype=tf.int64, trainable=False, name="best_step")
    self.stale = tf.Variable(0, dtype=tf.int64, trainable=False, name="evals_without_gain")
    self.stopped = tf.Variable(False, trainable=False, name="stopped_early")
    self.cooldown_step = tf.Variable(-1, dtype=tf.int64, trainable=False, name="cooldown_step")
    self._why_stopped = ""  # Set by mark_stopped.

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
  def evaluations_without_gain(self):
    return int(self.stale.numpy())

  @property
  def cooling_since(self):
    """The step at which the metric stalled and the cooldown started, or None."""
    step = int(self.cooldown_step.numpy())
    return None if step < 0 else step

  @property
  def has_stopped(self):
    """Whether the run stopped early (a resumed run then does not train on)."""
    return bool(self.stopped.numpy())

  def best_so_far(self):
    best = self.record()
    return f"the best, {best['value']:.4f}, was at step {best['step']}"

  def start_cooldown(self, step, why):
    """Records that the cooldown starts at `step` (the schedule decided it, `why`)."""
    self.cooldown_step.assign(step)
    self.log(f"{self.metric} did not improve in {self.evaluations_without_gain} evaluation(s) "
             f"({why}): the learning rate falls to 0 over the cooldown from here, then the run "
             "stops")

  def mark_stopped(self, step, why):
    """Records that the run stopped early at `step`, and why, in best.json."""
    self.stopped.assign(True)
    self._why_stopped = why
    self._write_record(step)

  @property
  def stop_reason(self):
    return f"{self._why_stopped}; {self.best_so_far()}"

  def evaluated(self, step, metrics, save_weights):
    """Counts an evaluation; when `metrics` are the best so far, save_weights(best_dir) writes
    the weights evaluated there (every worker calls it), with the run files beside them.
    best.json records the best."""
    if self._improved(step, metrics):
      try:
        if self.writes:
          run_files.copy_run_files(self.model_dir, self.best_dir)
        save_weights(self.best_dir)
      except tf.errors.OpError as e:
        raise RunFailure(f"saving the best model (step {step}) in {self.best_dir} failed: "
                         f"{errors.reason(e)}") from None
      self.log(f"best {self.metric} so far: {float(metrics[self.metric]):.4f} at step {step}, "
               f"kept in {self.best_dir}")
    self._write_record(step)

  def _write_record(self, step):
    if self.writes:
      record = self.record()
      if self.has_stopped:
        record["stopped_early"] = {"step": step, "reason": self.stop_reason}
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
    return improved
