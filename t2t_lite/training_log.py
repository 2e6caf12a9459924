"""What a training run reports: a progress line (mean loss, learning rate, tokens/s, gradient
norm, ETA) every log_every steps, each evaluation's metrics, and the same figures as TensorBoard
scalars in model_dir/train and model_dir/eval (written by the chief only).
"""
import os
import time

import tensorflow as tf

from t2t_lite.progress import hms


class TrainingLog:
  """One run's log: progress windows, evaluations, summaries, and when the time is up."""

  def __init__(self, trainer):
    self.trainer, self.config, self.log = trainer, trainer.config, trainer.log
    self.writers = {}
    if trainer.is_chief:
      self.writers = {name: tf.summary.create_file_writer(
          os.path.join(self.config.model_dir, name)) for name in ("train", "eval")}
    self.history, self.eval_metrics, self.eval_step = [], None, None
    self.run_start = time.time()
    self._new_window()

  def _new_window(self):
    self.window_start, self.tokens, self.loss_sum, self.steps = time.time(), 0.0, 0.0, 0

  def out_of_time(self):
    minutes = self.config.train_minutes
    return bool(minutes) and time.time() - self.run_start >= minutes * 60

  def cooldown_factor(self):
    """1 until the last cooldown_minutes of train_minutes, then falling linearly to 0."""
    remaining = self.config.train_minutes * 60 - (time.time() - self.run_start)
    return min(1.0, max(0.0, remaining / (self.config.cooldown_minutes * 60)))

  def add(self, step, n, loss, tokens, grad_norm):
    """Counts `n` steps ending at `step`; logs the window's means every log_every steps."""
    config = self.config
    self.tokens += tokens
    self.loss_sum += loss * n
    self.steps += n
    if step % config.log_every and step != config.train_steps:
      return
    elapsed = time.time() - self.window_start
    rate = self.tokens / max(elapsed, 1e-9)
    mean_loss = self.loss_sum / self.steps
    lr = float(self.trainer.schedule(step - 1))
    eta = (config.train_steps - step) * elapsed / self.steps
    if config.train_minutes:  # the run ends at whichever comes first
      eta = min(eta, max(0.0, config.train_minutes * 60 - (time.time() - self.run_start)))
    self.log(f"step {step}/{config.train_steps}  loss {mean_loss:.4f}  lr {lr:.3e}  "
             f"{rate:,.0f} tok/s  grad_norm {grad_norm:.3f}  ETA {hms(eta)}")
    self.history.append((step, mean_loss))
    self._write("train", step, {"loss": mean_loss, "learning_rate": lr,
                                "tokens_per_second": rate, "gradient_norm": grad_norm})
    self._new_window()

  def evaluated(self, step, metrics):
    self.eval_metrics, self.eval_step = metrics, step
    self.log(f"eval at step {step}: " + "  ".join(
        f"{k} {v}" if isinstance(v, str) else f"{k} {v:.4f}"  # str: a BLEU's signature
        for k, v in metrics.items() if k != "tokens"))
    self._write("eval", step, {k: v for k, v in metrics.items() if not isinstance(v, str)})

  def _write(self, name, step, scalars):
    if not self.writers:
      return
    with self.writers[name].as_default(step=step):
      for tag, value in scalars.items():
        tf.summary.scalar(tag, value)

  def close(self):
    for writer in self.writers.values():
      writer.flush()
