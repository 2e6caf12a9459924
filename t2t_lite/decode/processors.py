"""What a feature adds to beam search (beam_search.py), as processors hooked in at named points
of its step, each with its own state that follows its hypothesis: the grammar (an output
constraint such as tree_constraint.TreeConstraint), a forced target prefix, and lexical
constraints with dynamic beam allocation (lexical.py). The search itself keeps only what every
search does; what composes with what is composition.py's table (`Processor.name` is its key).
Sampling (sampling.py) applies the same Grammar; Shortlisted, not a processor, maps a search
over a shortlist's vocabulary around the step function (search.py).

A processor's hooks, in the order a step calls them (each may keep the default):
  initial_state(batch_size, beam_size) -> its state, every leaf [B*K, ...] (or ()).
  adjust_logits(ids, index, state, logits) -> (logits, state): before the log-sum-exp, so the
    model's distribution is renormalised over what it allows (the grammar).
  restrict(logits, index, state) -> logits: after it, so what it keeps keeps the model's own
    log-probability (a forced prefix, the constraints' EOS).
  choose(candidates, top_flat, state, *, batch_size, beam_size) -> (top_logprobs [B, 2K],
    top_flat [B, 2K], priority [B, 2K], state of each of the 2K candidates [B*2K, ...]): which
    2K expansions the step keeps (dynamic beam allocation); only a processor whose `chooses`
    is True, at most one a search. Its state is then taken by candidate, the others' by parent.
  initial_finished(batch_size, beam_size) and rank_finished(merged_scores [B, 3K], finished,
    state, beam_size) -> (slots [B, K], finished) or None: which finished hypotheses are kept.

Shapes: B sentences, K beam size, N = B*K hypotheses, L longest output, V vocabulary.
"""
import tensorflow as tf

from t2t_lite.decode import composition, lexical

NEG_INF = lexical.NEG_INF  # the search's finite "log 0"


def tile_beams(x, beam_size):
  """[B, ...] -> [B * K, ...], each sentence's row repeated K times (adjacent)."""
  return tf.repeat(x, beam_size, axis=0)


class Processor:
  """A processor that does nothing at any hook: what each one overrides is what it adds."""
  name = None  # its feature: what composition.EXCLUDED says it cannot be combined with
  chooses = False

  def initial_state(self, batch_size, beam_size):
    return ()

  def adjust_logits(self, ids, index, state, logits):
    return logits, state

  def restrict(self, logits, index, state):
    return logits

  def initial_finished(self, batch_size, beam_size):
    return ()

  def rank_finished(self, merged_scores, finished, state, beam_size):
    return None


class Grammar(Processor):
  """An output constraint (e.g. a parser's grammar): `mask_logits(ids, index, state, logits)
  -> (logits, state)`, NEG_INF for forbidden tokens, the model's distribution renormalised over
  the others; its state (e.g. a stack of open brackets) starts as `state` [B, ...]."""
  name = composition.OUTPUT_CONSTRAINT

  def __init__(self, mask_logits, state):
    self.mask_logits, self.state = mask_logits, state

  def initial_state(self, batch_size, beam_size):
    return tf.nest.map_structure(lambda x: tile_beams(x, beam_size), self.state)

  def adjust_logits(self, ids, index, state, logits):
    return self.mask_logits(ids, index, state, logits)  # [N, V]


class Prefix(Processor):
  """A forced target prefix, forced_ids int32 [B, P] 0-padded (never EOS; P < L): at step t < its
  length a sentence's only expansion is its token t, with the log-probability the model gives
  it (not renormalised over one token), so scores stay log P(Y) / lp(|Y|) of the whole output.
  not_after: optional bool [V], tokens that may not come right after it (pieces that would go
  on its last word: it is whole words)."""
  name = composition.TARGET_PREFIXES

  def __init__(self, forced_ids, not_after, *, beam_size, length):
    forced_ids = tf.cast(forced_ids, tf.int32)  # [B*K, L]: every step's forced token, 0 = none
    self.forced_ids = tile_beams(
        tf.pad(forced_ids, [[0, 0], [0, length - tf.shape(forced_ids)[1]]]), beam_size)
    self.not_after = not_after

  def restrict(self, logits, index, state):
    """Every token but the forced one at NEG_INF in the rows that have one, and the tokens of
    not_after in the rows whose prefix ended at the step before."""
    forced = tf.gather(self.forced_ids, index, axis=1)  # [N]
    other = tf.not_equal(tf.range(tf.shape(logits)[-1])[None, :], forced[:, None])  # [N, V]
    banned = tf.logical_and(other, (forced > 0)[:, None])
    if self.not_after is not None:
      before = tf.gather(self.forced_ids, tf.maximum(index - 1, 0), axis=1)  # [N]
      after = (index > 0) & (before > 0) & tf.equal(forced, 0)  # [N]
      banned |= tf.logical_and(after[:, None], self.not_after[None, :])
    return tf.where(banned, NEG_INF, logits)


class Phrases(Processor):
  """Lexical constraints, lexical.Constraints [B, C]: target phrases every output contains,
  searched with dynamic beam allocation (lexical.py). EOS is kept out until a hypothesis has
  met them all; one cut at its max length may lack some, and ranks after every one that has
  them. not_after: as Prefix's, after a completed phrase. State: lexical.State of each
  hypothesis, and whether it has met every phrase (bool [N])."""
  name = composition.CONSTRAINTS
  chooses = True

  def __init__(self, constraints, not_after, *, eos_id, beam_size):
    self.constraints = lexical.Constraints(*(tile_beams(x, beam_size) for x in constraints))
    self.not_after, self.eos_id = not_after, eos_id

  def initial_state(self, batch_size, beam_size):
    rows = batch_size * beam_size
    return lexical.initial_state(self.constraints, rows), tf.zeros([rows], tf.bool)

  def restrict(self, logits, index, state):
    """EOS out, the rest as the model says."""
    return lexical.keep_out(logits, self.constraints, state[0], self.eos_id, self.not_after)

  def choose(self, candidates, top_flat, state, *, batch_size, beam_size):
    top_logprobs, top_flat, priority, met, complete = lexical.allocate(
        candidates, top_flat, self.constraints, state[0], batch_size=batch_size,
        beam_size=beam_size)
    return top_logprobs, top_flat, priority, (met, tf.reshape(complete, [-1]))  # [B*2K]

  def initial_finished(self, batch_size, beam_size):
    return tf.zeros([batch_size, beam_size], tf.bool)  # each has met its constraints

  def rank_finished(self, merged_scores, finished, state, beam_size):
    """Those cut at their max length without every phrase: after every one with them."""
    k = beam_size
    merged_met = tf.concat([finished, tf.reshape(state[1], [-1, 2 * k])], axis=1)  # [B, 3K]
    _, by_score = tf.math.top_k(merged_scores, 3 * k)  # TopK keeps ties in order: stable.
    valid = merged_scores > NEG_INF / 2
    group = tf.cast(valid & merged_met, tf.float32) + tf.cast(valid, tf.float32)  # 2, 1, 0
    _, met_first = tf.math.top_k(tf.gather(group, by_score, batch_dims=1), k)
    slots = tf.gather(by_score, met_first, batch_dims=1)  # [B, K]
    return slots, tf.gather(merged_met, slots, batch_dims=1)


def for_search(*, beam_size, length, eos_id, logits_mask_fn=None, mask_state=(),
               forced_ids=None, not_after_forced=None, constraints=None):
  """The processors named by beam_search's keywords (tests and search.py give them so), in the
  order a step applies them: logits_mask_fn (ids [N], index, state, logits [N, V]) -> (logits,
  state) with its initial mask_state (leaves [B, ...]): a Grammar; forced_ids int32 [B, P] and
  not_after_forced bool [V]: a Prefix; constraints lexical.Constraints [B, C]: Phrases (with
  not_after_forced after a phrase). A search of L = length steps, K = beam_size beams."""
  chain = []
  if logits_mask_fn is not None:
    chain.append(Grammar(logits_mask_fn, mask_state))
  if forced_ids is not None:
    chain.append(Prefix(forced_ids, not_after_forced, beam_size=beam_size, length=length))
  if constraints is not None:
    chain.append(Phrases(constraints, not_after_forced, eos_id=eos_id, beam_size=beam_size))
  return chain


class Shortlisted:
  """A search over a shortlist's vocabulary (shortlist.py): ids int32 [V'] in ascending order
  (PAD and EOS keep positions 0 and 1), the search's tokens being positions in it. Not a
  processor: it maps around the step function (positions to the model's token ids, and the
  model's output projection to these rows), and the forced tokens into positions."""

  def __init__(self, vocabulary, model):
    self.vocabulary = vocabulary  # [V']
    self.output_rows = model.output_rows(vocabulary)

  def token_ids(self, positions):
    """int32 [...] positions in the vocabulary -> the model's token ids [...]."""
    return tf.gather(self.vocabulary, positions)

  def positions(self, token_ids):
    """int32 [...] token ids, each in the vocabulary (0, PAD, at 0) -> their positions."""
    flat = tf.reshape(tf.cast(token_ids, tf.int32), [-1])
    return tf.reshape(tf.searchsorted(self.vocabulary, flat, out_type=tf.int32),
                      tf.shape(token_ids))

  def of_vocabulary(self, per_token):
    """[V, ...] a value per token id -> [V', ...] per position."""
    return tf.gather(per_token, self.vocabulary)
