"""The paper's optimizer (section 5.3): Adam(0.9, 0.98, 1e-9) with warmup then inverse sqrt decay."""
import keras
import tensorflow as tf


def learning_rate(step, d_model, warmup_steps, multiplier=1.0):
  """lrate = multiplier * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5), step >= 1."""
  step = tf.maximum(tf.cast(step, tf.float32), 1.0)
  warmup = tf.cast(max(warmup_steps, 1), tf.float32)
  return multiplier * d_model ** -0.5 * tf.minimum(step ** -0.5, step * warmup ** -1.5)


@keras.saving.register_keras_serializable("t2t_lite")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
  """Keras schedule for `learning_rate`. Keras counts optimizer iterations from 0; update k is
  the paper's step_num k + 1, so the first update uses lrate(1), not 0."""

  def __init__(self, d_model, warmup_steps, multiplier=1.0):
    self.d_model = d_model
    self.warmup_steps = warmup_steps
    self.multiplier = multiplier

  def __call__(self, iteration):
    return learning_rate(iteration + 1, self.d_model, self.warmup_steps, self.multiplier)

  def get_config(self):
    return {"d_model": self.d_model, "warmup_steps": self.warmup_steps,
            "multiplier": self.multiplier}


def make_optimizer(hparams):
  """Adam with the paper's betas and epsilon and the schedule above."""
  schedule = TransformerSchedule(hparams.d_model, hparams.warmup_steps, hparams.learning_rate)
  return keras.optimizers.Adam(learning_rate=schedule, beta_1=hparams.adam_beta1,
                               beta_2=hparams.adam_beta2, epsilon=hparams.adam_epsilon)
