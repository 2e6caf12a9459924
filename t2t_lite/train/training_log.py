"""What a training run reports: a progress line (mean loss, learning rate, tokens/s, gradient
norm, ETA) every log_every steps, each evaluation's metrics, and the same figures as TensorBoard
scalars in the run directory's train/ and eval/ folders (written by the chief only).
"""
import time

import tensorflow as tf

from t2t_lite.data.progress import hms
from t2t_lite.rundir import run_files


def summary_writers(model_dir):
  """{"train": writer, "eval": writer} of the run directory's TensorBoard folders."""
  return {name: tf.summary.create_file_writer(run_files.path(model_dir, name))
          for name in (run_files.TRAIN_SUMMARIES, run_files.EVAL_SUMMARIES)}


_EVAL_LINE = "eval at step "  # An evaluation's line: "eval at step N: name value  name value"


def parse_eval_line(line):
  """(step, {metric: value}) of an evaluation's line as TrainingLog writes it, or None for any
  other line: how t2t-lite-tune follows a trainer it runs. The numbers have 4 decimals; string
  values (a BLEU's signature) are left out."""
  if not line.startswith(_EVAL_LINE) or ": " not in line:
    return None
  step, _, rest = line[len(_EVAL_LINE):].partition(": ")
  metrics = {}
  for item in rest.strip().split("  "):
    name, _, value = item.partition(" ")
    try:
      metrics[name] = float(value)
    except ValueError:
      continue  # a string value
  return (int(step), metrics) if step.isdigit() else None


class TrainingLog:
  """One run's log: progress windows, evaluations and summaries.

  Args:
    schedule: the run's RunSchedule (which steps log; the time left, for the ETA).
    learning_rate: learning_rate(step) -> the rate step `step` used, a float.
    log: where lines go.
    writers: summary_writers(model_dir), or None (a worker that does not write).
  """

  def __init__(self, schedule, learning_rate, log, writers=None):
    self.schedule, self.learning_rate, self.log = schedule, learning_rate, log
    self.writers = writers or {}
    self.history, self.eval_metrics, self.eval_step = [], None, None
    self._new_window()

  def _new_window(self):
    self.window_start, self.tokens, self.loss_sum, self.steps = time.time(), 0.0, 0.0, 0

  def add(self, step, n, loss, tokens, grad_norm):
    """Counts `n` steps ending at `step`; logs the window's means when the schedule says."""
    self.tokens += tokens
    self.loss_sum += loss * n
    self.steps += n
    if not self.schedule.logs_at(step):
      return
    train_steps = self.schedule.config.train_steps
    elapsed = time.time() - self.window_start
    rate = self.tokens / max(elapsed, 1e-9)
    mean_loss = self.loss_sum / self.steps
    lr = self.learning_rate(step)
    eta = (train_steps - step) * elapsed / self.steps
    seconds_left = self.schedule.seconds_left()
    if seconds_left is not None:  # The run ends at whichever comes first.
      eta = min(eta, seconds_left)
    self.log(f"step {step}/{train_steps}  loss {mean_loss:.4f}  lr {lr:.3e}  "
             f"{rate:,.0f} tok/s  grad_norm {grad_norm:.3f}  ETA {hms(eta)}")
    self.history.append((step, mean_loss))
    self._write(run_files.TRAIN_SUMMARIES, step, {
        "loss": mean_loss, "learning_rate": lr, "tokens_per_second": rate,
        "gradient_norm": grad_norm})
    self._new_window()

  def evaluated(self, step, metrics):
    self.eval_metrics, self.eval_step = metrics, step
    self.log(f"{_EVAL_LINE}{step}: " + "  ".join(
        f"{k} {v}" if isinstance(v, str) else f"{k} {v:.4f}"  # str: a BLEU's signature
        for k, v in metrics.items() if k != "tokens"))
    self._write(run_files.EVAL_SUMMARIES, step,
                {k: v for k, v in metrics.items() if not isinstance(v, str)})

  def _write(self, name, step, scalars):
    if not self.writers:
      return
    with self.writers[name].as_default(step=step):
      for tag, value in scalars.items():
        tf.summary.scalar(tag, value)

  def close(self):
    for writer in self.writers.values():
      writer.flush()
