"""Word dropout (hparams word_dropout): training examples with some words replaced by the id of
their unknown-word class.

Not in the paper. On a treebank of a few thousand sentences a sixth of a test sentence's words
were not seen often enough in training to have an id of their own; they reach the model as
their shape class (`<unk-capital>`, `<unk-ing>`, ...), which training shows only in place of its
rarest words. Replacing known words by their class at random while training teaches the model
to parse around words it does not know, as treebank parsers learn their unknown words: the
word dropout of Kiperwasser and Goldberg (2016), a word seen c times in train dropped with
probability a / (a + c), so rare words often and "the" almost never. Here `rate` is that
probability for a word seen once (a = rate / (1 - rate)).

The choice is per word type and example: a type dropped in an example is dropped everywhere in
it, source and target alike, because word slots repeat the source's ids in the target (and
decoding's tree constraint makes a slot its source token). Ids that are not words (brackets,
tags, punctuation, EOS, the classes themselves) stay. The draws are stateless, from (seed,
shard, the example's index in the stream), so a run repeats and its input position (saved in
checkpoints) resumes exactly.
"""
import numpy as np
import tensorflow as tf


def drop_probabilities(class_ids, counts, rate):
  """float32 [V]: the probability that each id is dropped to its class (0 for non-words)."""
  a = rate / (1.0 - rate)
  words = np.asarray(class_ids) != np.arange(len(class_ids))
  return np.where(words, a / (a + np.maximum(counts, 1)), 0.0).astype(np.float32)


def word_dropout_fn(class_ids, counts, rate, seed=0, shard_index=0):
  """-> fn(index, example) for `Dataset.enumerate().map`: the example with its word types
  dropped to their classes as the module doc says.

  class_ids, counts: int [V] each, Problem.word_classes: each id's unknown-word class id (the
    id itself where it is no word) and how often train has it.
  """
  probabilities = tf.constant(drop_probabilities(class_ids, counts, rate))  # [V]
  class_ids = tf.constant(np.asarray(class_ids, np.int32))  # [V]
  base_seed = tf.constant([seed, shard_index], tf.int64)

  def drop(index, example):
    draw_seed = tf.random.experimental.stateless_fold_in(base_seed, index)
    dropped = tf.random.stateless_uniform(tf.shape(probabilities), draw_seed) < probabilities

    def apply(ids):  # [L] -> [L]
      return tf.where(tf.gather(dropped, ids), tf.gather(class_ids, ids), ids)

    return dict(example, inputs=apply(example["inputs"]), targets=apply(example["targets"]))

  return drop
