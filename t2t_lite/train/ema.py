"""An exponential moving average of the weights (not in the paper; fairseq's --ema-decay,
OpenNMT-tf's moving_average_decay, Marian's --exponential-smoothing).

After optimizer step t (t = 1, 2, ...), inside the step, every average moves towards its weight:

  average <- d_t * average + (1 - d_t) * weight,   d_t = min(decay, (1 + t) / (10 + t))

TensorFlow's ExponentialMovingAverage rule with num_updates: early steps, whose weights are
still far from where training goes, fade quickly. The averages start as the initial weights, are
saved in every checkpoint as `ema` (run_files.EMA: a list in the model's trainable-variable
order), and are
what evaluation, the best checkpoint, decode and export use when the run has them
(t2t_lite/rundir/checkpoints.py's restore_model).
"""
import contextlib

import tensorflow as tf


class WeightAverage:
  """The moving averages of `variables` (a model's trainable variables), made under the
  strategy's scope so that each replica holds a copy, as it does of the weights."""

  def __init__(self, variables, decay):
    if not 0 < decay < 1:
      raise ValueError(f"decay must be in (0, 1), got {decay}")
    self.variables, self.decay = list(variables), decay
    # Every replica computes the same update (the weights are equal after the all-reduce):
    # the first replica's is kept.
    self.averages = [
        tf.Variable(v, trainable=False, name=f"ema_{i}",
                    aggregation=tf.VariableAggregation.ONLY_FIRST_REPLICA)
        for i, v in enumerate(self.variables)]

  def update(self, step):
    """After optimizer step `step` (int64 scalar, 1 for the first): inside the train step."""
    t = tf.cast(step, tf.float32)
    decay = tf.minimum(self.decay, (1.0 + t) / (10.0 + t))
    for average, weight in zip(self.averages, self.variables):
      average.assign(decay * average + (1.0 - decay) * tf.cast(weight, average.dtype))

  def reset(self):
    """Averages equal to the weights now (a run that starts from restored weights)."""
    for average, weight in zip(self.averages, self.variables):
      average.assign(weight)

  @contextlib.contextmanager
  def swapped(self):
    """While entered, the model's weights are the averages (and the averages its weights):
    for evaluating or saving the averaged model. Swapped back afterwards."""
    self._swap()
    try:
      yield
    finally:
      self._swap()

  def _swap(self):
    for average, weight in zip(self.averages, self.variables):
      value = tf.identity(weight)
      weight.assign(average)
      average.assign(value)
