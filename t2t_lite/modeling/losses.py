"""Label-smoothed cross entropy (section 5.4) and token accuracy, over non-padding targets.

Both return (sum, count) rather than a mean, so that the trainer can divide by the GLOBAL number
of target tokens across replicas and accumulation steps: the mean is then the same whatever the
device count (tensor2tensor's per-GPU averaging changed results with the hardware).
Shapes: B batch, T target length, V vocabulary.
"""
import tensorflow as tf


def target_weights(targets):
  """targets int [B, T] -> float32 [B, T]: 1 for a target token, 0 for padding (id 0)."""
  return tf.cast(tf.not_equal(targets, 0), tf.float32)


def smoothed_cross_entropy(logits, targets, smoothing):
  """logits float [B, T, V], targets int [B, T] (0 = padding) -> (loss sum, token count).

  The smoothed target q puts 1 - smoothing on the true token and smoothing / (V - 1) on each
  other token (tensor2tensor's convention). Computed without materialising a one-hot [B, T, V].
  """
  weights = target_weights(targets)  # [B, T]
  return tf.reduce_sum(_token_losses(logits, targets, smoothing) * weights), tf.reduce_sum(weights)


def _token_losses(logits, targets, smoothing):
  """-> [B, T] cross entropy of each token against its smoothed target q."""
  logits = tf.cast(logits, tf.float32)
  vocab_size = tf.cast(tf.shape(logits)[-1], tf.float32)
  log_normalizer = tf.reduce_logsumexp(logits, axis=-1)  # [B, T]
  true_log_prob = tf.gather(logits, targets, batch_dims=2) - log_normalizer  # [B, T]
  loss = -(1.0 - smoothing) * true_log_prob
  if smoothing:
    off_value = smoothing / (vocab_size - 1.0)  # q of every other token
    sum_log_probs = tf.reduce_sum(logits, axis=-1) - vocab_size * log_normalizer  # [B, T]
    loss -= off_value * (sum_log_probs - true_log_prob)
  return loss


def rdrop_loss(logits, targets, smoothing, weight):
  """R-Drop (Liang et al. 2021): logits float [2B, T, V] of one batch run twice with different
  dropout masks (targets [2B, T], the batch twice) -> (loss sum, cross-entropy sum), both over
  the tokens of ONE copy: the two copies' smoothed cross entropies averaged, plus weight / 4
  times the symmetric KL divergence between their distributions. That is the paper's loss
  halved, so `weight` is its alpha and the loss stays on the cross entropy's scale."""
  weights = target_weights(targets)  # [2B, T]
  ce_sum = tf.reduce_sum(_token_losses(logits, targets, smoothing) * weights) / 2.0
  log_p1, log_p2 = tf.split(tf.nn.log_softmax(tf.cast(logits, tf.float32)), 2)  # [B, T, V] each
  # KL(p1 || p2) + KL(p2 || p1) = sum_v (p1 - p2) (log p1 - log p2): [B, T]
  kl = tf.reduce_sum((tf.exp(log_p1) - tf.exp(log_p2)) * (log_p1 - log_p2), axis=-1)
  return ce_sum + weight / 4.0 * tf.reduce_sum(kl * tf.split(weights, 2)[0]), ce_sum


# For a training step without XLA of its own: XLA fuses the loss and its gradient into a few
# passes over the [B, T, V] logits, the largest tensor of the step, where TensorFlow's kernels
# make one pass per op (docs/benchmarks.md, 2026-11-28). Not for a step under XLA: there it is
# fused anyway, and an XLA function nested in another made a small model's step take seconds.
xla_smoothed_cross_entropy = tf.function(smoothed_cross_entropy, jit_compile=True,
                                         autograph=False)
xla_rdrop_loss = tf.function(rdrop_loss, jit_compile=True, autograph=False)


def token_accuracy(logits, targets):
  """-> (number of non-padding targets predicted exactly by argmax, token count)."""
  predictions = tf.argmax(logits, axis=-1, output_type=targets.dtype)  # [B, T]
  weights = target_weights(targets)
  correct = tf.cast(tf.equal(predictions, targets), tf.float32) * weights
  return tf.reduce_sum(correct), tf.reduce_sum(weights)
