"""The paper's optimizer (section 5.3): Adam(0.9, 0.98, 1e-9) with warmup then inverse sqrt decay.

Not in the paper: an optional linear cooldown to zero (hparams cooldown_start, cooldown_steps),
for runs of a fixed budget, whose last checkpoints otherwise still move at a high rate (WSD
schedules do the same; bench/ptb_quality.sh uses it, docs/parsing.md has the measurement)."""
import keras
import tensorflow as tf


def learning_rate(step, d_model, warmup_steps, multiplier=1.0, cooldown_start=0,
                  cooldown_steps=0):
  """lrate = multiplier * d_model^-0.5 * min(step^-0.5, step * warmup_steps^-1.5), step >= 1;
  with cooldown_steps > 0, times a factor falling linearly from 1 at cooldown_start to 0 at
  cooldown_start + cooldown_steps (and 0 after)."""
  step = tf.maximum(tf.cast(step, tf.float32), 1.0)
  warmup = tf.cast(max(warmup_steps, 1), tf.float32)
  rate = multiplier * d_model ** -0.5 * tf.minimum(step ** -0.5, step * warmup ** -1.5)
  if cooldown_steps:
    rate *= tf.clip_by_value((cooldown_start + cooldown_steps - step) / cooldown_steps, 0., 1.)
  return rate


@keras.saving.register_keras_serializable("t2t_lite")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
  """Keras schedule for `learning_rate`. Keras counts optimizer iterations from 0; update k is
  the paper's step_num k + 1, so the first update uses lrate(1), not 0."""

  def __init__(self, d_model, warmup_steps, multiplier=1.0, cooldown_start=0, cooldown_steps=0,
               scale=None):
    self.d_model = d_model
    self.warmup_steps = warmup_steps
    self.multiplier = multiplier
    self.cooldown_start, self.cooldown_steps = cooldown_start, cooldown_steps
    self.scale = scale  # A variable the rate is multiplied by (the trainer's wall-clock cooldown)

  @classmethod
  def of(cls, hparams, scale=None):
    return cls(hparams.d_model, hparams.warmup_steps, hparams.learning_rate,
               hparams.cooldown_start, hparams.cooldown_steps, scale)

  def __call__(self, iteration):
    rate = learning_rate(iteration + 1, self.d_model, self.warmup_steps, self.multiplier,
                         self.cooldown_start, self.cooldown_steps)
    return rate if self.scale is None else rate * self.scale

  def get_config(self):
    return {"d_model": self.d_model, "warmup_steps": self.warmup_steps,
            "multiplier": self.multiplier, "cooldown_start": self.cooldown_start,
            "cooldown_steps": self.cooldown_steps}


@keras.saving.register_keras_serializable("t2t_lite")
class Adam(keras.optimizers.Adam):
  """keras' Adam, its dense update done by TensorFlow's fused ResourceApplyAdam kernel: the same
  formula (Kingma and Ba's with epsilon outside the square root, as keras writes it) and the
  same slot variables, so checkpoints are unchanged. keras applies it as eight elementwise ops
  over every weight, each a pass over memory; without XLA that was a visible share of a CPU
  step (docs/benchmarks.md, 2026-11-28). keras' own update remains for sparse gradients and
  AMSGrad."""

  def update_step(self, gradient, variable, learning_rate):
    if self.amsgrad or isinstance(gradient, tf.IndexedSlices):
      return super().update_step(gradient, variable, learning_rate)
    index = self._get_variable_index(variable)
    if isinstance(variable, keras.Variable):
      variable = variable.value  # the tf.Variable it holds
    dtype = variable.dtype
    step = tf.cast(self.iterations + 1, dtype)

    def scalar(x):
      return tf.cast(x, dtype)

    tf.raw_ops.ResourceApplyAdam(
        var=variable.handle, m=self._momentums[index].value.handle,
        v=self._velocities[index].value.handle,
        beta1_power=tf.pow(scalar(self.beta_1), step),
        beta2_power=tf.pow(scalar(self.beta_2), step),
        lr=scalar(learning_rate), beta1=scalar(self.beta_1), beta2=scalar(self.beta_2),
        epsilon=scalar(self.epsilon), grad=tf.cast(gradient, dtype))


def make_optimizer(hparams, lr_schedule=None):
  """Adam with the paper's betas and epsilon and the schedule above (or `lr_schedule`); with
  hparams.weight_decay, decoupled weight decay (AdamW) on all but LayerNorm gains and biases."""
  lr_schedule = lr_schedule or TransformerSchedule.of(hparams)
  optimizer = Adam(
      learning_rate=lr_schedule, beta_1=hparams.adam_beta1, beta_2=hparams.adam_beta2,
      epsilon=hparams.adam_epsilon, weight_decay=hparams.weight_decay or None)
  if hparams.weight_decay:
    optimizer.exclude_from_weight_decay(var_names=["gamma", "beta", "bias"])
  return optimizer
