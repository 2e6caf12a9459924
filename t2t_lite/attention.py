"""Multi-head scaled dot-product attention (section 3.2) and the masks it uses.

Shapes: B batch, T query length, S key/memory length, L decode cache length, D d_model,
H heads, K d_k (query/key depth per head), V d_v (value depth per head).
Masks are additive biases (0 where attention is allowed, -1e9 where not), built once per batch
by the helpers below and broadcast over heads and queries.
"""
import keras
import tensorflow as tf

from t2t_lite.dropout import Dropout

NEG_INF = -1e9


def padding_bias(ids):
  """int [B, S] token ids -> float32 [B, 1, 1, S] bias hiding padding (id 0) keys."""
  return tf.cast(tf.equal(ids, 0), tf.float32)[:, None, None, :] * NEG_INF


def segment_bias(query_segments, key_segments):
  """Packed rows (packing.py): int [B, T], [B, S] segment ids (0 = padding) -> float32
  [B, 1, T, S] bias letting a query attend only to keys of its own example."""
  same = tf.equal(query_segments[:, :, None], key_segments[:, None, :])  # [B, T, S]
  allowed = tf.logical_and(same, tf.not_equal(key_segments, 0)[:, None, :])
  return (1.0 - tf.cast(allowed, tf.float32))[:, None] * NEG_INF


def causal_bias(length):
  """-> float32 [1, 1, T, T] bias hiding every later position from each query (section 3.2.3)."""
  allowed = tf.linalg.band_part(tf.ones([length, length]), -1, 0)  # lower triangle
  return ((1.0 - allowed) * NEG_INF)[None, None]


def cache_bias(index, cache_length):
  """-> float32 [1, 1, 1, L] bias hiding cache slots after `index` (not yet written)."""
  return tf.cast(tf.range(cache_length) > index, tf.float32)[None, None, None, :] * NEG_INF


class Projection(keras.layers.Layer):
  """The weights of one projection: `kernel` [..., out] and `bias`, created here and applied by
  MultiHeadAttention's own matmuls (which batch several projections into one).

  The first `input_axes` axes of the kernel meet the input, the others make the output.
  Initialised as keras' EinsumDense was (Glorot uniform with fan_in / fan_out over those axes,
  zero bias); the kernel's attribute is `_kernel`, as there, so checkpoints written with
  EinsumDense sublayers restore into these."""

  def __init__(self, kernel_shape, bias_shape, input_axes=1, **kwargs):
    super().__init__(**kwargs)
    self.kernel_shape, self.bias_shape = tuple(kernel_shape), tuple(bias_shape)
    self.input_axes = input_axes
    self.kernel_initializer = keras.initializers.GlorotUniform(
        input_axes=list(range(input_axes)),
        output_axes=list(range(input_axes, len(self.kernel_shape))))

  def build(self, input_shape=None):
    self._kernel = self.add_weight(name="kernel", shape=self.kernel_shape,
                                   initializer=self.kernel_initializer)
    self.bias = self.add_weight(name="bias", shape=self.bias_shape, initializer="zeros")
    self.built = True

  @property
  def kernel(self):
    return self._kernel

  def get_config(self):
    config = super().get_config()
    config.update(kernel_shape=self.kernel_shape, bias_shape=self.bias_shape,
                  input_axes=self.input_axes)
    return config


class MultiHeadAttention(keras.layers.Layer):
  """MultiHead(Q, K, V) = Concat(head_1..head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

  The h per-head projections are held as one [D, H, K] kernel each (same parameters as h
  separate matrices, one matmul). Softmax runs in float32 even under mixed precision.
  """

  def __init__(self, num_heads, key_depth, value_depth, output_depth, dropout=0.0, **kwargs):
    super().__init__(**kwargs)
    self.num_heads = num_heads
    self.key_depth = key_depth
    self.value_depth = value_depth
    self.output_depth = output_depth
    self.dropout = dropout

  def build(self, query_shape, memory_shape=None):
    heads, k, v = self.num_heads, self.key_depth, self.value_depth
    query_depth = query_shape[-1]
    memory_depth = (memory_shape or query_shape)[-1]
    self.query_dense = Projection([query_depth, heads, k], [heads, k], name="query")  # W^Q
    self.key_dense = Projection([memory_depth, heads, k], [heads, k], name="key")  # W^K
    self.value_dense = Projection([memory_depth, heads, v], [heads, v], name="value")  # W^V
    self.output_dense = Projection([heads, v, self.output_depth], [self.output_depth],
                                   input_axes=2, name="output")  # W^O
    for layer in (self.query_dense, self.key_dense, self.value_dense, self.output_dense):
      layer.build()
    self.weight_dropout = Dropout(self.dropout)

  def _project(self, x, layers):
    """Applies one or more of the [D, H, *] projections to the same x [B, T, D] -> a list of
    [B, T, H, *].

    Over a sequence, as ONE flat [B*T, D] x [D, H*(K+K+V)] matmul: it keeps the CPU's matrix
    units busier than three narrow ones, and oneDNN fuses its bias add; the concat of the
    kernels is small next to it. In a decoding step (T = 1) the concat and the split cost more
    than the B rows' matmuls gain by being one, so each projection is applied on its own.
    """
    if x.shape[1] == 1 and len(layers) > 1:
      return [self._project(x, [layer])[0] for layer in layers]
    depth = x.shape[-1]
    kernel = tf.concat([tf.cast(layer.kernel, x.dtype) for layer in layers], axis=-1)
    bias = tf.concat([tf.cast(layer.bias, x.dtype) for layer in layers], axis=-1)
    flat = tf.matmul(tf.reshape(x, [-1, depth]), tf.reshape(kernel, [depth, -1]))
    flat = tf.nn.bias_add(flat, tf.reshape(bias, [-1]))  # [B*T, H*(K+K+V)]
    projected = tf.reshape(flat, tf.concat([tf.shape(x)[:2], tf.shape(bias)], 0))
    if len(layers) == 1:
      return [projected]
    return tf.split(projected, [layer.kernel.shape[-1] for layer in layers], axis=-1)

  def _output(self, context):
    """W^O: context [B, T, H, V] -> [B, T, D], as a flat [B*T, H*V] x [H*V, D] matmul."""
    kernel = tf.cast(self.output_dense.kernel, context.dtype)  # [H, V, D]
    flat = tf.reshape(context, [-1, self.num_heads * self.value_depth])  # [B*T, H*V]
    flat = tf.matmul(flat, tf.reshape(kernel, [-1, self.output_depth]))
    flat = tf.nn.bias_add(flat, tf.cast(self.output_dense.bias, context.dtype))  # [B*T, D]
    return tf.reshape(flat, tf.concat([tf.shape(context)[:2], [self.output_depth]], 0))

  def project_memory(self, memory):
    """[B, S, D] -> keys [B, S, H, K], values [B, S, H, V]: computed once for a cached decode."""
    memory = tf.cast(memory, self.compute_dtype)  # Called directly, not through Keras' cast.
    return tuple(self._project(memory, [self.key_dense, self.value_dense]))

  def call(self, query, memory=None, bias=None, cache=None, decode_index=None,
           training=None, return_attention=False, cache_rows=None):
    """Attends from `query` [B, T, D] to `memory` [B, S, D] (self-attention when None).

    With `cache` (dict with "k", "v" [B, L, H, K/V]) and `decode_index`, this is one step of
    incremental self-attention: the new key/value is written at `decode_index` and the query
    attends to slots 0..decode_index. With a cache holding only "k", "v" and no decode_index,
    the cached keys/values are used as they are (encoder-decoder attention while decoding).
    Returns the output [B, T, D] and the updated cache (and the weights with return_attention).

    `cache_rows` int [B, L] (beam search without cache reordering, see beam_search.py): row b's
    key/value of slot t is read from cache row cache_rows[b, t]; the new one is written to row b.
    """
    if cache is not None and decode_index is not None:  # one step of cached self-attention
      q, k_new, v_new = self._project(
          query, [self.query_dense, self.key_dense, self.value_dense])  # [B, 1, H, K/K/V]
      batch = tf.shape(query)[0]
      at = tf.stack([tf.range(batch), tf.fill([batch], decode_index)], axis=1)  # [B, 2]
      cache = {"k": tf.tensor_scatter_nd_update(cache["k"], at, k_new[:, 0]),  # [B, L, H, K]
               "v": tf.tensor_scatter_nd_update(cache["v"], at, v_new[:, 0])}
      k, v = cache["k"], cache["v"]
      if k.shape[1] is None:
        # A cache of dynamic length (no XLA) is read only up to the slot just written: every
        # later one is masked anyway, and reading them cost as much as the matmuls.
        k, v = k[:, :decode_index + 1], v[:, :decode_index + 1]  # [B, index+1, H, K/V]
        bias = None if bias is None else bias[..., :decode_index + 1]
        cache_rows = None if cache_rows is None else cache_rows[:, :decode_index + 1]
      if cache_rows is not None:
        slots = tf.broadcast_to(tf.range(tf.shape(k)[1])[None], tf.shape(cache_rows))
        where = tf.stack([cache_rows, slots], axis=-1)  # [B, L, 2]
        k, v = tf.gather_nd(k, where), tf.gather_nd(v, where)  # [B, L, H, K], [B, L, H, V]
    elif cache is not None:  # encoder-decoder attention to cached memory keys / values
      q, = self._project(query, [self.query_dense])  # [B, T, H, K]
      k, v = cache["k"], cache["v"]  # [B, S, H, K], [B, S, H, V]
    elif memory is not None:  # encoder-decoder attention
      q, = self._project(query, [self.query_dense])  # [B, T, H, K]
      k, v = self.project_memory(memory)  # [B, S, H, K], [B, S, H, V]
    else:  # self-attention over a whole sequence
      q, k, v = self._project(
          query, [self.query_dense, self.key_dense, self.value_dense])  # [B, T, H, K/K/V]

    q = q * tf.cast(self.key_depth ** -0.5, q.dtype)
    if cache is not None and not return_attention and query.shape[1] == 1:
      return self._one_query(q, k, v, bias), cache
    # Heads first, then batched matmuls: without XLA, TensorFlow runs these faster than the
    # equivalent einsum (see docs/benchmarks.md); XLA compiles both forms alike.
    q, k, v = (tf.transpose(t, [0, 2, 1, 3]) for t in (q, k, v))  # [B, H, T|S, K|V]
    logits = tf.matmul(q, k, transpose_b=True)  # [B, H, T, S]
    logits = tf.cast(logits, tf.float32)
    if bias is not None:
      logits += tf.cast(bias, tf.float32)  # Keras casts float call args to the compute dtype.
    weights = tf.nn.softmax(logits)  # [B, H, T, S]
    dropped = self.weight_dropout(tf.cast(weights, v.dtype), training=training)
    context = tf.transpose(tf.matmul(dropped, v), [0, 2, 1, 3])  # [B, T, H, V]
    output = self._output(context)  # [B, T, D]
    if return_attention:
      return output, cache, weights
    return output, cache

  def _one_query(self, q, k, v, bias):
    """Decoding step (T = 1, no dropout): q [B, 1, H, K], k [B, S, H, K], v [B, S, H, V].

    Products and sums instead of einsum: a matrix-vector product is memory-bound anyway, no
    transpose of the cache is made, and XLA fuses a gather of k, v (cache_rows) into them.
    """
    logits = tf.cast(tf.reduce_sum(q * k, axis=-1), tf.float32)  # [B, S, H]
    if bias is not None:
      logits += tf.transpose(tf.cast(bias, tf.float32)[:, :, 0], [0, 2, 1])  # [B|1, S, 1]
    weights = tf.cast(tf.nn.softmax(logits, axis=1), v.dtype)  # [B, S, H]
    context = tf.reduce_sum(weights[:, :, :, None] * v, axis=1, keepdims=True)  # [B, 1, H, V]
    return self._output(context)  # [B, 1, D]

  def get_config(self):
    config = super().get_config()
    config.update(num_heads=self.num_heads, key_depth=self.key_depth,
                  value_depth=self.value_depth, output_depth=self.output_depth,
                  dropout=self.dropout)
    return config
