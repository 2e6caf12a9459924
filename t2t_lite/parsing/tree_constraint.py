"""TreeConstraint: beam search for wsj_parsing emits only trees over exactly the source words.

A standard device of sequence-to-sequence parsers: at every step the decoder may choose only the
target symbols that keep the output a prefix of a well-formed linearized tree (see
t2t_lite/parsing/treebank.py) with one POS slot per source word:
  * an opening bracket "(X": while a word is still without a slot, inside the root (or as the
    root, first), below MAX_DEPTH, at most MAX_OPENS_IN_ROW in a row (no word between), and
    only if the output can still be finished within the sentence's maximum length (a slot per
    remaining word, a closing bracket per open one, EOS);
  * a closing bracket: only the one matching the innermost open bracket ")X" for "(X", never
    right after its opening bracket (no empty constituent), and for the root only when every
    word has its slot;
  * a POS slot: inside the root, while words are left, and only a tag the word can have: a word
    tagged as punctuation in train (, . : `` '') may take only the tags it had there (",": ","
    only; "'": POS or ''); any other word, known or UNK, takes no punctuation tag. EVALB deletes
    words by their punctuation tags and rejects a sentence whose counts then differ, so this
    keeps every output scorable. With target_tags="words" a word's slot is the word itself
    (its source token) unless it is punctuation, and it is scored with the model's probability
    of any word there (the log-sum-exp of every word's logit): the constraint fixes which
    word, so the choice left is slot against bracket, and a model that has not yet learned to
    copy its words (most of their probability on the wrong word) would otherwise open
    bracket after bracket rather than emit the word (docs/parsing.md);
  * EOS: once the root is closed (and then only EOS).
The state per hypothesis (depth, slots emitted, a stack of the expected closing ids, ...) lives
in its processor's state (decode/processors.py's Grammar) and follows its hypothesis; it needs the "words" vocabulary (source
token j = word j). Fixed-size tensors only: compiles with XLA.

Shapes: N = B * K hypotheses, S source length, V vocabulary, D = MAX_DEPTH, C word classes.
"""
import numpy as np
import tensorflow as tf

from t2t_lite.parsing import treebank
from t2t_lite.decode.beam_search import NEG_INF
from t2t_lite.data.tokenizers import UNK_ID

MAX_DEPTH = 64  # Deepest nesting allowed; the PTB sample's deepest tree has 36 levels.
# Opening brackets in a row before a word: the PTB sample's 2,925 train trees have at most 6
# (one tree; 20 have 5). Without a cap, an undertrained model that has lost its place in the
# sentence nests dozens of (NP (NP ... and never recovers (docs/parsing.md).
MAX_OPENS_IN_ROW = 6
_OPEN, _CLOSE, _TAG = 1, 2, 3
_ANY_WORD = 0  # Word class of a word that may take any non-punctuation tag.


class TreeConstraint:
  """The logits mask of the module doc: search.beams' (and sampling's) `constraint`, whose
  `initial_state` and `mask_logits` they call; `step` is the mask and the state's advance."""

  def __init__(self, vocab, tokenizer):
    """vocab: the "words" vocabulary dict (WsjParsing.read_vocab); tokenizer: its WordTokenizer."""
    words = tokenizer.vocabulary
    ids = {word: i for i, word in enumerate(words)}
    size = len(words)
    kind = np.zeros([size], np.int32)
    close_of = np.full([size], -1, np.int32)
    for token in vocab["open"]:
      kind[ids[token]] = _OPEN
      close_of[ids[token]] = ids.get(")" + token[1:], -1)
    for token in vocab["close"]:
      kind[ids[token]] = _CLOSE
    is_tag = np.zeros([size], bool)
    is_tag[[ids[token] for token in vocab["tag"]]] = True
    # Every other symbol counts as a slot when emitted (the mask decides which one may be).
    kind[(kind == 0) & (np.arange(size) >= UNK_ID)] = _TAG
    punctuation = is_tag & np.array([w in treebank.EVALB_DELETE_LABELS for w in words])
    any_tag = is_tag & ~punctuation  # Empty for "words": there, a word's slot is itself.
    self.copies_words = vocab.get("target_tags") == "words"
    self.word_tokens = tf.constant((kind == _TAG) & ~is_tag)  # [V]: the words ("words")
    classes = [any_tag]  # _ANY_WORD
    word_class = np.zeros([size], np.int32)
    for word, tags in sorted(vocab["punctuation_words"].items()):
      if word in ids and ids[word] != UNK_ID:
        allowed = np.zeros([size], bool)
        allowed[[ids[t] for t in tags if t in ids]] = True
        word_class[ids[word]] = len(classes)
        classes.append(allowed)
    self.kind = tf.constant(kind)  # [V]
    self.slot_ids = np.flatnonzero(kind == _TAG)  # what places a source word (pointer.py)
    self.close_of = tf.constant(close_of)  # [V]: the closing bracket's id of an opening one
    self.word_class = tf.constant(word_class)  # [V]
    self.class_tags = tf.constant(np.stack(classes))  # [C, V] bool: the tags a class may take
    self.vocab_size = size

  def initial_state(self, inputs, max_lengths):
    """inputs int32 [B, S] (words, EOS, 0s), max_lengths int [B] -> the state at index 0."""
    inputs = tf.convert_to_tensor(inputs, tf.int32)
    batch = tf.shape(inputs)[0]
    zeros = tf.zeros([batch], tf.int32)
    return {"depth": zeros, "slots": zeros, "opens_in_row": zeros,
            "words": tf.reduce_sum(tf.cast(inputs >= UNK_ID, tf.int32), axis=1),  # [B]
            "source": inputs,  # [B, S]
            "limit": tf.cast(max_lengths, tf.int32),
            "started": tf.zeros([batch], tf.bool), "after_open": tf.zeros([batch], tf.bool),
            "stack": tf.zeros([batch, MAX_DEPTH], tf.int32),  # expected closing ids
            "classes": tf.gather(self.word_class, inputs)}  # [B, S]

  def step(self, ids, index, state):
    """ids int32 [N]: each hypothesis' last token (0 at index 0) -> (bias [N, V], new state)."""
    state = tf.cond(index > 0, lambda: self._advance(ids, state), lambda: dict(state))
    depth, slots, words = state["depth"], state["slots"], state["words"]  # [N] each
    has_words_left = (slots < words)[:, None]  # [N, 1]
    inside = (depth > 0)[:, None]
    # Tokens needed after an opening bracket: a slot per word left, depth + 1 closes, EOS.
    fits = index + 1 + (words - slots) + depth + 2 <= state["limit"]
    may_open = (fits & (depth < MAX_DEPTH) & (state["opens_in_row"] < MAX_OPENS_IN_ROW)
                & (~state["started"] | (depth > 0)))[:, None]
    may_open &= has_words_left & tf.not_equal(self.close_of, -1)[None, :]
    innermost = tf.gather(state["stack"], tf.maximum(depth - 1, 0), batch_dims=1)  # [N]
    may_close = (depth > 1) | ((depth == 1) & (slots == words))
    may_close = (may_close & ~state["after_open"])[:, None]
    may_close &= tf.equal(tf.range(self.vocab_size)[None, :], innermost[:, None])
    word_class = tf.gather(state["classes"], self._word_index(state), batch_dims=1)  # [N]
    may_tag = tf.gather(self.class_tags, word_class)  # [N, V]
    if self.copies_words:
      may_tag |= self._own_word(state)
    may_tag &= inside & has_words_left
    kind = self.kind[None, :]
    may_end = ((state["started"] & (depth == 0)) | (words == 0))[:, None]
    allowed = ((tf.equal(kind, _OPEN) & may_open) | (tf.equal(kind, _CLOSE) & may_close)
               | (tf.equal(kind, _TAG) & may_tag)
               | (tf.equal(tf.range(self.vocab_size), 1)[None, :] & may_end))  # EOS id 1
    return tf.where(allowed, 0.0, NEG_INF), state

  def mask_logits(self, ids, index, state, logits):
    """processors.Grammar's mask_logits: logits float32 [N, V] -> (masked logits, new state)."""
    bias, state = self.step(ids, index, state)
    masked = logits + bias
    if self.copies_words:  # The own word's score: any word's (see the module doc).
      any_word = tf.reduce_logsumexp(tf.where(self.word_tokens[None, :], logits, NEG_INF),
                                     axis=1)  # [N]
      own = self._own_word(state) & tf.equal(bias, 0.0)
      masked = tf.where(own, any_word[:, None], masked)
    return masked, state

  def _word_index(self, state):
    """[N]: the index of the next source word to get a slot (the last one once all have)."""
    return tf.minimum(state["slots"], tf.shape(state["classes"])[1] - 1)

  def _own_word(self, state):
    """bool [N, V]: the next source word's own token, where it is not punctuation."""
    index = self._word_index(state)
    word = tf.gather(state["source"], index, batch_dims=1)  # [N]
    not_punctuation = tf.equal(tf.gather(state["classes"], index, batch_dims=1), _ANY_WORD)
    return not_punctuation[:, None] & tf.equal(tf.range(self.vocab_size)[None, :], word[:, None])

  def _advance(self, ids, state):
    """The state after each hypothesis' last token `ids` [N]."""
    kind = tf.gather(self.kind, ids)  # [N]
    opening, closing, tag = tf.equal(kind, _OPEN), tf.equal(kind, _CLOSE), tf.equal(kind, _TAG)
    depth = state["depth"]
    push = tf.one_hot(depth, MAX_DEPTH, on_value=True, off_value=False) & opening[:, None]
    stack = tf.where(push, tf.gather(self.close_of, ids)[:, None], state["stack"])  # [N, D]
    return dict(state, stack=stack,
                depth=depth + tf.cast(opening, tf.int32) - tf.cast(closing, tf.int32),
                slots=state["slots"] + tf.cast(tag, tf.int32),
                opens_in_row=tf.where(opening, state["opens_in_row"] + 1,
                                      tf.where(tag, 0, state["opens_in_row"])),
                started=state["started"] | opening, after_open=opening)
