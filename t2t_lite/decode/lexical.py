"""Lexical constraints (terminology): target phrases that every output must contain, searched
with dynamic beam allocation (Post & Vilar 2018), as fairseq's LexicallyConstrainedBeamSearch.

A sentence's constraints are its phrases' tokens one after another: `ids` int32 [B, C] and
`phrase` int32 [B, C], the phrase each token belongs to (-1: padding). A hypothesis' State
says which of them it has produced (`met` bool [N, C]) and the last one (`last` int32 [N], -1:
none), as sockeye's ConstrainedHypothesis: a phrase is met token by token, in order; a phrase
left half-way is unmet again, and the token that broke it may start another. Phrases are
unordered, and met as whole words (a piece that would go on a phrase's last word may not
follow it). EOS is kept out until every constraint token is met. Neither renormalises the
model's distribution: the scores stay log P of the output, as t2t-lite-score gives them.

At each step the candidates are the search's 2K best expansions, each hypothesis' best one and
each expansion that meets its next constraint token. Each goes in the bank of the constraint
tokens it has met, and the 2K kept are taken from the banks in turn, the best of each first
(fairseq's striping): hypotheses on their way to the constraints keep beam slots though their
scores are lower, and the beam still keeps its best unconstrained ones.

Shapes: B sentences, K beam size, N = B*K hypotheses, C constraint tokens, V vocabulary,
M candidates a sentence.
"""
from typing import NamedTuple

import tensorflow as tf

# The search's finite "log 0" (-inf would turn into NaN in 0 * -inf or -inf - -inf), defined
# here, the lowest of the search's modules: processors.py and beam_search.py take it from here.
NEG_INF = -1.0e7


class Constraints(NamedTuple):
  ids: tf.Tensor  # int32 [B, C], 0 = padding
  phrase: tf.Tensor  # int32 [B, C], the phrase of each token, -1 = padding


class State(NamedTuple):
  met: tf.Tensor  # bool [N, C]: this constraint token is produced (its phrase so far)
  last: tf.Tensor  # int32 [N]: the constraint token met at the last step, -1 = none


def from_phrases(phrases):
  """ragged int32 [B, (P), (T)] tokenized phrases -> Constraints, with one padding column
  more (so that C >= 1 whatever the batch)."""
  tokens = phrases.merge_dims(1, 2)  # [B, (C)]
  phrase_rows = phrases.values  # [B*P, (T)], the phrases of all sentences in turn
  first_phrase = tf.gather(phrases.row_splits, phrases.value_rowids())  # [B*P]
  local = tf.cast(tf.range(tf.shape(first_phrase)[0], dtype=first_phrase.dtype) - first_phrase,
                  tf.int32)
  numbers = tokens.with_flat_values(tf.gather(local, phrase_rows.value_rowids()))
  pad = [[0, 0], [0, 1]]
  return Constraints(tf.pad(tf.cast(tokens.to_tensor(0), tf.int32), pad),
                     tf.pad(numbers.to_tensor(-1), pad, constant_values=-1))


def unknown(tokens, unk_id):
  """bool [B]: the rows of forced tokens, ragged [B, (T)] (a sentence's constraint phrases, or
  its target prefix), that hold UNK: a word the vocabulary lacks. Forced, it would be <unk> in
  the output, not the word, so constraints and prefixes are refused alike for it."""
  return tf.reduce_any(tf.equal(tokens, unk_id), axis=1)


def problems(phrases, lengths, extra_length, unk_id):
  """Phrases a search cannot meet: (unknown bool [B]: a phrase has a word the vocabulary lacks
  (UNK), too_long bool [B]: with EOS its phrases' tokens do not fit in the sentence's longest
  output, lengths [B] (its source's tokens) + extra_length, tokens int [B])."""
  tokens = phrases.merge_dims(1, 2)  # [B, (C)]
  count = tf.cast(tokens.row_lengths(), tf.int32)
  return unknown(tokens, unk_id), count > lengths + extra_length, count


def initial_state(constraints, rows):
  """Nothing met, for `rows` hypotheses of constraints [rows, C]."""
  return State(tf.zeros_like(constraints.ids, tf.bool), tf.fill([rows], -1))


def count(constraints):
  """int32 [B]: each sentence's constraint tokens."""
  return tf.reduce_sum(tf.cast(constraints.phrase >= 0, tf.int32), axis=1)


def _phrase_starts(phrase):
  """bool [N, C]: the first token of each phrase."""
  before = tf.pad(phrase[:, :-1], [[0, 0], [1, 0]], constant_values=-1)
  return (phrase >= 0) & tf.not_equal(phrase, before)


def _next(constraints, state):
  """(next int32 [N], in_phrase bool [N]): the token after the last met, and whether the last
  met is inside a phrase that goes on (then only that token continues it)."""
  c = tf.shape(constraints.ids)[1]
  last = tf.maximum(state.last, 0)
  following = tf.minimum(state.last + 1, c - 1)
  in_phrase = ((state.last >= 0) & (state.last + 1 < c) & tf.equal(
      tf.gather(constraints.phrase, following, batch_dims=1),
      tf.gather(constraints.phrase, last, batch_dims=1)))
  return following, in_phrase


def advance(constraints, state, tokens):
  """The state after each hypothesis of constraints [N, C], State [N] produces tokens [N]."""
  positions = tf.range(tf.shape(constraints.ids)[1])[None, :]  # [1, C]
  following, in_phrase = _next(constraints, state)
  goes_on = in_phrase & tf.equal(tokens, tf.gather(constraints.ids, following, batch_dims=1))
  broken = in_phrase & ~goes_on  # [N]: its phrase is unmet again
  current = tf.gather(constraints.phrase, tf.maximum(state.last, 0), batch_dims=1)  # [N]
  met = state.met & ~(broken[:, None] & tf.equal(constraints.phrase, current[:, None]))
  met |= goes_on[:, None] & tf.equal(positions, following[:, None])
  can_start = (_phrase_starts(constraints.phrase) & ~met & ~goes_on[:, None]
               & tf.equal(constraints.ids, tokens[:, None]))  # [N, C]
  starts = tf.reduce_any(can_start, axis=1)
  first = tf.argmax(tf.cast(can_start, tf.int32), axis=1, output_type=tf.int32)  # [N]
  met |= starts[:, None] & tf.equal(positions, first[:, None])
  return State(met, tf.where(goes_on, following, tf.where(starts, first, -1)))


def keep_out(logits, constraints, state, eos_id, not_after=None):
  """logits float32 [N, V] -> EOS at NEG_INF for the hypotheses with a constraint unmet, and
  the tokens of not_after (bool [V], e.g. pieces that go on a word) right after a phrase is
  completed: a phrase is met as whole words ("Hund" not by "Hunde")."""
  unmet = tf.reduce_any((constraints.phrase >= 0) & ~state.met, axis=1)  # [N]
  banned = unmet[:, None] & tf.equal(tf.range(tf.shape(logits)[-1]), eos_id)[None, :]
  if not_after is not None:
    _, in_phrase = _next(constraints, state)
    completed = (state.last >= 0) & ~in_phrase  # [N]
    banned |= completed[:, None] & not_after[None, :]
  return tf.where(banned, NEG_INF, logits)


def allocate(scores, top_flat, constraints, state, *, batch_size, beam_size):
  """Dynamic beam allocation: the 2K expansions a step keeps.

  Args:
    scores: float32 [B, K*V], every expansion's log-probability (NEG_INF: not allowed).
    top_flat: the flat indices (beam * V + token) of the 2K best of them.
    constraints, state: of each hypothesis, [N, C] and [N].
  Returns (scores [B, 2K], flat indices [B, 2K], priority [B, 2K]: the order in which live
  hypotheses are taken, higher first, State [B*2K] after each, and complete bool [B, 2K]: all
  phrases met), in striped order: the first K are those a step finishes when they end in EOS,
  as the search's first K.
  """
  b, k = batch_size, beam_size
  vocab = tf.shape(scores)[1] // k
  c = tf.shape(constraints.ids)[1]
  following, in_phrase = _next(constraints, state)
  positions = tf.range(c)[None, :]
  meets = tf.where(in_phrase[:, None], tf.equal(positions, following[:, None]),
                   _phrase_starts(constraints.phrase) & ~state.met)  # [N, C]
  beams = tf.range(k)[None, :, None] * vocab  # [1, K, 1]
  meeting = tf.reshape(beams + tf.reshape(constraints.ids, [b, k, c]), [b, k * c])
  best = tf.argmax(tf.reshape(scores, [b, k, -1]), axis=2, output_type=tf.int32)  # [B, K]
  flat = tf.concat([top_flat, meeting, beams[:, :, 0] + best], axis=1)  # [B, M]
  flat = tf.cast(flat, tf.int32)
  m = tf.shape(flat)[1]
  cand_scores = tf.gather(scores, flat, batch_dims=1)  # [B, M]
  wanted = tf.concat([tf.ones_like(top_flat, tf.bool), tf.reshape(meets, [b, k * c]),
                      tf.ones_like(best, tf.bool)], axis=1)
  wanted &= cand_scores > NEG_INF / 2
  earlier = tf.range(m)[None, :] < tf.range(m)[:, None]  # [M, M]: column i before row j
  duplicate = tf.reduce_any(tf.equal(flat[:, :, None], flat[:, None, :]) & earlier
                            & wanted[:, None, :], axis=2)  # [B, M]: a wanted one came before
  valid = wanted & ~duplicate

  rows = tf.reshape(flat // vocab + tf.range(b)[:, None] * k, [-1])  # [B*M] parent hypotheses
  after = advance(Constraints(*(tf.gather(x, rows) for x in constraints)),
                  State(*(tf.gather(x, rows) for x in state)), tf.reshape(flat % vocab, [-1]))
  bank = tf.where(valid, tf.reshape(tf.reduce_sum(tf.cast(after.met, tf.int32), axis=1),
                                    [b, m]), -1)  # [B, M]: constraint tokens met
  better = ((cand_scores[:, None, :] > cand_scores[:, :, None])
            | (tf.equal(cand_scores[:, None, :], cand_scores[:, :, None]) & earlier))
  rank = tf.reduce_sum(tf.cast(tf.equal(bank[:, None, :], bank[:, :, None]) & better
                               & valid[:, None, :], tf.int32), axis=2)  # [B, M] within its bank
  stripe = tf.cast(rank * (c + 1) + (c - bank), tf.float32)  # rank 0 of each bank, then 1, ...
  priority = tf.where(valid, -stripe, NEG_INF)
  priority, order = tf.math.top_k(priority, 2 * k)  # [B, 2K]
  kept = tf.reshape(order + tf.range(b)[:, None] * m, [-1])  # [B*2K] rows of `after`
  complete = tf.gather(bank, order, batch_dims=1) >= count(constraints)[::k][:, None]
  return (tf.where(priority > NEG_INF / 2, tf.gather(cand_scores, order, batch_dims=1), NEG_INF),
          tf.gather(flat, order, batch_dims=1), priority,
          State(*(tf.gather(x, kept) for x in after)), complete)
