"""The source pointer (hparams `source_pointer`; not in the paper): for outputs that place their
source's words in order, as wsj_parsing's linearized trees do with one slot per word, the
decoder's input at each step also carries the encoder's output at the next word to place.

The paper's decoder has to find that word by attention alone: it must count the slots it has
written and attend to the source position of that count, which a model trained on a few
thousand trees learns slowly (docs/parsing.md). Which word comes next is known exactly from the
output so far, so it is given, as Ma et al. (2017)'s deterministic attention gives a seq2seq
parser the word it has reached. A slot is any token the problem names (`Problem.source_slots`),
kept in the checkpoint as a non-trainable mask, so that decoding and the export read it from
the run as they read the weights.

Shapes: B batch, S source length, T target length, D d_model, V vocabulary.
"""
import keras
import numpy as np
import tensorflow as tf


class SourcePointer(keras.layers.Layer):
  """The projected encoder output of the next source word to place, per target position."""

  def __init__(self, vocab_size, d_model, **kwargs):
    super().__init__(**kwargs)
    self.vocab_size, self.d_model = vocab_size, d_model
    self.projection = keras.layers.Dense(d_model, use_bias=False, name="projection")

  def build(self, input_shape=None):
    # 1.0 for a token that places a source word (float: checkpoint averaging averages it).
    self.slots = self.add_weight(name="slots", shape=(self.vocab_size,), initializer="zeros",
                                 trainable=False, dtype="float32")
    self.projection.build([None, None, self.d_model])
    self.built = True

  def set_slots(self, ids):
    """ids: the token ids that place a source word (Problem.source_slots)."""
    mask = np.zeros([self.vocab_size], np.float32)
    mask[np.asarray(ids, np.int64)] = 1.0
    self.slots.assign(mask)

  def places_word(self, ids):
    """int ids [...] -> int32 [...]: 1 where the token places a source word."""
    return tf.cast(tf.gather(self.slots, ids) > 0.5, tf.int32)

  def word_index(self, decoder_inputs, positions=None):
    """decoder_inputs int [B, T] (the outputs shifted right) -> int32 [B, T]: how many words
    the output has placed before position t, i.e. the index of the next one. positions int
    [B, T] of packed rows: counted from each example's own first position."""
    placed = tf.cumsum(self.places_word(decoder_inputs), axis=1)  # [B, T]
    if positions is None:
      return placed
    first = tf.range(tf.shape(decoder_inputs)[1])[None, :] - positions  # [B, T]
    return placed - tf.gather(placed, first, batch_dims=1)  # its first input is 0: no slot

  def call(self, encoder_output, word_index, source_positions=None, target_segments=None,
           source_segments=None):
    """encoder_output [B, S, D], word_index int [B, T] -> [B, T, D]: the projected encoder
    output at each position's word (zeros past the source's end). Packed rows give the
    sources' positions and both sides' segments [B, S] / [B, T]."""
    if source_positions is None:
      source_positions = tf.range(tf.shape(encoder_output)[1])[None, :]  # [1, S]
    match = tf.equal(word_index[:, :, None], source_positions[:, None, :])  # [B, T, S]
    if target_segments is not None:
      match &= tf.equal(target_segments[:, :, None], source_segments[:, None, :])
    # A one-hot product rather than a gather: the same code for packed and unpacked rows.
    picked = tf.einsum("bts,bsd->btd", tf.cast(match, encoder_output.dtype), encoder_output)
    return self.projection(picked)

  def step(self, ids, cache):
    """One decoding step: ids int [B] (the previous token) and the decoder's cache, which
    holds "encoder_output" [B, S, D] and "words_placed" int32 [B] before it -> (pointer
    [B, 1, D], {"words_placed": after it})."""
    placed = cache["words_placed"] + self.places_word(ids)
    return self(cache["encoder_output"], placed[:, None]), {"words_placed": placed}

  def get_config(self):
    config = super().get_config()
    config.update(vocab_size=self.vocab_size, d_model=self.d_model)
    return config
