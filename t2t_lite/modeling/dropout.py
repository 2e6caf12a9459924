"""Dropout (Srivastava et al. 2014; section 5.4 of the paper) with a hash-based mask.

Why not keras.layers.Dropout: under XLA on CPU its stateless RNG op is orders of magnitude
slower than this module's integer hash (figures: docs/benchmarks.md, "Design measurements");
TensorFlow's CPU kernels without XLA reject the fast Threefry algorithm; and under
MultiWorkerMirroredStrategy (TF 2.21) it fails with "counter must be a vector with length at
least 2". The mask here is a counter-based hash of (seed, element index) built from plain
integer ops: the same mask with or without XLA, on every device and strategy.

The seed comes from a keras.random.SeedGenerator, as for keras' Dropout: its state variable
[layer seed, counter] (`Dropout.seed_state`, all of a model's: `seed_states`) is what the
trainer sets before each micro-batch (`reseed`) and saves in checkpoints.
"""
import keras
import tensorflow as tf

# Counter values reserved for one micro-batch: each call of a layer draws one seed, and no layer
# is called this often in one forward pass (the embedding dropout, called twice, is the most).
DRAWS_PER_PASS = 1024


def _mix(x):
  """lowbias32 (C. Wellons): a bijective uint32 -> uint32 hash with near-ideal avalanche."""
  x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 16))
  x = x * tf.constant(0x7FEB352D, tf.uint32)
  x = tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 15))
  x = x * tf.constant(0x846CA68B, tf.uint32)
  return tf.bitwise.bitwise_xor(x, tf.bitwise.right_shift(x, 16))


def _to_uint32(x):
  return tf.bitcast(tf.cast(x, tf.int32), tf.uint32)  # keeps the low 32 bits


def keep_mask(shape, rate, seed):
  """-> bool tensor of `shape`, each element True with probability 1 - rate (to 2^-32),
  a function of seed ([2] ints) and the element's index only.

  One hash per element, of (element index + key), the key a hash of the seed. Masks of two
  seeds are then windows of one 2^32-long sequence at random offsets: they share elements only
  when the keys are closer than the mask's size (a probability of size / 2^31, 5e-4 for
  a 64 x 32 x 512 mask). The second full hash per element that this replaced
  cost a visible share of a CPU training step (docs/benchmarks.md, "Design measurements").
  """
  index = _to_uint32(tf.reshape(tf.range(tf.reduce_prod(shape), dtype=tf.int32), shape))
  seed = _to_uint32(seed)
  key = _mix(tf.bitwise.bitwise_xor(_mix(seed[0]), seed[1] + tf.constant(0x9E3779B9, tf.uint32)))
  bits = _mix(index + key)
  return bits >= tf.constant(min(int(rate * 2**32), 2**32 - 1), tf.uint32)


class Dropout(keras.layers.Layer):
  """Inverted dropout: in training, zero each element with probability `rate` and scale the
  rest by 1 / (1 - rate); the identity otherwise. Each call draws a new mask. With
  whole_vectors, the mask is drawn per vector of the last axis ([B, T, D]: per token)."""

  def __init__(self, rate, seed=None, whole_vectors=False, **kwargs):
    super().__init__(**kwargs)
    if not 0.0 <= rate < 1.0:
      raise ValueError(f"dropout rate must be in [0, 1), got {rate}")
    self.rate = rate
    self.seed = seed
    self.whole_vectors = whole_vectors
    self.seed_generator = keras.random.SeedGenerator(seed, name="seed_generator")
    self.built = True

  def call(self, x, training=False):
    if not training or self.rate == 0.0:
      return x
    shape = tf.shape(x)
    if self.whole_vectors:
      shape = tf.concat([shape[:-1], [1]], 0)  # [..., 1], broadcast over the last axis
    keep = keep_mask(shape, self.rate, self.seed_generator.next())
    return tf.where(keep, x * tf.cast(1.0 / (1.0 - self.rate), x.dtype), tf.zeros_like(x))

  def seed_state(self):
    """The variable [layer seed, counter] that the next mask's seed is drawn from."""
    return self.seed_generator.state

  def compute_output_shape(self, input_shape):
    return input_shape

  def get_config(self):
    config = super().get_config()
    config.update(rate=self.rate, seed=self.seed, whole_vectors=self.whole_vectors)
    return config


def seed_states(model):
  """The seed state variable of every `Dropout` inside `model` (any Keras layer)."""
  # Keras 3 has no public recursive walk over sublayers; _flatten_layers is what it uses itself.
  return [layer.seed_state() for layer in model._flatten_layers(include_self=True, recursive=True)
          if isinstance(layer, Dropout)]


def reseed(states, index):
  """Points every seed state at micro-batch `index` (int64 scalar): masks then depend on the
  index alone, not on what ran before (a resumed run, replicas, accumulated micro-batches)."""
  for state in states:  # [layer seed, counter]
    state.assign(tf.stack([state[0], tf.cast(index * DRAWS_PER_PASS, state.dtype)]))
