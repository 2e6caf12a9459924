"""Multi-head scaled dot-product attention (section 3.2) and the masks it uses.

Shapes: B batch, T query length, S key/memory length, L decode cache length, D d_model,
H heads, K d_k (query/key depth per head), V d_v (value depth per head).
Masks are additive biases (0 where attention is allowed, -1e9 where not), built once per batch
by the helpers below and broadcast over heads and queries.
"""
import keras
import tensorflow as tf

from t2t_lite.modeling import quantization
from t2t_lite.modeling.dropout import Dropout

NEG_INF = -1e9


def padding_bias(ids):
  """int [B, S] token ids -> float32 [B, 1, 1, S] bias hiding padding (id 0) keys."""
  # expand_dims, not [:, None, None, :]: TFLite has no StridedSlice with new axes in the middle
  # of a dynamic shape (a converted search would need Flex).
  return tf.expand_dims(tf.expand_dims(tf.cast(tf.equal(ids, 0), tf.float32), 1), 1) * NEG_INF


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


def _write_slot(buffer, new, index):
  """buffer [B, H, L, K], new [B, H, 1, K] -> the buffer with slot `index` replaced by new (in
  place under XLA)."""
  batch, heads = tf.shape(buffer)[0], buffer.shape[1]
  rows, head_ids = tf.meshgrid(tf.range(batch), tf.range(heads), indexing="ij")  # [B, H]
  at = tf.stack([rows, head_ids, tf.fill([batch, heads], index)], axis=-1)  # [B, H, 3]
  return tf.tensor_scatter_nd_update(buffer, at, new[:, :, 0])


def _read_rows(buffer, rows):
  """buffer [B, H, L, K], rows int [B, L] -> [B, H, L, K] whose slot t of row b is the
  buffer's slot t of row rows[b, t]."""
  shape = [tf.shape(rows)[0], buffer.shape[1], tf.shape(rows)[1]]  # [B, H, L]
  where = tf.stack([tf.broadcast_to(tf.expand_dims(rows, 1), shape),  # TFLite: no [:, None]
                    tf.broadcast_to(tf.range(shape[1])[None, :, None], shape),
                    tf.broadcast_to(tf.range(shape[2])[None, None, :], shape)], axis=-1)
  return tf.gather_nd(buffer, where)  # where: [B, H, L, 3]


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
    self.compiled = None  # a decoding model's kernel as quantization.matmul multiplies it
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
    depths = [layer.kernel.shape[-1] for layer in layers]  # K, K, V
    flat = quantization.linear(tf.reshape(x, [-1, x.shape[-1]]), layers)  # [B*T, H*(K+K+V)]
    projected = tf.reshape(flat, tf.concat([tf.shape(x)[:2], [self.num_heads, sum(depths)]], 0))
    if len(layers) == 1:
      return [projected]
    return tf.split(projected, depths, axis=-1)

  def _output(self, context):
    """W^O: context [B, T, H, V] -> [B, T, D], as a flat [B*T, H*V] x [H*V, D] matmul."""
    flat = tf.reshape(context, [-1, self.num_heads * self.value_depth])  # [B*T, H*V]
    flat = quantization.linear(flat, [self.output_dense])  # [B*T, D]
    return tf.reshape(flat, tf.concat([tf.shape(context)[:2], [self.output_depth]], 0))

  def compile_kernels(self, int8):
    """For decoding (quantization.py): W^Q, W^K, W^V and W^O multiply by XLA programs of their
    own, in int8 when `int8`."""
    for layer in (self.query_dense, self.key_dense, self.value_dense):
      quantization.compile_layer(layer, int8)
    quantization.compile_layer(self.output_dense, int8, input_axes=2)

  def project_memory(self, memory):
    """[B, S, D] -> keys [B, S, H, K], values [B, S, H, V]."""
    memory = tf.cast(memory, self.compute_dtype)  # Called directly, not through Keras' cast.
    return tuple(self._project(memory, [self.key_dense, self.value_dense]))

  def call(self, query, memory=None, bias=None, cache=None, decode_index=None,
           training=None, return_attention=False, cache_rows=None):
    """Attends from `query` [B, T, D] to `memory` [B, S, D] (self-attention when None).

    With `cache`, this is one step of decoding (T = 1, see `_step`): self-attention with
    `decode_index` and a cache from `empty_cache`, encoder-decoder attention with one from
    `memory_cache`. Returns the output [B, T, D] and the updated cache (None without one), and
    the weights [B, H, T, S] with return_attention (not while decoding).
    """
    if cache is not None:
      return self._step(query, cache, decode_index, bias, cache_rows)
    if memory is not None:  # encoder-decoder attention
      q, = self._project(query, [self.query_dense])  # [B, T, H, K]
      k, v = self.project_memory(memory)  # [B, S, H, K], [B, S, H, V]
    else:  # self-attention over a whole sequence
      q, k, v = self._project(
          query, [self.query_dense, self.key_dense, self.value_dense])  # [B, T, H, K/K/V]

    q = q * tf.cast(self.key_depth ** -0.5, q.dtype)
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
      return output, None, weights
    return output, None

  # Decoding, one query a step. Cached keys and values are kept heads first, [B, H, S, K], so
  # that a step's attention is two batched matmuls reading them where they are (no transpose).

  def memory_cache(self, memory):
    """Encoder-decoder attention: memory [B, S, D] -> {"keys" [B, H, S, K], "values"
    [B, H, S, V]}, projected once for the whole decode."""
    k, v = self.project_memory(memory)  # [B, S, H, K], [B, S, H, V]
    return {"keys": tf.transpose(k, [0, 2, 1, 3]), "values": tf.transpose(v, [0, 2, 1, 3])}

  def empty_cache(self, batch, dtype, max_length=None):
    """Self-attention. With `max_length` (XLA, TPU: static shapes): {"key_buffer",
    "value_buffer"} [B, H, L, K/V]; step i writes slot i in place. Without: {"keys", "values"}
    [B, H, 0, K/V], one slot longer after each step, so that no step copies or reads a slot
    not yet written (a buffer's update copies all of it when not run by XLA).
    """
    heads, k, v = self.num_heads, self.key_depth, self.value_depth
    if max_length is not None:
      return {"key_buffer": tf.zeros([batch, heads, max_length, k], dtype),
              "value_buffer": tf.zeros([batch, heads, max_length, v], dtype)}
    # The slot axis changes size in the decoding loop, so its static size must be unknown.
    static_batch = batch if isinstance(batch, int) else None
    return {name: tf.compat.v1.placeholder_with_default(
        tf.zeros([batch, heads, 0, depth], dtype), [static_batch, heads, None, depth])
            for name, depth in (("keys", k), ("values", v))}

  def _step(self, query, cache, decode_index, bias, cache_rows):
    """One decoding step: query [B, 1, D] -> (output [B, 1, D], updated cache).

    Self-attention when `decode_index` is given: the query's own key and value join the cache,
    and it attends to slots 0..decode_index; `cache_rows` int [B, L] (beam search without
    cache reordering, beam_search.py) makes row b read slot t from buffer row cache_rows[b, t].
    Without decode_index: encoder-decoder attention to a `memory_cache`.
    """
    def heads_first(x):  # [B, 1, H, *] -> [B, H, 1, *]: the same memory layout, as T = 1
      return tf.reshape(x, [-1, self.num_heads, 1, x.shape[-1]])

    if decode_index is None:
      q, = self._project(query, [self.query_dense])  # [B, 1, H, K]
      k, v = cache["keys"], cache["values"]  # [B, H, S, K], [B, H, S, V]
    else:
      q, k_new, v_new = self._project(
          query, [self.query_dense, self.key_dense, self.value_dense])  # [B, 1, H, K/K/V]
      k_new, v_new = heads_first(k_new), heads_first(v_new)  # [B, H, 1, K/V]
      if "keys" in cache:  # growing
        cache = {"keys": tf.concat([cache["keys"], k_new], axis=2),  # [B, H, i + 1, K]
                 "values": tf.concat([cache["values"], v_new], axis=2)}
        k, v = cache["keys"], cache["values"]
      else:  # buffers
        cache = {"key_buffer": _write_slot(cache["key_buffer"], k_new, decode_index),
                 "value_buffer": _write_slot(cache["value_buffer"], v_new, decode_index)}
        k, v = cache["key_buffer"], cache["value_buffer"]  # [B, H, L, K/V]
        if cache_rows is not None:
          k, v = _read_rows(k, cache_rows), _read_rows(v, cache_rows)
        unwritten = cache_bias(decode_index, tf.shape(k)[2])  # [1, 1, 1, L]
        bias = unwritten if bias is None else bias + unwritten
    q = heads_first(q) * tf.cast(self.key_depth ** -0.5, q.dtype)  # [B, H, 1, K]
    logits = tf.cast(tf.matmul(q, k, transpose_b=True), tf.float32)  # [B, H, 1, S]
    if bias is not None:
      logits += tf.cast(bias, tf.float32)
    weights = tf.cast(tf.nn.softmax(logits), v.dtype)
    context = tf.matmul(weights, v)  # [B, H, 1, V]
    context = tf.reshape(context, [-1, 1, self.num_heads, self.value_depth])  # [B, 1, H, V]
    return self._output(context), cache

  def get_config(self):
    config = super().get_config()
    config.update(num_heads=self.num_heads, key_depth=self.key_depth,
                  value_depth=self.value_depth, output_depth=self.output_depth,
                  dropout=self.dropout)
    return config
