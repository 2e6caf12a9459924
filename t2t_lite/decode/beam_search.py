"""Beam search (section 6.1): batched, incremental, XLA-compilable; greedy is beam size 1.

A pure function in the style of flax's examples/wmt `decode.py`: the caller supplies
`symbols_to_logits_fn(ids, index, cache) -> (logits, cache)` and an initial cache; the search
keeps everything in fixed-size tensors and a `tf.while_loop`, so it compiles with
`tf.function(jit_compile=True)` and runs on TPU.

Shapes: B sentences, K beam size, L the longest output (max_decode_length), V vocabulary.

The search keeps, per sentence, K live hypotheses (no EOS yet) and the K best finished ones.
At each step the 2K best expansions are taken, so that hypotheses ending in EOS never leave
fewer than K live ones to extend. As in fairseq, an expansion ending in EOS is finished only if
it ranks among the first K; with beam 1 alpha is ignored (set to 0), so beam 1 is exactly greedy
decoding, as tensor2tensor's beam size 1 (with alpha > 0 a beam of 1 could otherwise continue
past an EOS whenever the length penalty lets a longer output win).
Finished hypotheses are ranked by log P(Y) / lp(Y), lp(Y) = ((5 + |Y|) / 6)^alpha (GNMT), where
|Y| counts the EOS. A sentence stops when no live hypothesis can beat its worst finished one,
or at its own maximum length, where the live hypotheses are finished as they are (no EOS).
What a feature adds (an output grammar, a forced target prefix, lexical constraints with
dynamic beam allocation) is a processor (processors.py) hooked in at named points of a step,
with its own state that follows its hypothesis; the search itself knows none of them.

The cache follows its hypotheses: by default every changed leaf is gathered by parent beam after
each step (flax, tensor2tensor); with reorder_cache=False nothing is copied and the step function
reads a hypothesis' earlier slots through `rows` instead. search.py uses the first for the
Transformer's growing caches (no XLA) and the second for its static buffers (XLA), where
copying whole buffers at every step would cost more than the rest of a step.
"""
from typing import Any, NamedTuple

import tensorflow as tf

from t2t_lite.decode.processors import NEG_INF, for_search, tile_beams


def length_penalty(length, alpha):
  """GNMT length penalty ((5 + |Y|) / 6)^alpha (Wu et al. 2016)."""
  return tf.pow((5.0 + tf.cast(length, tf.float32)) / 6.0, alpha)


class BeamState(NamedTuple):
  """The loop state. Sequences hold a leading 0 (the decoder's start token) at position 0."""
  index: tf.Tensor  # int32 scalar: the position being predicted.
  live_seqs: tf.Tensor  # int32 [B, K, L + 1]
  live_logprobs: tf.Tensor  # float32 [B, K], log P of each live prefix.
  finished_seqs: tf.Tensor  # int32 [B, K, L + 1]
  finished_scores: tf.Tensor  # float32 [B, K], length-penalised; <= NEG_INF / 2 = empty slot.
  done: tf.Tensor  # bool [B]: nothing left to find for this sentence.
  cache: Any  # nested structure, every leaf [B * K, ...]
  rows: tf.Tensor  # int32 [B * K, L]: the cache row holding each hypothesis' slot t.
  states: Any  # each processor's state of each live hypothesis (leaves [B * K, ...]).
  finished_states: Any  # each processor's of each finished hypothesis (leaves [B, K, ...]).


def _gather_beams(x, indices):
  """x [B, K_old, ...], indices int [B, K_new] -> [B, K_new, ...]."""
  return tf.gather(x, indices, batch_dims=1)


def _gather_flat(x, indices, beam_size):
  """x [B * K, ...], indices [B, K] beam ids -> [B * K, ...] reordered within each sentence."""
  batch = tf.shape(indices)[0]
  flat = indices + tf.range(batch)[:, None] * beam_size  # [B, K]
  return _with_static_shape(tf.gather(x, tf.reshape(flat, [-1])), x.shape)


def _with_static_shape(x, shape):
  """x with the static `shape` merged into its own (no op: TFLite has no EnsureShape, and a
  converted search would need Flex for it)."""
  x.set_shape(shape)
  return x


def top_k(x, k, chunk=128):
  """tf.math.top_k(x, k) of x float32 [B, N], exactly (values, indices and the order of ties),
  reading most of x only once.

  TensorFlow's TopK costs several times a pass over x (a vocabulary times the beam, at every
  step). Here: the maximum of each chunk of x, the k best chunks (every one of the k best
  elements is in one of them: a chunk ranked before an element's own holds an element ranked
  before it), then TopK over those k chunks, taken in their order in x so that ties still go
  to the lower index. N may be unknown until run (a shortlist's size).
  """
  n = x.shape[-1]
  if n is not None and n <= k * chunk:
    return tf.math.top_k(x, k)
  if n is None:  # padded to whole chunks, k of them at least (Pad passes x on if it fits)
    size = tf.shape(x)[-1]
    padding = tf.maximum(k * chunk, (size + chunk - 1) // chunk * chunk) - size
    x = tf.pad(x, [[0, 0], [0, padding]], constant_values=-float("inf"))
  elif n % chunk:
    x = tf.pad(x, [[0, 0], [0, -n % chunk]], constant_values=-float("inf"))
  chunks = tf.reshape(x, [tf.shape(x)[0], -1, chunk])  # [B, N / chunk, chunk]
  _, best = tf.math.top_k(tf.reduce_max(chunks, axis=-1), k)  # [B, k]
  best = tf.sort(best, axis=-1)
  candidates = tf.reshape(tf.gather(chunks, best, batch_dims=1), [-1, k * chunk])  # [B, k*chunk]
  values, where = tf.math.top_k(candidates, k)  # [B, k]
  return values, tf.gather(best, where // chunk, batch_dims=1) * chunk + where % chunk


def log_sum_exp(logits):
  """float32 [N, V] -> [N]: log sum_v exp(logits[n, v]).

  As max - log(largest softmax probability), exp(max - logsumexp): oneDNN's softmax on the CPU
  costs a fraction of TensorFlow's log_softmax or reduce_logsumexp, which write and reread
  several [N, V] intermediates. The largest probability is at least 1 / V, so its log is exact
  to float32 precision."""
  largest = tf.reduce_max(logits, axis=-1)  # [N]
  return largest - tf.math.log(tf.reduce_max(tf.nn.softmax(logits), axis=-1))


def _keep_static_shape(new, old):
  """Static shapes in, static shapes out: `new` gets back the static sizes of `old` that it lost
  (a dynamic batch_size loses them); a size that changed (a growing cache, eagerly) is new's."""
  return _with_static_shape(new, [n if n is not None else o for n, o in
                                  zip(new.shape.as_list(), old.shape.as_list())])


def _valid(scores):
  return scores > NEG_INF / 2


def _follow_parents(new_cache, state, parent_beams, beam_size, reorder_cache):
  """The cache and rows of the kept hypotheses, parent_beams [B, K]: beam_search's
  reorder_cache (every changed leaf gathered by parent) or its rows (nothing copied)."""
  if reorder_cache:
    return tf.nest.map_structure(
        lambda new, old: new if new is old else _gather_flat(new, parent_beams, beam_size),
        new_cache, state.cache), state.rows
  # Slots 0..i as the parent's (its own row wrote slot i), later ones: own row.
  own_rows = tf.range(tf.shape(state.rows)[0])[:, None]  # [B*K, 1]
  written = tf.range(tf.shape(state.rows)[1]) <= state.index  # [L]
  rows = tf.where(written, _gather_flat(state.rows, parent_beams, beam_size), own_rows)
  # A hypothesis' own counters ([B*K], e.g. the words a parse has placed) still follow it:
  # rows address slot buffers only, and a counter costs nothing to copy.
  return tf.nest.map_structure(
      lambda new, old: _gather_flat(new, parent_beams, beam_size)
      if new is not old and new.shape.rank == 1 else new, new_cache, state.cache), rows


def _merge_finished(state, top_seqs, new_scores, processors, states):
  """The K best of the finished hypotheses so far and the new ones, new_scores [B, 2K]
  (NEG_INF: not finished here), ranked by score unless a processor ranks them (states: the
  processors' states of the 2K new ones) -> (seqs [B, K, L + 1], scores [B, K], the
  processors' states of the finished ones)."""
  k = state.finished_scores.shape[1]
  merged_scores = tf.concat([state.finished_scores, new_scores], axis=1)  # [B, 3K]
  merged_seqs = tf.concat([state.finished_seqs, top_seqs], axis=1)  # [B, 3K, L + 1]
  scores, slots = tf.math.top_k(merged_scores, k)  # [B, K]
  finished_states = list(state.finished_states)
  for n, processor in enumerate(processors):
    ranked = processor.rank_finished(merged_scores, finished_states[n], states[n], k)
    if ranked is not None:
      slots, finished_states[n] = ranked  # [B, K]
      scores = _gather_beams(merged_scores, slots)
  return _gather_beams(merged_seqs, slots), scores, tuple(finished_states)


def _check_arguments(beam_size, alpha, max_decode_length):
  if beam_size < 1:
    raise ValueError(f"beam_size must be >= 1, got {beam_size}")
  if alpha < 0:
    raise ValueError(f"alpha must be >= 0, got {alpha}")
  if isinstance(max_decode_length, int) and max_decode_length < 1:
    raise ValueError(f"max_decode_length must be >= 1, got {max_decode_length}")


def _initial_state(cache, batch_size, beam_size, length, processors):
  """The search's BeamState before its first step."""
  k = beam_size
  # Only beam 0 is live at first, so the K beams don't start as K copies of one hypothesis.
  live_logprobs = tf.tile(tf.constant([[0.0] + [NEG_INF] * (k - 1)]), [batch_size, 1])
  empty_seqs = tf.zeros([batch_size, k, length + 1], tf.int32)
  return BeamState(
      index=tf.constant(0), live_seqs=empty_seqs, live_logprobs=live_logprobs,
      finished_seqs=empty_seqs, finished_scores=tf.fill([batch_size, k], NEG_INF),
      done=tf.zeros([batch_size], tf.bool),
      cache=tf.nest.map_structure(lambda x: tile_beams(x, k), cache),
      rows=tf.tile(tf.range(batch_size * k)[:, None], [1, length]),  # [B*K, L]
      states=tuple(p.initial_state(batch_size, k) for p in processors),
      finished_states=tuple(p.initial_finished(batch_size, k) for p in processors))


def beam_search(symbols_to_logits_fn, cache, *, batch_size, beam_size, alpha, eos_id,
                max_decode_length, max_lengths=None, reorder_cache=True, processors=(),
                **keywords):
  """Returns (sequences int32 [B, K, L], scores float32 [B, K]), best first per sentence.

  Args:
    symbols_to_logits_fn: (ids int32 [B*K] previous tokens (0 at index 0), index int32 scalar,
      cache) -> (logits float32 [B*K, V], new cache). Leaves it returns unchanged (e.g. encoder
      keys/values) are not reordered: they are equal across the beams of a sentence.
    cache: nested structure of tensors with leading dimension B; tiled here to B*K.
    batch_size: B (a Python int or an int32 scalar). beam_size: K >= 1; 1 is greedy decoding
      (alpha is then ignored). alpha: length penalty exponent >= 0 (0: by log-probability).
    max_decode_length: L, the output buffer's size and the loop bound (a Python int, or an
      int32 scalar; under XLA one it can compute from the input shapes it compiles for).
    max_lengths: optional int [B], each sentence's own maximum output length (clipped to L);
      a sentence that reaches it is finished with the tokens it has. Default: L for all.
    reorder_cache: True: after each step every changed cache leaf is gathered by parent beam.
      False: only changed leaves of rank 1 (a hypothesis' own counters) are; the step function
      is called as fn(ids, index, cache, rows), rows int32 [B*K, L] the cache row where
      hypothesis n's slot t was written (n for t >= index): it writes slot `index` of row n
      and reads slot t < index from rows[n, t] (Transformer.decode_step's cache_rows).
    processors: what features add to the search (processors.py), applied in this order;
      `keywords` name more of them, processors.for_search's, applied after these.

  Sequences contain the EOS that ended them (if any) and 0s after it. Scores are
  log P(Y) / lp(|Y|); missing hypotheses (too short a vocabulary or length) <= NEG_INF / 2.
  Longer than our usual function, on purpose: the loop body's four steps (expand, keep the
  live beams, merge the finished ones, decide which sentences are done) share a dozen tensors;
  split into functions they would pass all of them around, and read less like section 6.1.
  """
  _check_arguments(beam_size, alpha, max_decode_length)
  k, length = beam_size, max_decode_length
  if k == 1:
    alpha = 0.0  # Greedy: the first EOS ends the output, whatever its length.
  if max_lengths is None:
    max_lengths = tf.fill([batch_size], length)
  max_lengths = tf.minimum(tf.cast(max_lengths, tf.int32), length)  # [B]
  positions = tf.range(length + 1)  # [L + 1]
  steps = list(processors) + for_search(beam_size=k, length=length, eos_id=eos_id, **keywords)
  chooser = [n for n, p in enumerate(steps) if p.chooses]
  if len(chooser) > 1:
    raise ValueError("at most one processor may choose the expansions a step keeps")

  state = _initial_state(cache, batch_size, k, length, steps)

  def cond(state):
    return tf.logical_and(state.index < length, tf.logical_not(tf.reduce_all(state.done)))

  def body(state):
    """One step of the search. Longer than our usual function for the reason given above."""
    i = state.index
    ids = tf.reshape(tf.gather(state.live_seqs, i, axis=2), [-1])  # [B*K]
    if reorder_cache:
      logits, new_cache = symbols_to_logits_fn(ids, i, state.cache)  # [B*K, V]
    else:
      logits, new_cache = symbols_to_logits_fn(ids, i, state.cache, state.rows)
    vocab = tf.shape(logits)[-1]
    logits = tf.cast(logits, tf.float32)
    states = list(state.states)
    for n, p in enumerate(steps):
      logits, states[n] = p.adjust_logits(ids, i, states[n], logits)  # [B*K, V]
    # log P(hypothesis + token) = live log-prob + logit - logsumexp(logits), added as one offset
    # per row: no [B*K, V] log-probabilities are written.
    offsets = tf.reshape(state.live_logprobs, [-1]) - log_sum_exp(logits)  # [B*K]
    for n, p in enumerate(steps):  # After the offsets: what is kept keeps its log-probability.
      logits = p.restrict(logits, i, states[n])
    # K*V kept static where V is: top_k's chunks need a known size or a pad.
    flat = -1 if logits.shape[-1] is None else k * logits.shape[-1]
    candidates = tf.reshape(logits + offsets[:, None], [batch_size, flat])  # [B, K*V]

    # The 2K best expansions of the K live hypotheses (or those a processor chooses).
    top_logprobs, top_flat = top_k(candidates, 2 * k)  # [B, 2K]
    priority = top_logprobs  # which live ones are kept first
    for n in chooser:  # its state is now its 2K candidates': [B*2K, ...]
      top_logprobs, top_flat, priority, states[n] = steps[n].choose(
          candidates, top_flat, states[n], batch_size=batch_size, beam_size=k)
    top_beams = top_flat // vocab  # [B, 2K]
    top_ids = top_flat % vocab  # [B, 2K]
    top_seqs = _gather_beams(state.live_seqs, top_beams)  # [B, 2K, L + 1]
    top_seqs = tf.where(positions == i + 1, top_ids[:, :, None], top_seqs)
    at_limit = (i + 1 >= max_lengths)[:, None]  # [B, 1]: this token is the sentence's last.
    ending = tf.logical_or(tf.equal(top_ids, eos_id), at_limit)  # [B, 2K]
    ending = tf.logical_and(ending, tf.logical_not(state.done)[:, None])

    # Live: the K best expansions that do not end, and their caches.
    _, live_slots = tf.math.top_k(tf.where(ending, NEG_INF, priority), k)  # [B, K]
    live_logprobs = _gather_beams(tf.where(ending, NEG_INF, top_logprobs), live_slots)
    live_seqs = _gather_beams(top_seqs, live_slots)  # [B, K, L + 1]
    parent_beams = _gather_beams(top_beams, live_slots)  # [B, K]
    new_cache, rows = _follow_parents(new_cache, state, parent_beams, k, reorder_cache)

    # Finished: merge the ending expansions among the first K with the K kept so far.
    new_scores = top_logprobs / length_penalty(i + 1, alpha)
    new_scores = tf.where(ending & (tf.range(2 * k) < k), new_scores, NEG_INF)  # [B, 2K]
    finished_seqs, finished_scores, finished_states = _merge_finished(
        state, top_seqs, new_scores, steps, states)

    # Each processor's state follows its hypothesis: a chooser's by candidate, others' by parent.
    kept = tf.reshape(live_slots + tf.range(batch_size)[:, None] * (2 * k), [-1])  # [B*K]
    states = [tf.nest.map_structure(
        (lambda x: tf.gather(x, kept)) if n in chooser
        else (lambda x: _gather_flat(x, parent_beams, k)), s) for n, s in enumerate(states)]

    # Done: the best a live hypothesis can still reach (log-probs only fall; the penalty is at
    # most lp(max length)) is below the worst finished, or the sentence hit its max length.
    best_live = tf.reduce_max(live_logprobs, axis=1) / length_penalty(max_lengths, alpha)
    worst_finished = tf.reduce_min(finished_scores, axis=1)  # [B]
    cannot_improve = tf.logical_and(_valid(worst_finished), worst_finished >= best_live)
    no_live = tf.logical_not(_valid(tf.reduce_max(live_logprobs, axis=1)))
    done = state.done | cannot_improve | no_live | (i + 1 >= max_lengths)
    new_state = BeamState(index=i + 1, live_seqs=live_seqs, live_logprobs=live_logprobs,
                          finished_seqs=finished_seqs, finished_scores=finished_scores,
                          done=done, cache=new_cache, rows=rows, states=tuple(states),
                          finished_states=finished_states)
    return (tf.nest.map_structure(_keep_static_shape, new_state, state),)

  (state,) = tf.while_loop(cond, body, (state,), maximum_iterations=length)
  return state.finished_seqs[:, :, 1:], state.finished_scores  # [B, K, L], [B, K]
