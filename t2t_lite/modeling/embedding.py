"""Shared token embedding / pre-softmax projection and positional encodings (sections 3.4, 3.5).

Shapes: B batch, T length, D d_model, V vocabulary.
"""
import math

import keras
import numpy as np
import tensorflow as tf

from t2t_lite.modeling import quantization


def sinusoid(positions, depth):
  """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d)).

  Interleaved exactly as section 3.5 writes it. positions int [...] -> float32 [..., depth].
  """
  two_i = np.arange(0, depth, 2, dtype=np.float32)  # 2i for each sin/cos pair
  inv_freq = tf.constant(1.0 / np.power(10000.0, two_i / depth), tf.float32)
  angles = tf.cast(positions, tf.float32)[..., None] * inv_freq  # [..., D/2]
  pe = tf.stack([tf.sin(angles), tf.cos(angles)], axis=-1)  # [..., D/2, 2]
  shape = (positions.shape.as_list() if positions.shape.is_fully_defined()
           else tf.shape(positions))
  return tf.reshape(pe, tf.concat([shape, [depth]], 0))  # interleaved sin, cos


def sinusoid_positions(length, depth, start=0):
  """PE of positions start .. start+length-1 -> float32 [length, depth]. `start` may be a
  scalar tensor (decode steps)."""
  return sinusoid(tf.range(length) + start, depth)


class SharedEmbedding(keras.layers.Layer):
  """One [V, D] matrix for source embeddings, target embeddings and the pre-softmax linear.

  Initialised N(0, D^-0.5) so that the embeddings times sqrt(D) (section 3.4) have unit scale.
  """

  def __init__(self, vocab_size, d_model, **kwargs):
    super().__init__(**kwargs)
    self.vocab_size = vocab_size
    self.d_model = d_model
    self.compiled = None  # a decoding model's pre-softmax [D, V] as quantization.matmul's

  def build(self, input_shape=None):
    self.embeddings = self.add_weight(
        name="embeddings", shape=(self.vocab_size, self.d_model),
        initializer=keras.initializers.RandomNormal(stddev=self.d_model ** -0.5))

  def call(self, ids):
    """int [B, T] -> [B, T, D], scaled by sqrt(d_model)."""
    x = tf.cast(tf.gather(self.embeddings, ids), self.compute_dtype)  # not the whole table
    return x * tf.cast(math.sqrt(self.d_model), x.dtype)

  def compile_kernels(self, int8):
    """For decoding (quantization.py): the pre-softmax projection multiplies by an XLA program
    of its own, with a copy of the matrix transposed (in int8 when `int8`, one scale per
    vocabulary row); the lookups keep reading the float32 table."""
    self.compiled = quantization.compiled_kernel(tf.transpose(self.embeddings), int8)  # [D, V]

  def output_rows(self, ids):
    """The pre-softmax matrix's rows of a shortlist, ids int32 [V'] -> [V', D] in the compute
    dtype (of a model with compiled kernels: their columns of that [D, V'], as
    quantization.matmul multiplies them): gathered once per batch, for `logits(x, rows)` at
    every decoding step."""
    if self.compiled is not None:
      return self.compiled.columns(ids)
    return tf.cast(tf.gather(self.embeddings, ids), self.compute_dtype)

  def logits(self, x, rows=None):
    """[B, T, D] -> float32 [B, T, V]: the pre-softmax projection with the same matrix, or with
    its `rows` [V', D] only (-> [B, T, V'])."""
    # A flat [B*T, D] x [D, V] matmul: the matrix gradient is then one matmul, where einsum's
    # "btv,btd->vd" made XLA transpose the whole [B, T, V] gradient first (seconds on CPU).
    flat = tf.reshape(tf.cast(x, self.compute_dtype), [-1, self.d_model])  # [B*T, D]
    if self.compiled is not None:
      kernel = self.compiled if rows is None else rows  # [D, V or V'] (quantization.py)
      logits, size = quantization.matmul(flat, kernel), tf.shape(kernel.values)[1:]
    else:
      matrix = self.embeddings if rows is None else rows  # [V, D]
      logits = tf.matmul(flat, tf.cast(matrix, flat.dtype), transpose_b=True)  # [B*T, V]
      size = tf.shape(matrix)[:1]
    logits = tf.reshape(logits, tf.concat([tf.shape(x)[:-1], size], 0))
    return tf.cast(logits, tf.float32)  # [B, T, V]

  def get_config(self):
    config = super().get_config()
    config.update(vocab_size=self.vocab_size, d_model=self.d_model)
    return config


class PositionEncoding(keras.layers.Layer):
  """Adds sinusoidal (default) or learned (Table 3 row E) position vectors to [B, T, D]."""

  def __init__(self, kind, max_length, d_model, **kwargs):
    super().__init__(**kwargs)
    self.kind = kind
    self.max_length = max_length
    self.d_model = d_model

  def build(self, input_shape=None):
    if self.kind == "learned":
      self.positions = self.add_weight(
          name="positions", shape=(self.max_length, self.d_model),
          initializer=keras.initializers.RandomNormal(stddev=self.d_model ** -0.5))

  def call(self, x, start=0, positions=None):
    """x [B, T, D] + the vectors of positions start, start+1, ... or, in packed rows, of
    `positions` int [B, T] (each example's own, restarting at 0)."""
    if positions is not None:
      pe = (tf.gather(self.positions, positions) if self.kind == "learned"
            else sinusoid(positions, self.d_model))  # [B, T, D]
      return x + tf.cast(pe, x.dtype)
    length = tf.shape(x)[1]
    if self.kind == "learned":
      pe = tf.slice(self.positions, [start, 0], [length, self.d_model])
    else:
      pe = sinusoid_positions(length, self.d_model, start)
    return x + tf.cast(pe, x.dtype)[None]  # [B, T, D]

  def get_config(self):
    config = super().get_config()
    config.update(kind=self.kind, max_length=self.max_length, d_model=self.d_model)
    return config
