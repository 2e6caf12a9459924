"""A span-classifying constituency parser (hparams architecture="span_parser"; not in the paper).

The paper parses by translation (section 6.3): the Transformer writes the linearized tree token
by token. On a treebank of a few thousand trees a Transformer ENCODER that classifies every span
of the sentence does better in the same CPU minutes (docs/parsing.md): each span (i, j) between
fenceposts i < j is represented by differences of the encoder's outputs at its ends (Stern et
al. 2017; Kitaev and Klein 2018) and classified locally as no constituent or one label, a unary
chain such as S -> VP being one label "[S+VP]" (Teng and Zhang 2018); a tagging head gives each
word its POS tag. Decoding (decode/cky.py) finds the best tree by CKY over those scores and
writes it as the same linearized tree the translating parser writes, so that everything after
it (trees over the sentence's words, EVALB, the export) is shared.

Training reads the `wsj_parsing_spans` problem's targets: for each fencepost j = 1..n the
labels of the spans (0, j) .. (j - 1, j), then the tag of word j - 1, then EOS: n (n + 3) / 2 + 1
tokens, a layout in which every sentence's targets are a prefix of a longer one's, so that
0-padded batches line up with one table of (i, j) per position (`target_layout`). Labels and
tags are token ids of the vocabulary's first `SpanVocabulary.classes` ids (its symbols): the
logits are over those ids, and the trainer's loss reads them as any model's.

Shapes: B sentences, S source length (words + EOS), P target positions, H d_model, V classes,
C labels (no constituent first), K brackets of the longest label.
"""
import dataclasses

import keras
import tensorflow as tf

from t2t_lite.errors import T2TLiteError
from t2t_lite.modeling.attention import padding_bias
from t2t_lite.modeling.dropout import Dropout
from t2t_lite.modeling.embedding import PositionEncoding, SharedEmbedding
from t2t_lite.modeling.transformer import EncoderLayer, LayerNorm

EOS_ID = 1  # Every vocabulary's (data/tokenizers.py, a layer above this one).


@dataclasses.dataclass(frozen=True)
class SpanVocabulary:
  """What the parser predicts, as token ids of its problem's vocabulary.

  classes: the logits' width V (every label and tag id is below it).
  labels: [C] the ids of "<none>" (no constituent) and of each label ("[NP]", "[S+VP]").
  opens, closes: [C][K] each label's bracket ids, outermost opening first and innermost closing
    first ("(S", "(VP" and ")VP", ")S"), 0-padded; row 0 (no constituent) all 0.
  tags: the ids of the POS tags a word's slot may take."""
  classes: int
  labels: tuple
  opens: tuple
  closes: tuple
  tags: tuple


def target_layout(sources, positions):
  """-> (i, j, is_tag) int32 / bool [positions]: the span (i, j) each target position labels,
  or with is_tag the word j - 1 it tags, for sources of up to `sources` - 1 words (`sources`
  fenceposts); i and j stay below `sources` past the longest source's targets (EOS, padding).
  Fencepost j's block of j spans and a tag starts at (j - 1) (j + 2) / 2: j is that quadratic's
  root, in closed form so that the shapes stay static (XLA, a TPU), corrected for rounding."""
  p = tf.range(positions)
  root = (tf.sqrt(8.0 * tf.cast(p, tf.float32) + 9.0) - 1.0) / 2.0
  j = tf.cast(tf.floor(root), tf.int32)
  block_start = lambda j: (j - 1) * (j + 2) // 2
  j = tf.where(block_start(j + 1) <= p, j + 1, j)
  j = tf.where(block_start(j) > p, j - 1, j)
  i = p - block_start(j)
  is_tag = tf.logical_and(tf.equal(i, j), j < sources)
  return tf.minimum(i, sources - 1), tf.minimum(j, sources - 1), is_tag


class SpanParser(keras.Model):
  """call({"inputs": int32 [B, S], "targets": int32 [B, P]}) -> float32 logits [B, P, V] that
  predict `targets` (only their width is read); `span_scores(inputs)` for decoding."""

  def __init__(self, hparams, vocab_size, spans, **kwargs):
    super().__init__(**kwargs)
    self.hparams, self.vocab_size, self.spans = hparams, vocab_size, spans
    hp = hparams
    self.embedding = SharedEmbedding(vocab_size, hp.d_model, name="shared_embedding")
    self.encoder_positions = PositionEncoding(hp.position_encoding, hp.max_length, hp.d_model,
                                              name="encoder_positions")
    self.input_dropout = Dropout(hp.dropout)
    for i in range(hp.num_layers):  # attributes, not a list: see Transformer
      setattr(self, f"encoder_{i}", EncoderLayer(hp, name=f"encoder_{i}"))
    # A span's ends, forward and backward halves of the encoder's outputs (Stern et al.).
    self.span_forward = keras.layers.Dense(hp.d_model, name="span_forward")
    self.span_backward = keras.layers.Dense(hp.d_model, use_bias=False, name="span_backward")
    self.span_norm = LayerNorm(name="span_norm")
    self.span_dropout = Dropout(hp.dropout)
    self.span_output = keras.layers.Dense(spans.classes, name="span_output")
    self.tag_output = keras.layers.Dense(spans.classes, name="tag_output")

  @property
  def encoder_layers(self):
    return [getattr(self, f"encoder_{i}") for i in range(self.hparams.num_layers)]

  def build(self, input_shape=None):
    hp = self.hparams
    self.embedding.build()
    self.encoder_positions.build([None, None, hp.d_model])
    for layer in self.encoder_layers:
      layer.build([None, None, hp.d_model])
    self.span_forward.build([None, hp.d_model // 2])
    self.span_backward.build([None, hp.d_model - hp.d_model // 2])
    self.span_norm.build([None, hp.d_model])
    self.span_output.build([None, hp.d_model])
    self.tag_output.build([None, hp.d_model])
    self.built = True

  def encode(self, inputs, training=False):
    """inputs int [B, S] (words, EOS, 0-padded) -> (fenceposts [B, S, H]: each fencepost
    0..S-1's forward projection minus its backward one, words [B, S, H]: word k's output at k)."""
    ids = tf.pad(inputs, [[0, 0], [1, 0]], constant_values=EOS_ID)  # [B, 1 + S]: EOS as start
    x = self.encoder_positions(self.embedding(ids))
    x = tf.cast(self.input_dropout(x, training=training), tf.float32)
    bias = padding_bias(ids)  # [B, 1, 1, 1 + S]
    for layer in self.encoder_layers:
      x = layer(x, bias, training=training)  # [B, 1 + S, H]
    half = self.hparams.d_model // 2
    # Fencepost k lies after token k - 1 and before token k: its forward half is read where
    # the token before it is encoded, its backward half where the one after it is.
    forward = self.span_forward(x[:, :-1, :half])  # [B, S, H]
    backward = self.span_backward(x[:, 1:, half:])  # [B, S, H]
    # Span (i, j) is f_j - f_i + b_i - b_j (Stern et al.) = (f_j - b_j) - (f_i - b_i): one
    # difference of these, taken for every span at once (call, span_scores).
    return forward - backward, x[:, 1:]

  def _classify(self, spans, training):
    """spans [B, ..., H], each span's fencepost difference -> logits float32 [B, ..., V]:
    normalised, ReLU, a linear layer."""
    h = self.span_dropout(tf.nn.relu(self.span_norm(spans)), training=training)
    return tf.cast(self.span_output(h), tf.float32)

  def call(self, features, training=False):
    inputs, targets = features["inputs"], features["targets"]
    fenceposts, words = self.encode(inputs, training=training)  # [B, S, H] each
    size = tf.shape(inputs)[1]
    i, j, is_tag = target_layout(size, tf.shape(targets)[1])  # [P] each
    # Each position's span g_j - g_i, and each tag position's word j - 1, as products with
    # [P, S] matrices of +-1 (a tag's span is 0) rather than gathers: a gather's gradient is a
    # scatter, slow on a CPU (docs/benchmarks.md has the step's times).
    ends = tf.one_hot(j, size, dtype=fenceposts.dtype) - tf.one_hot(i, size, dtype=fenceposts.dtype)
    spans = self._classify(tf.einsum("ps,bsh->bph", ends, fenceposts), training)  # [B, P, V]
    tagged = tf.one_hot(tf.where(is_tag, j - 1, -1), size)  # [P, S]: rows of spans all 0
    tags = tf.einsum("ps,bsv->bpv", tagged, tf.cast(self.tag_output(words), tf.float32))
    logits = tf.where(is_tag[None, :, None], tags, spans)
    # Each sentence's EOS: a constant row (no loss gradient) whose argmax is EOS.
    lengths = tf.reduce_sum(tf.cast(tf.not_equal(inputs, 0), tf.int32), axis=1) - 1  # [B]
    end = lengths * (lengths + 3) // 2  # [B]
    at_end = tf.equal(tf.range(tf.shape(targets)[1])[None, :], end[:, None])  # [B, P]
    eos = tf.one_hot(EOS_ID, self.spans.classes)
    return tf.where(at_end[:, :, None], eos, logits)

  def span_scores(self, inputs):
    """inputs int [B, S] -> (log-probabilities float32 [B, S, S, C] of every span (i, j) over
    no constituent and the labels, tag ids int32 [B, S]: each word's most likely tag)."""
    fenceposts, words = self.encode(inputs)  # [B, S, H] each
    spans = fenceposts[:, None, :, :] - fenceposts[:, :, None, :]  # [B, S, S, H]: g_j - g_i
    labels = tf.constant(self.spans.labels, tf.int32)
    log_probs = tf.nn.log_softmax(tf.gather(self._classify(spans, False), labels, axis=-1))
    tag_ids = tf.constant(self.spans.tags, tf.int32)
    tag_logits = tf.gather(tf.cast(self.tag_output(words), tf.float32), tag_ids, axis=-1)
    return log_probs, tf.gather(tag_ids, tf.argmax(tag_logits, axis=-1, output_type=tf.int32))

  def compile_kernels(self, int8):
    """For decoding in float (quantization.py): the encoder's kernels multiply by XLA programs
    of their own. int8 is refused."""
    if not int8:
      for i in range(self.hparams.num_layers):
        getattr(self, f"encoder_{i}").compile_kernels(int8)
      return
    raise T2TLiteError("precision int8 quantizes the Transformer's decoding step "
                       "(quantization.py); decode a span parser in float32 or bf16")

  def get_config(self):
    return {"hparams": self.hparams.to_json(), "vocab_size": self.vocab_size, "name": self.name}
