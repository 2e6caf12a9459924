"""Keeping a run's best model and stopping when it stops improving (not in the paper; fairseq's
--best-checkpoint-metric and --patience, Marian's --keep-best and --early-stopping).

At each evaluation the run's selection metric is compared with the best so far:
  - better: the weights just evaluated (the moving averages when the run keeps them) are
    written to model_dir/best/, a run directory of its own that decode, average and export
    take as it is, with best.json recording the metric, its value and the step;
  - otherwise the evaluations without improvement are counted; at `patience` the run stops
    (exit status 0), with the reason printed and in best.json, and a resumed run does not train
    on.
The state (best value and step, evaluations without improvement, stopped) is in the trainer's
checkpoints, so that a run resumed after SIGTERM or SIGKILL goes on exactly where it was.
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
    model_dir: the run directory, whose best/ it keeps.
    writes: whether this worker writes the run directory (the chief).
    log: where its lines go.
  """

  def __init__(self, metric, patience, model_dir, writes=True, log=print):
    self.metric, self.patience = metric, patience
    self.best_dir, self.model_dir = run_files.path(model_dir, run_files.BEST_DIR), model_dir
    self.writes, self.log = writes, log
    self.lower_is_better = metric in ("loss", "perplexity")
    worst = math.inf if self.lower_is_better else -math.inf
    self.best_value = tf.Variable(worst, dtype=tf.float64, trainable=False, name="best_value")
    self.best_step = tf.Variable(-1, dtype=tf.int64, trainable=False, name="best_step")
    self.stale = tf.Variable(0, dtype=tf.int64, trainable=False, name="evals_without_gain")
    self.stopped = tf.Variable(False, trainable=False, name="stopped_early")

  def checkpoint_objects(self):
    """The state that goes into the trainer's checkpoints."""
    return {"best_value": self.best_value, "best_step": self.best_step, "stale": self.stale,
            "stopped": self.stopped}

  def record(self):
    """What best.json says."""
    return {"metric": self.metric, "value": float(self.best_value.numpy()),
            "step": int(self.best_step.numpy())}

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
      if self.patience is not None and int(self.stale.numpy()) >= self.patience:
        self.stopped.assign(True)
    return improved

  @property
  def should_stop(self):
    return bool(self.stopped.numpy())

  def stop_reason(self):
    best = self.record()
    return (f"{self.metric} did not improve in {int(self.stale.numpy())} evaluations "
            f"(patience {self.patience}); the best, {best['value']:.4f}, was at step "
            f"{best['step']}")
