"""Label-smoothed cross entropy (section 5.4) and token accuracy, over non-padding targets.

Both return (sum, count) rather than a mean, so that the trainer can divide by the GLOBAL number
of target tokens across replicas and accumulation steps: the mean is then the same whatever the
device count (tensor2tensor's per-GPU averaging changed results with the hardware).
Shapes: B batch, T target length, V vocabulary.
"""
import tensorflow as tf


def smoothed_cross_entropy(logits, targets, smoothing):
  """logits float [B, T, V], targets int [B, T] (0 = padding) -> (loss sum, token count).

  The smoothed target q puts 1 - smoothing on the true token and smoothing / (V - 1) on each
  other token (tensor2tensor's convention). Computed without materialising a one-hot [B, T, V].
  """
  logits = tf.cast(logits, tf.float32)
  weights = tf.cast(tf.not_equal(targets, 0), tf.float32)  # [B, T]
  return tf.reduce_sum(_token_losses(logits, targets, smoothing) * weights), tf.reduce_sum(weights)


def _token_losses(logits, targets, smoothing):
  """-> [B, T] cross entropy of each token against its smoothed target q.

  The gradient is written by hand, d loss / d logits = softmax(logits) - q: three passes over
  [B, T, V] where autodiff of the formula took about ten (log-sum-exp, the sum over V, and a
  dense scatter for the gather). Without XLA that makes forward and backward markedly faster
  (docs/benchmarks.md, "Design measurements"); XLA fused either form.
  """
  vocab_size = tf.cast(tf.shape(logits)[-1], tf.float32)
  off_value = smoothing / (vocab_size - 1.0)  # q of every other token

  @tf.custom_gradient
  def token_losses(logits):
    max_logit = tf.stop_gradient(tf.reduce_max(logits, axis=-1, keepdims=True))  # [B, T, 1]
    exp = tf.exp(logits - max_logit)  # [B, T, V], kept for the gradient
    sum_exp = tf.reduce_sum(exp, axis=-1)  # [B, T]
    log_normalizer = tf.math.log(sum_exp) + max_logit[..., 0]  # [B, T]
    true_log_prob = tf.gather(logits, targets, batch_dims=2) - log_normalizer  # [B, T]
    loss = -(1.0 - smoothing) * true_log_prob
    if smoothing:
      sum_log_probs = tf.reduce_sum(logits, axis=-1) - vocab_size * log_normalizer  # [B, T]
      loss -= off_value * (sum_log_probs - true_log_prob)

    def grad(upstream):  # upstream [B, T] -> upstream * (softmax - q) [B, T, V]
      g = exp * (upstream / sum_exp)[..., None] - (upstream * off_value)[..., None]
      # The true token's q is 1 - smoothing, not off_value: subtract the difference there.
      shape = tf.shape(g)
      flat = tf.reshape(g, [-1, shape[-1]])  # [B*T, V]
      rows = tf.range(tf.shape(flat)[0])
      at = tf.stack([rows, tf.reshape(tf.cast(targets, rows.dtype), [-1])], axis=1)  # [B*T, 2]
      difference = tf.reshape(upstream * (1.0 - smoothing - off_value), [-1])  # [B*T]
      return tf.reshape(tf.tensor_scatter_nd_sub(flat, at, difference), shape)

    return loss, grad

  return token_losses(logits)


def token_accuracy(logits, targets):
  """-> (number of non-padding targets predicted exactly by argmax, token count)."""
  predictions = tf.argmax(logits, axis=-1, output_type=targets.dtype)  # [B, T]
  weights = tf.cast(tf.not_equal(targets, 0), tf.float32)
  correct = tf.cast(tf.equal(predictions, targets), tf.float32) * weights
  return tf.reduce_sum(correct), tf.reduce_sum(weights)
