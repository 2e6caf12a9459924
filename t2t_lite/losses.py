"""Label-smoothed cross entropy (section 5.4) and token accuracy, over non-padding targets.

Both return (sum, count) rather than a mean, so that the trainer can divide by the GLOBAL number
of target tokens across replicas and accumulation steps: the mean is then the same whatever the
device count (tensor2tensor's per-GPU averaging changed results with the hardware).
Shapes: B batch, T target length, V vocabulary.
"""
import tensorflow as tf


def smoothed_cross_entropy(logits, targets, smoothing):
  """logits float [B, T, V], targets int [B, T] (0 = padding) -> (loss sum, token count).

  The smoothed target puts 1 - smoothing on the true token and smoothing / (V - 1) on each
  other token (tensor2tensor's convention). Computed without materialising a one-hot [B, T, V].
  """
  logits = tf.cast(logits, tf.float32)
  vocab_size = tf.cast(tf.shape(logits)[-1], tf.float32)
  log_probs = tf.nn.log_softmax(logits)  # [B, T, V]
  true_log_prob = tf.gather(log_probs, targets, batch_dims=2)  # [B, T]
  loss = -(1.0 - smoothing) * true_log_prob
  if smoothing:
    others = tf.reduce_sum(log_probs, axis=-1) - true_log_prob  # [B, T]
    loss -= smoothing / (vocab_size - 1.0) * others
  weights = tf.cast(tf.not_equal(targets, 0), tf.float32)  # [B, T]
  return tf.reduce_sum(loss * weights), tf.reduce_sum(weights)


def token_accuracy(logits, targets):
  """-> (number of non-padding targets predicted exactly by argmax, token count)."""
  predictions = tf.argmax(logits, axis=-1, output_type=targets.dtype)  # [B, T]
  weights = tf.cast(tf.not_equal(targets, 0), tf.float32)
  correct = tf.cast(tf.equal(predictions, targets), tf.float32) * weights
  return tf.reduce_sum(correct), tf.reduce_sum(weights)
