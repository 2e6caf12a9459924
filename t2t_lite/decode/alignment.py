"""Hard word alignments of outputs to their sources, from the decoder's attention (fairseq's
--print-alignment, OpenNMT-tf's with_alignments="hard", Marian's --alignment).

Each output token is linked to the source token its last decoder layer attends to most (the
heads averaged; an ensemble's members averaged), EOS excluded on both sides. Subword pieces
are mapped back to words (a piece beginning with "▁" begins a word), and each linked pair of
words is written once, in Pharaoh's format: "s-t" pairs of 0-based source and output word
indices, by source then output index, separated by spaces ("0-0 1-2 2-1").

Shapes: B sentences, N outputs a sentence, S source and L output length.
"""
import tensorflow as tf

from t2t_lite.data.tokenizers import EOS_ID, PAD_ID


def _word_index(tokenizer, ids):
  """int32 [R, T] token ids -> int32 [R, T]: the word each token belongs to (0-based)."""
  starts = tokenizer.word_starts(ids)
  starts = tf.concat([tf.ones_like(starts[:, :1]), starts[:, 1:]], axis=1)  # token 0: a word
  return tf.cumsum(tf.cast(starts, tf.int32), axis=1) - 1


def pharaoh(model, tokenizer, inputs, outputs):
  """inputs int32 [B, S] (with EOS, 0-padded); outputs int32 [B, N, L] (with EOS, 0-padded)
  -> string [B, N]: each output's word alignment to its source (see the module doc)."""
  batch, n, length = tf.shape(outputs)[0], tf.shape(outputs)[1], tf.shape(outputs)[2]
  sources = tf.repeat(inputs, n, axis=0)  # [B*N, S]
  targets = tf.reshape(outputs, [batch * n, length])  # [B*N, L]
  encoder_output, mask = model.encode(sources, training=False)
  weights = model.alignment_attention(targets, encoder_output, mask)  # [B*N, L, S]
  real_source = tf.not_equal(sources, PAD_ID) & tf.not_equal(sources, EOS_ID)  # [B*N, S]
  weights = tf.where(real_source[:, None, :], weights, -1.0)
  linked = tf.argmax(weights, axis=2, output_type=tf.int32)  # [B*N, L]: a source token each
  real_target = tf.not_equal(targets, PAD_ID) & tf.not_equal(targets, EOS_ID)  # [B*N, L]
  real_target &= tf.reduce_any(real_source, axis=1, keepdims=True)
  source_words = tf.gather(_word_index(tokenizer, sources), linked, batch_dims=1)  # [B*N, L]
  target_words = _word_index(tokenizer, targets)  # [B*N, L]
  # One cell a (row, source word, output word) pair: where() lists them sorted and once.
  rows = tf.shape(targets)[0]
  size = tf.maximum(tf.shape(sources)[1], length)
  cells = tf.boolean_mask(
      tf.stack([tf.broadcast_to(tf.range(rows)[:, None], tf.shape(targets)), source_words,
                target_words], axis=2), real_target)  # [links, 3]
  grid = tf.scatter_nd(cells, tf.ones([tf.shape(cells)[0]], tf.int32), [rows, size, size])
  pairs = tf.cast(tf.where(grid > 0), tf.int32)  # [pairs, 3]: row, source word, output word
  text = tf.strings.join([tf.strings.as_string(pairs[:, 1]), tf.strings.as_string(pairs[:, 2])],
                         separator="-")
  joined = tf.strings.reduce_join(
      tf.RaggedTensor.from_value_rowids(text, pairs[:, 0], nrows=rows), axis=1, separator=" ")
  return tf.reshape(joined, [batch, n])  # [B, N]
