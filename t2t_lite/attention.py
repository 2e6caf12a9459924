"""Multi-head scaled dot-product attention (section 3.2) and the masks it uses.

Shapes: B batch, T query length, S key/memory length, L decode cache length, D d_model,
H heads, K d_k (query/key depth per head), V d_v (value depth per head).
Masks are additive biases (0 where attention is allowed, -1e9 where not), built once per batch
by the helpers below and broadcast over heads and queries.
"""
import keras
import tensorflow as tf

NEG_INF = -1e9


def padding_bias(ids):
  """int [B, S] token ids -> float32 [B, 1, 1, S] bias hiding padding (id 0) keys."""
  return tf.cast(tf.equal(ids, 0), tf.float32)[:, None, None, :] * NEG_INF


def causal_bias(length):
  """-> float32 [1, 1, T, T] bias hiding every later position from each query (section 3.2.3)."""
  allowed = tf.linalg.band_part(tf.ones([length, length]), -1, 0)  # lower triangle
  return ((1.0 - allowed) * NEG_INF)[None, None]


def cache_bias(index, cache_length):
  """-> float32 [1, 1, 1, L] bias hiding cache slots after `index` (not yet written)."""
  return tf.cast(tf.range(cache_length) > index, tf.float32)[None, None, None, :] * NEG_INF


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

    def projection(name, depth):
      return keras.layers.EinsumDense(
          "btd,dhk->bthk", output_shape=(None, heads, depth), bias_axes="hk", name=name)

    self.query_dense = projection("query", k)
    self.key_dense = projection("key", k)
    self.value_dense = projection("value", v)
    self.output_dense = keras.layers.EinsumDense(
        "bthv,hvd->btd", output_shape=(None, self.output_depth), bias_axes="d", name="output")
    self.query_dense.build(query_shape)
    self.key_dense.build(memory_shape or query_shape)
    self.value_dense.build(memory_shape or query_shape)
    self.output_dense.build([None, None, heads, v])
    self.weight_dropout = keras.layers.Dropout(self.dropout)

  def project_memory(self, memory):
    """[B, S, D] -> keys [B, S, H, K], values [B, S, H, V]: computed once for a cached decode."""
    return self.key_dense(memory), self.value_dense(memory)

  def call(self, query, memory=None, bias=None, cache=None, decode_index=None,
           training=None, return_attention=False):
    """Attends from `query` [B, T, D] to `memory` [B, S, D] (self-attention when None).

    With `cache` (dict with "k", "v" [B, L, H, K/V]) and `decode_index`, this is one step of
    incremental self-attention: the new key/value is written at `decode_index` and the query
    attends to slots 0..decode_index. With a cache holding only "k", "v" and no decode_index,
    the cached keys/values are used as they are (encoder-decoder attention while decoding).
    Returns the output [B, T, D] and the updated cache (and the weights with return_attention).
    """
    q = self.query_dense(query)  # [B, T, H, K]
    if cache is not None and decode_index is not None:
      k_new = self.key_dense(query)  # [B, 1, H, K]
      v_new = self.value_dense(query)  # [B, 1, H, V]
      slot = tf.equal(tf.range(tf.shape(cache["k"])[1]), decode_index)[None, :, None, None]
      cache = {"k": tf.where(slot, k_new, cache["k"]),  # [B, L, H, K]
               "v": tf.where(slot, v_new, cache["v"])}
      k, v = cache["k"], cache["v"]
    elif cache is not None:
      k, v = cache["k"], cache["v"]  # [B, S, H, K], [B, S, H, V]
    else:
      k, v = self.project_memory(query if memory is None else memory)

    q = q * tf.cast(self.key_depth ** -0.5, q.dtype)
    logits = tf.einsum("bthk,bshk->bhts", q, k)  # [B, H, T, S]
    logits = tf.cast(logits, tf.float32)
    if bias is not None:
      logits += bias
    weights = tf.nn.softmax(logits)  # [B, H, T, S]
    dropped = self.weight_dropout(tf.cast(weights, v.dtype), training=training)
    context = tf.einsum("bhts,bshv->bthv", dropped, v)  # [B, T, H, V]
    output = self.output_dense(context)  # [B, T, D]
    if return_attention:
      return output, cache, weights
    return output, cache

  def get_config(self):
    config = super().get_config()
    config.update(num_heads=self.num_heads, key_depth=self.key_depth,
                  value_depth=self.value_depth, output_depth=self.output_depth,
                  dropout=self.dropout)
    return config
