"""A parser's outputs as its users read them, in the graph (so that t2t-lite-decode, translate()
and TF Serving answer alike): the linearized tree the model writes, "(S (NP <unk-capital> Inc.
)NP (VP said )VP . )S", becomes a Penn Treebank tree over the sentence's own words,
"(S (NP (XX Acme) (XX Inc.)) (VP (XX said)) (. .))".

It reads an output as the TreeConstraint makes it: "(X" opens a constituent, ")X" closes the
innermost, any other token is the slot of the next source word (its POS tag, XX, or with
target_tags="words" the word itself). The slot's tag is the token when it is a tag EVALB keeps
apart (punctuation) or with target_tags="all", else XX; a word whose tag the treebank fixes
(",", ".", "--", ...) gets that tag, as treebank.example_to_tree repairs it. Outputs made
without the constraint (a SentencePiece vocabulary) may not be trees; this is for the
constrained ones.

Shapes: B sentences, N outputs a sentence, T tokens of an output.
"""
import tensorflow as tf

from t2t_lite.parsing import treebank


def _ragged_cumsum(ragged):
  """Cumulative sums along the rows of a ragged int32 [R, (T)]."""
  flat = tf.cumsum(ragged.flat_values)
  before = tf.gather(tf.concat([tf.zeros([1], flat.dtype), flat], axis=0),
                     ragged.row_starts())  # [R]: the sum before each row
  return ragged.with_flat_values(flat - tf.gather(before, ragged.value_rowids()))


def _any_equal(strings, choices):
  """bool [N]: which of strings [N] is one of choices [C]."""
  return tf.reduce_any(tf.equal(strings[:, None], choices[None, :]), axis=1)


def _apostrophe_tags(words):
  """ragged string [R, (W)] -> string [all words]: treebank._apostrophe_tags' tag of each word
  ("''" or "POS" for a "'"; other words "")."""
  dense = words.to_tensor("")  # [R, W]
  # The open "`" quotes: +1 at a "`", -1 at a "'" but never below 0, the running sum of the
  # steps less its lowest prefix sum below 0 (a walk reflected at 0).
  steps = tf.cast(tf.equal(dense, "`"), tf.int32) - tf.cast(tf.equal(dense, "'"), tf.int32)
  sums = tf.cumsum(steps, axis=1)  # [R, W]
  width = tf.shape(dense)[1]
  earlier = tf.range(width)[None, :] <= tf.range(width)[:, None]  # [W, W]: j <= k
  lowest = tf.reduce_min(tf.where(earlier[None], sums[:, None, :], 0), axis=2)  # [R, W]
  open_after = sums - tf.minimum(lowest, 0)
  open_before = tf.pad(open_after[:, :-1], [[0, 0], [1, 0]])  # [R, W]
  next_closes = tf.equal(tf.pad(dense[:, 1:], [[0, 0], [0, 1]]), "''")
  tags = tf.where((open_before > 0) | next_closes, "''", "POS")
  tags = tf.where(tf.equal(dense, "'"), tags, "")
  return tf.RaggedTensor.from_tensor(tags, lengths=words.row_lengths()).flat_values


def tree_output_fn(target_tags):
  """-> output_fn(sources string [B], outputs string [B, N]) -> trees string [B, N]."""
  punctuation = tf.constant(sorted(treebank.EVALB_DELETE_LABELS))
  # A handful of words: compared with each, not looked up in a table (a table is a resource
  # that every exported signature would have to track).
  fixed_words = tf.constant(list(treebank.PUNCTUATION_TAGS))
  fixed_tags = tf.constant(list(treebank.PUNCTUATION_TAGS.values()) + [""])

  def output_fn(sources, outputs):
    batch, n = tf.shape(outputs)[0], tf.shape(outputs)[1]
    words = tf.gather(tf.strings.split(sources), tf.repeat(tf.range(batch), n))  # [B*N, (W)]
    tokens = tf.strings.split(tf.reshape(outputs, [-1]))  # [B*N, (T)]
    values = tokens.flat_values
    opening = tf.strings.regex_full_match(values, r"\(.*")
    closing = tf.strings.regex_full_match(values, r"\).*")
    slot = ~opening & ~closing
    # The source word of each token's slot (the last word past them; "" without words).
    index = _ragged_cumsum(tokens.with_flat_values(tf.cast(slot, tf.int64))).flat_values - 1
    rows = tokens.value_rowids()
    counts = tf.gather(words.row_lengths(), rows)  # [all tokens]
    position = tf.gather(words.row_starts(), rows) + tf.clip_by_value(
        index, 0, tf.maximum(counts - 1, 0))
    nothing = tf.size(words.flat_values, out_type=tf.int64)
    word = tf.gather(tf.concat([words.flat_values, [""]], axis=0),
                     tf.where(counts > 0, position, nothing))
    tag = values if target_tags == "all" else tf.where(_any_equal(values, punctuation),
                                                       values, treebank.UNKNOWN_TAG)
    # treebank._punctuation_repaired: the treebank's own tag for the words it fixes, XX for
    # any other word tagged as punctuation, and "'" tagged by its context.
    fixed = tf.gather(fixed_tags, tf.argmax(tf.concat(  # [all tokens]: "" when not fixed
        [tf.equal(word[:, None], fixed_words[None, :]), tf.ones_like(word[:, None], tf.bool)],
        axis=1), axis=1, output_type=tf.int32))
    tag = tf.where(_any_equal(tag, punctuation) & tf.not_equal(word, "'"),
                   treebank.UNKNOWN_TAG, tag)
    tag = tf.where(tf.equal(fixed, ""), tag, fixed)
    apostrophe = tf.gather(_apostrophe_tags(words), tf.where(counts > 0, position, 0))
    tag = tf.where(tf.equal(word, "'"), apostrophe, tag)
    piece = tf.where(opening, values, tf.where(closing, ")", tf.strings.join(
        ["(", tag, " ", word, ")"])))
    trees = tf.strings.reduce_join(tokens.with_flat_values(piece), axis=1, separator=" ")
    return tf.reshape(tf.strings.regex_replace(trees, r" \)", ")"), [batch, n])

  return output_fn
