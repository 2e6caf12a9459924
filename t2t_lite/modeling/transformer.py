"""The Transformer (section 3): encoder and decoder stacks, as Keras 3 layers and a keras.Model.

Shapes: B batch, S source length, T target length, L decode cache length, D d_model,
F d_ff, V vocabulary. Token id 0 is padding, id 1 end-of-sequence.
"""

import keras
import tensorflow as tf

from t2t_lite.modeling import quantization
from t2t_lite.modeling.attention import MultiHeadAttention, causal_bias, padding_bias, segment_bias
from t2t_lite.modeling.dropout import Dropout
from t2t_lite.modeling.embedding import PositionEncoding, SharedEmbedding
from t2t_lite.modeling.pointer import SourcePointer

LAYER_NORM_EPSILON = 1e-6


class FeedForward(keras.layers.Layer):
  """FFN(x) = max(0, x W1 + b1) W2 + b2 (section 3.3); optional dropout after the ReLU."""

  def __init__(self, d_model, d_ff, relu_dropout=0.0, **kwargs):
    super().__init__(**kwargs)
    self.d_model = d_model
    self.d_ff = d_ff
    self.relu_dropout = relu_dropout

  def build(self, input_shape):
    self.inner = keras.layers.Dense(self.d_ff, name="inner")  # ReLU applied in call
    self.outer = keras.layers.Dense(self.d_model, name="outer")
    self.inner.build(input_shape)
    self.outer.build(list(input_shape[:-1]) + [self.d_ff])
    self.dropout = Dropout(self.relu_dropout)

  def call(self, x, training=None):
    # Not the Dense layers' calls: they add biases by tf.nn.bias_add (see quantization.linear).
    flat = tf.reshape(x, [-1, self.d_model])  # [B*T, D]
    hidden = tf.nn.relu(quantization.linear(flat, [self.inner]))  # [B*T, F]
    hidden = self.dropout(hidden, training=training)
    return tf.reshape(quantization.linear(hidden, [self.outer]), tf.shape(x))  # [B, T, D]

  def compile_kernels(self, int8):
    """For decoding (quantization.py): W1 and W2 multiply by XLA programs of their own, in int8
    when `int8`."""
    quantization.compile_layer(self.inner, int8)
    quantization.compile_layer(self.outer, int8)

  def get_config(self):
    config = super().get_config()
    config.update(d_model=self.d_model, d_ff=self.d_ff, relu_dropout=self.relu_dropout)
    return config


class LayerNorm(keras.layers.LayerNormalization):
  """LayerNorm over the last axis, computed and returned in float32 in every precision (see
  _Block). Keras' own computes the same with more small ops (moments, then a rearranged affine),
  which a decoding step, 18 norms of one token per row, pays for in op dispatch."""

  def __init__(self, epsilon=LAYER_NORM_EPSILON, dtype="float32", **kwargs):
    super().__init__(epsilon=epsilon, dtype=dtype, **kwargs)

  def call(self, x):
    x = tf.cast(x, tf.float32)
    centred = x - tf.reduce_mean(x, axis=-1, keepdims=True)  # [..., D]
    variance = tf.reduce_mean(tf.square(centred), axis=-1, keepdims=True)  # [..., 1]
    return centred * tf.math.rsqrt(variance + self.epsilon) * self.gamma + self.beta


class _Block(keras.layers.Layer):
  """Shared residual wiring: post-norm LayerNorm(x + Dropout(f(x))) (the paper) or pre-norm
  x + Dropout(f(LayerNorm(x))).

  The residual stream x stays float32 under mixed precision: only the sublayers f compute in
  bfloat16 / float16 (Keras casts their inputs), so the running sum of their outputs is not
  rounded to 8 significant bits at every block. It costs one cast per sublayer.
  """

  def __init__(self, hparams, **kwargs):
    super().__init__(**kwargs)
    self.hparams = hparams
    self.residual_dropout = Dropout(hparams.dropout)
    self._convert_input_args = False  # Keras would cast x to the compute dtype.

  def _attention(self, name):
    hp = self.hparams
    return MultiHeadAttention(hp.num_heads, hp.key_depth, hp.value_depth, hp.d_model,
                              dropout=hp.attention_dropout, name=name)

  def _norm(self, name):
    return LayerNorm(name=name)

  def _sublayer(self, x, norm, fn, training):
    """x float32 -> (block output float32, whatever else fn returned)."""
    def residual(y):
      return x + tf.cast(self.residual_dropout(y, training=training), x.dtype)

    if self.hparams.norm_type == "pre":
      y, *extra = fn(norm(x))
      return residual(y), extra
    y, *extra = fn(x)
    return norm(residual(y)), extra

  def compile_kernels(self, int8):
    """For decoding (quantization.py): the kernels of every sublayer."""
    for name in ("self_attention", "cross_attention", "ffn"):
      if hasattr(self, name):
        getattr(self, name).compile_kernels(int8)

  def get_config(self):
    config = super().get_config()
    config.update(hparams=self.hparams.to_json())
    return config


class EncoderLayer(_Block):
  """Self-attention, then the FFN, each wrapped in residual + LayerNorm."""

  def build(self, input_shape):
    hp = self.hparams
    self.self_attention = self._attention("self_attention")
    self.self_attention.build(input_shape)
    self.ffn = FeedForward(hp.d_model, hp.d_ff, hp.relu_dropout, name="ffn")
    self.ffn.build(input_shape)
    self.norm1, self.norm2 = self._norm("norm1"), self._norm("norm2")
    self.norm1.build(input_shape)
    self.norm2.build(input_shape)

  def call(self, x, bias, training=None, return_attention=False):
    """x [B, S, D], bias [B, 1, 1, S] -> [B, S, D] (and attention weights [B, H, S, S])."""
    x, extra = self._sublayer(
        x, self.norm1,
        lambda y: self.self_attention(y, bias=bias, training=training,
                                      return_attention=return_attention), training)
    x, _ = self._sublayer(x, self.norm2, lambda y: (self.ffn(y, training=training),), training)
    return (x, extra[1]) if return_attention else x


class DecoderLayer(_Block):
  """Masked self-attention, encoder-decoder attention, then the FFN; each residual + norm."""

  def build(self, input_shape):
    hp = self.hparams
    self.self_attention = self._attention("self_attention")
    self.self_attention.build(input_shape)
    self.cross_attention = self._attention("cross_attention")
    self.cross_attention.build(input_shape, input_shape)
    self.ffn = FeedForward(hp.d_model, hp.d_ff, hp.relu_dropout, name="ffn")
    self.ffn.build(input_shape)
    self.norm1, self.norm2, self.norm3 = (self._norm(f"norm{i}") for i in (1, 2, 3))
    for norm in (self.norm1, self.norm2, self.norm3):
      norm.build(input_shape)

  def call(self, x, memory, self_bias, memory_bias, cache=None, decode_index=None,
           training=None, return_attention=False, cache_rows=None):
    """x [B, T, D], memory [B, S, D] -> [B, T, D].

    When decoding one step at a time, T = 1 and `cache` holds this layer's "self" attention
    cache (attention.py's empty_cache, updated at `decode_index`) and its "memory" cache
    (memory_cache). Returns (x, cache) and, with return_attention, the two attention weight
    tensors.
    """
    self_cache = memory_cache = None
    if cache is not None:
      self_cache, memory_cache = cache["self"], cache["memory"]
    x, self_extra = self._sublayer(
        x, self.norm1,
        lambda y: self.self_attention(y, bias=self_bias, cache=self_cache,
                                      decode_index=decode_index, training=training,
                                      return_attention=return_attention,
                                      cache_rows=cache_rows), training)
    x, cross_extra = self._sublayer(
        x, self.norm2,
        lambda y: self.cross_attention(y, memory, bias=memory_bias, cache=memory_cache,
                                       training=training, return_attention=return_attention),
        training)
    x, _ = self._sublayer(x, self.norm3, lambda y: (self.ffn(y, training=training),), training)
    if cache is not None:
      cache = dict(cache, self=self_extra[0])
    if return_attention:
      return x, cache, self_extra[1], cross_extra[1]
    return x, cache


class Transformer(keras.Model):
  """Encoder-decoder Transformer with one shared embedding / pre-softmax matrix.

  call({"inputs": int32 [B, S], "targets": int32 [B, T]}) -> float32 logits [B, T, V] that
  predict `targets` with teacher forcing: the decoder reads targets shifted right by one.
  Packed rows (packing.py) add "inputs_segmentation", "inputs_position" [B, S] and
  "targets_segmentation", "targets_position" [B, T]: attention then stays inside each example,
  positions restart, and each example's decoder starts from the start symbol.
  """

  def __init__(self, hparams, vocab_size, **kwargs):
    super().__init__(**kwargs)
    self.hparams = hparams
    self.vocab_size = vocab_size
    hp = hparams
    # Every sub-layer is a direct attribute (not inside a list or dict): tf.train.Checkpoint
    # only follows attributes of Keras 3 layers, and checkpoints are how runs resume.
    self.embedding = SharedEmbedding(vocab_size, hp.d_model, name="shared_embedding")
    self.encoder_positions, self.decoder_positions = (
        PositionEncoding(hp.position_encoding, hp.max_length, hp.d_model, name=f"{side}_positions")
        for side in ("encoder", "decoder"))
    self.input_dropout = Dropout(hp.dropout)
    if hp.token_dropout:  # only then: checkpoints without it keep the same variables
      self.token_dropout = Dropout(hp.token_dropout, whole_vectors=True)
    if hp.source_pointer:
      self.source_pointer = SourcePointer(vocab_size, hp.d_model, name="source_pointer")
    for i in range(max(hp.num_layers, hp.decoder_depth)):  # interleaved: runs' variable order
      if i < hp.num_layers:
        setattr(self, f"encoder_{i}", EncoderLayer(hp, name=f"encoder_{i}"))
      if i < hp.decoder_depth:
        setattr(self, f"decoder_{i}", DecoderLayer(hp, name=f"decoder_{i}"))
    # Pre-norm stacks end with one more LayerNorm; post-norm outputs are already normalised.
    if hp.norm_type == "pre":
      self.encoder_norm, self.decoder_norm = (
          LayerNorm(name=f"{side}_norm") for side in ("encoder", "decoder"))

  @property
  def encoder_layers(self):
    return [getattr(self, f"encoder_{i}") for i in range(self.hparams.num_layers)]

  @property
  def decoder_layers(self):
    return [getattr(self, f"decoder_{i}") for i in range(self.hparams.decoder_depth)]

  def build(self, input_shape=None):
    hp = self.hparams
    shape = [None, None, hp.d_model]
    self.embedding.build()
    if hp.source_pointer:
      self.source_pointer.build()
    for side in ("encoder", "decoder"):
      getattr(self, f"{side}_positions").build(shape)
      if self.hparams.norm_type == "pre":
        getattr(self, f"{side}_norm").build(shape)
    for layer in self.encoder_layers + self.decoder_layers:
      layer.build(shape)
    self.built = True

  def _embed(self, ids, side, training, start=0, positions=None, pointer=None):
    """ids [B, T] -> dropout(token_dropout(embedding * sqrt(D)) + positions [+ pointer]) float32
    [B, T, D]: the residual stream (see _Block). pointer [B, T, D]: the source pointer's."""
    x = self.embedding(ids)  # [B, T, D]
    x = self.token_dropout(x, training=training) if self.hparams.token_dropout else x
    x = getattr(self, f"{side}_positions")(x, start=start, positions=positions)
    if pointer is not None:
      x += tf.cast(pointer, x.dtype)
    return tf.cast(self.input_dropout(x, training=training), tf.float32)

  def _final_norm(self, x, side):
    return getattr(self, f"{side}_norm")(x) if self.hparams.norm_type == "pre" else x

  def encode(self, inputs, training=False, return_attention=False, segments=None,
             positions=None):
    """inputs int [B, S] -> (encoder output [B, S, D], padding mask bool [B, S]).
    segments, positions: int [B, S] of packed rows."""
    bias = (padding_bias(inputs) if segments is None  # [B, 1, 1, S]
            else segment_bias(segments, segments))  # [B, 1, S, S]
    x = self._embed(inputs, "encoder", training, positions=positions)
    weights = []
    for layer in self.encoder_layers:
      out = layer(x, bias, training=training, return_attention=return_attention)
      x = out[0] if return_attention else out
      weights += [out[1]] if return_attention else []
    outputs = (self._final_norm(x, "encoder"), tf.not_equal(inputs, 0))
    return outputs + (weights,) if return_attention else outputs

  def decode(self, targets, encoder_output, inputs_mask, training=False, return_attention=False,
             segments=None, positions=None, inputs_segments=None, inputs_positions=None):
    """targets int [B, T] (shifted right here) -> logits float32 [B, T, V].
    segments, positions int [B, T] and inputs_segments, inputs_positions [B, S]: of packed
    rows."""
    decoder_inputs = tf.pad(targets, [[0, 0], [1, 0]])[:, :-1]  # [B, T], starts with 0
    self_bias = causal_bias(tf.shape(targets)[1])  # [1, 1, T, T]
    if segments is None:
      memory_bias = _mask_to_bias(inputs_mask)  # [B, 1, 1, S]
    else:  # Every example starts from 0, not from the previous example's EOS.
      decoder_inputs = tf.where(tf.equal(positions, 0), 0, decoder_inputs)
      memory_bias = segment_bias(segments, inputs_segments)  # [B, 1, T, S]
      self_bias += segment_bias(segments, segments)  # [B, 1, T, T]
    pointer = None
    if self.hparams.source_pointer:
      pointer = self.source_pointer(
          encoder_output, self.source_pointer.word_index(decoder_inputs, positions),
          inputs_positions, segments, inputs_segments)  # [B, T, D]
    x = self._embed(decoder_inputs, "decoder", training, positions=positions, pointer=pointer)
    self_weights, cross_weights = [], []
    for layer in self.decoder_layers:
      out = layer(x, encoder_output, self_bias, memory_bias, training=training,
                  return_attention=return_attention)
      x = out[0]
      if return_attention:
        self_weights.append(out[2])
        cross_weights.append(out[3])
    logits = self.embedding.logits(self._final_norm(x, "decoder"))  # [B, T, V]
    return (logits, self_weights, cross_weights) if return_attention else logits

  def call(self, features, training=False):
    source_segments, source_positions, segments, positions = (features.get(name) for name in (
        "inputs_segmentation", "inputs_position", "targets_segmentation", "targets_position"))
    encoder_output, inputs_mask = self.encode(
        features["inputs"], training=training, segments=source_segments, positions=source_positions)
    return self.decode(features["targets"], encoder_output, inputs_mask, training=training,
                       segments=segments, positions=positions, inputs_segments=source_segments,
                       inputs_positions=source_positions)

  def attention_maps(self, inputs, targets):
    """All attention weights, for pictures: name -> list over layers of [B, H, T_q, T_k]."""
    encoder_output, mask, encoder_weights = self.encode(inputs, return_attention=True)
    _, self_weights, cross_weights = self.decode(targets, encoder_output, mask,
                                                 return_attention=True)
    return {"encoder_self": encoder_weights, "decoder_self": self_weights,
            "encoder_decoder": cross_weights}

  def alignment_attention(self, targets, encoder_output, inputs_mask):
    """What a target token attends to in the source, for word alignments: the last decoder
    layer's encoder-decoder attention, its heads averaged: targets int [B, T] -> float32
    [B, T, S] (fairseq's --print-alignment reads the same layer)."""
    _, _, cross_weights = self.decode(targets, encoder_output, inputs_mask, return_attention=True)
    last = tf.cast(cross_weights[-1], tf.float32)  # [B, H, T, S]
    return tf.reduce_mean(last, axis=1)  # [B, T, S]

  def init_cache(self, encoder_output, inputs_mask, max_decode_length=None):
    """The state of incremental decoding; every leaf has leading dim B (for beam tiling).

    Per decoder layer, the self-attention keys/values (attention.py's empty_cache): with
    max_decode_length, static [B, H, L, K/V] buffers (XLA, TPU); without, keys/values that grow
    by one slot per step. The encoder-decoder keys/values are computed here once. With the
    source pointer, also the encoder output [B, S, D] and the words placed so far [B].
    """
    batch = encoder_output.shape[0] or tf.shape(encoder_output)[0]
    layers = []
    for layer in self.decoder_layers:
      layers.append({
          "self": layer.self_attention.empty_cache(batch, self.compute_dtype, max_decode_length),
          "memory": layer.cross_attention.memory_cache(encoder_output)})  # [B, H, S, K/V]
    cache = {"layers": layers, "memory_bias": _mask_to_bias(inputs_mask)}
    if self.hparams.source_pointer:
      cache.update(encoder_output=encoder_output, words_placed=tf.zeros([batch], tf.int32))
    return cache

  def compile_kernels(self, int8):
    """Makes this model's weight matmuls, for decoding, XLA programs of their own
    (quantization.py; mixed_precision.inference_model calls it): with `int8`, in int8 (an int8
    copy of every kernel and of the pre-softmax matrix beside the float32 weights), else in the
    model's float dtype. For decoding only: nothing trains the copies."""
    self.embedding.compile_kernels(int8)
    for layer in self.encoder_layers + self.decoder_layers:
      layer.compile_kernels(int8)

  def output_rows(self, ids):
    """The pre-softmax rows of a shortlist ids int32 [V'], for decode_step (shortlist.py)."""
    return self.embedding.output_rows(ids)  # [V', D]

  def decode_step(self, ids, index, cache, cache_rows=None, output_rows=None):
    """ids int [B]: the token at position index-1 (0 at index 0) -> (logits [B, V], cache).

    cache_rows: optional int [B, L] from beam search without cache reordering (static buffers
    only): row b reads its self-attention keys/values of slot t from cache row
    cache_rows[b, t] (see beam_search.py).
    output_rows: optional `output_rows(ids)` of a shortlist of V' ids: logits [B, V'] of those.
    """
    pointer, placed = (self.source_pointer.step(ids, cache) if self.hparams.source_pointer
                       else (None, {}))  # [B, 1, D], {"words_placed": [B]}
    x = self._embed(ids[:, None], "decoder", training=False, start=index,
                    pointer=pointer)  # [B, 1, D]
    new_layers = []
    for layer, layer_cache in zip(self.decoder_layers, cache["layers"]):
      x, layer_cache = layer(x, None, None, cache["memory_bias"], cache=layer_cache,
                             decode_index=index, training=False, cache_rows=cache_rows)
      new_layers.append(layer_cache)
    logits = self.embedding.logits(self._final_norm(x, "decoder"), output_rows)[:, 0]  # [B, V]
    return logits, dict(cache, layers=new_layers, **placed)

  def get_config(self):
    return {"hparams": self.hparams.to_json(), "vocab_size": self.vocab_size, "name": self.name}


def _mask_to_bias(mask):
  """bool [B, S] (True = real token) -> float32 [B, 1, 1, S] additive bias."""
  return padding_bias(tf.cast(mask, tf.int32))
