"""Beam search over a Transformer, in the graph: encode once, then search over
`model.decode_step` with its key/value cache. Everything here is TensorFlow ops (tf.function and
XLA friendly); text, batching and settings are `t2t_lite/decode/translation.py`'s.

Shapes: B sentences, S source length, K beam size, L longest output, V vocabulary.
"""
import tensorflow as tf

from t2t_lite.decode import beam_search
from t2t_lite.data.tokenizers import EOS_ID, PAD_ID


def _uncached_step_fn(model, encoder_output, inputs_mask, max_decode_length, static_shapes):
  """(step fn, cache) recomputing the whole decoder over the prefix at every step (no K/V cache).

  The reference for the cached decoder, and the "uncached" line of the speed benchmark. With
  static_shapes (XLA) it runs over the fixed-size prefix buffer, otherwise over the growing one.
  """
  batch = tf.shape(encoder_output)[0]
  cache = {"encoder_output": encoder_output, "inputs_mask": inputs_mask,
           "targets": tf.zeros([batch, max_decode_length], tf.int32)}

  def step(ids, index, cache):
    positions = tf.range(tf.shape(cache["targets"])[1])
    targets = tf.where(positions == index - 1, ids[:, None], cache["targets"])  # [B*K, L]
    prefix = targets if static_shapes else targets[:, :index + 1]
    logits = model.decode(prefix, cache["encoder_output"], cache["inputs_mask"])  # [B*K, T, V]
    return tf.gather(logits, index, axis=1), dict(cache, targets=targets)  # [B*K, V]

  return step, cache


def beams(model, inputs, *, beam_size, alpha, extra_length, max_lengths=None, cached=True,
          static_shapes=False, min_length=0, eos_id=EOS_ID, constraint=None, concurrent=None):
  """Beam search over the model: inputs int32 [B, S] -> (ids int32 [B, K, L], scores [B, K]).

  Args:
    inputs: source ids, 0-padded, each row ending in EOS (as `tokenizer.encode(add_eos=True)`).
    extra_length: each sentence's output has at most (its source length + extra_length) tokens.
    max_lengths: optional int [B] per-sentence limits instead (e.g. 1 for padding rows).
    cached: use the model's incremental decoder (False: recompute the full prefix each step).
    static_shapes: L = S + extra_length as a Python int (S must be static): for XLA.
    min_length: EOS is forbidden before this position (benchmarks: every output runs to L).
    constraint: optional output constraint (e.g. a parser's grammar): an object with
      `initial_state(inputs, max_lengths)` and `mask_logits(ids, index, state, logits) ->
      (logits, state)`, the logits_mask_fn of beam_search.beam_search.
    concurrent: without static_shapes, the batch is split into this many parts (rows in order)
      that are searched at the same time: independent loops, which TensorFlow's executor
      interleaves. One search's step is a chain of small ops that leaves cores idle while they
      wait for each other; a second search fills them. Each sentence's search is its own, so
      the outputs are one search's. Default: 2 for a model computing in bfloat16 or float16,
      1 in float32, whose larger matmuls already keep the cores busy (a second search only
      competes for them). With XLA (static_shapes) there is one search.
  Returns ids (EOS included, 0-padded; PAD is never generated) and length-penalised scores
  (log-probabilities renormalised without PAD), best first. With the learned position
  encoding, outputs are also limited to hparams.max_length tokens.
  """
  inputs = tf.convert_to_tensor(inputs, tf.int32)
  settings = dict(beam_size=beam_size, alpha=alpha, extra_length=extra_length, cached=cached,
                  static_shapes=static_shapes, min_length=min_length, eos_id=eos_id,
                  constraint=constraint)
  if concurrent is None:
    concurrent = 1 if model.compute_dtype == "float32" else 2
  if static_shapes or concurrent <= 1 or inputs.shape[0] == 1:
    return _search(model, inputs, max_lengths, **settings)
  sizes = _part_sizes(tf.shape(inputs)[0], concurrent)  # [concurrent], summing to B
  parts = tf.split(inputs, sizes, num=concurrent)
  limits = ([None] * concurrent if max_lengths is None
            else tf.split(tf.convert_to_tensor(max_lengths), sizes, num=concurrent))
  ids, scores = zip(*[_search(model, part, limit, **settings)
                      for part, limit in zip(parts, limits)])
  return tf.concat(ids, axis=0), tf.concat(scores, axis=0)  # [B, K, L], [B, K]


def _part_sizes(batch, parts):
  """int32 [parts]: the sizes of `parts` consecutive slices of `batch` rows, as equal as they
  can be (larger first; some are 0 when batch < parts)."""
  return (batch + parts - 1 - tf.range(parts)) // parts


def _search(model, inputs, max_lengths, *, beam_size, alpha, extra_length, cached,
            static_shapes, min_length, eos_id, constraint):
  """`beams` as one search over all of `inputs`."""
  encoder_output, inputs_mask = model.encode(inputs, training=False)  # [B, S, D], [B, S]
  batch = inputs.shape[0] if inputs.shape[0] is not None else tf.shape(inputs)[0]
  learned = model.hparams.position_encoding == "learned"  # no positions past max_length
  if static_shapes:
    if inputs.shape[1] is None:
      raise ValueError("static_shapes=True needs inputs with a static length")
    max_decode_length = int(inputs.shape[1]) + extra_length
    if learned:
      max_decode_length = min(max_decode_length, model.hparams.max_length)
  else:
    max_decode_length = tf.shape(inputs)[1] + extra_length
    if learned:
      max_decode_length = tf.minimum(max_decode_length, model.hparams.max_length)
  if max_lengths is None:
    max_lengths = tf.reduce_sum(tf.cast(inputs_mask, tf.int32), axis=1) + extra_length  # [B]
  reorder_cache = True
  if cached and static_shapes:
    # Static buffers (updated in place under XLA), never reordered between beams: each step
    # reads a hypothesis' earlier slots through `rows` instead.
    step = lambda ids, index, cache, rows: model.decode_step(ids, index, cache, cache_rows=rows)
    cache = model.init_cache(encoder_output, inputs_mask, max_decode_length)
    reorder_cache = False
  elif cached:
    # Growing keys/values, reordered by beam after each step: both copy only written slots.
    step, cache = model.decode_step, model.init_cache(encoder_output, inputs_mask)
  else:
    step, cache = _uncached_step_fn(model, encoder_output, inputs_mask, max_decode_length,
                                    static_shapes)

  def step_without_pad(ids, index, cache, *rows):
    logits, cache = step(ids, index, cache, *rows)  # [B*K, V]
    pad = tf.one_hot(PAD_ID, tf.shape(logits)[-1], on_value=beam_search.NEG_INF)
    return logits + pad, cache  # PAD is never an output token

  mask_state = () if constraint is None else constraint.initial_state(inputs, max_lengths)
  return beam_search.beam_search(
      step_without_pad, cache, batch_size=batch, beam_size=beam_size, alpha=alpha, eos_id=eos_id,
      max_decode_length=max_decode_length, max_lengths=max_lengths, min_length=min_length,
      reorder_cache=reorder_cache, logits_mask_fn=constraint and constraint.mask_logits,
      mask_state=mask_state)


def sample(model, inputs, *, num_samples, temperature, top_k, top_p, seed, extra_length,
           max_lengths=None, constraint=None):
  """Ancestral sampling: inputs int32 [B, S] -> (ids int32 [B, N, L], log P float32 [B, N]).

  Each of the N samples of a sentence draws token after token from the model's distribution,
  its logits divided by `temperature` (towards 0: greedy), restricted to the `top_k` most
  likely tokens (0: all) and to the smallest set of most likely tokens whose probability
  reaches `top_p` (nucleus sampling; 1: all), after the constraint's mask. The draws are
  stateless: the same seed and inputs give the same samples. Scores are log P(Y) of the
  sample under the model (no temperature, no length penalty). Ids end in EOS (or at the
  sentence's maximum length), 0-padded, as `beams`.
  """
  inputs = tf.convert_to_tensor(inputs, tf.int32)
  batch, n = tf.shape(inputs)[0], num_samples
  rows = tf.repeat(inputs, n, axis=0)  # [B*N, S]: sentence b's samples are rows b*N .. b*N+N-1
  encoder_output, inputs_mask = model.encode(rows, training=False)
  cache = model.init_cache(encoder_output, inputs_mask)
  if max_lengths is None:
    max_lengths = tf.reduce_sum(tf.cast(inputs_mask, tf.int32), axis=1) + extra_length
  else:
    max_lengths = tf.repeat(tf.convert_to_tensor(max_lengths, tf.int32), n, axis=0)
  length = tf.shape(inputs)[1] + extra_length
  if model.hparams.position_encoding == "learned":
    length = tf.minimum(length, model.hparams.max_length)
  mask_state = () if constraint is None else constraint.initial_state(rows, max_lengths)

  def body(i, ids, logprobs, done, cache, mask_state):
    previous = tf.gather(ids, tf.maximum(i - 1, 0), axis=1) * tf.cast(i > 0, tf.int32)  # [B*N]
    logits, cache = model.decode_step(previous, i, cache)  # [B*N, V]
    logits = tf.cast(logits, tf.float32) + tf.one_hot(PAD_ID, tf.shape(logits)[-1],
                                                      on_value=beam_search.NEG_INF)
    if constraint is not None:
      logits, mask_state = constraint.mask_logits(previous, i, mask_state, logits)
    token = _draw(logits, temperature, top_k, top_p, tf.stack([seed, i]))  # [B*N]
    token = tf.where(done, PAD_ID, token)
    logprob = tf.gather(tf.nn.log_softmax(logits), token, batch_dims=1)
    logprobs += tf.where(done, 0.0, logprob)
    ids = tf.tensor_scatter_nd_update(  # position i of every row
        ids, tf.stack([tf.range(tf.shape(ids)[0]), tf.fill(tf.shape(token), i)], axis=1), token)
    done = done | tf.equal(token, EOS_ID) | (i + 1 >= max_lengths)
    return i + 1, ids, logprobs, done, cache, mask_state

  count = batch * n
  state = (tf.constant(0), tf.zeros([count, length], tf.int32), tf.zeros([count]),
           tf.zeros([count], tf.bool), cache, mask_state)
  _, ids, logprobs, _, _, _ = tf.while_loop(  # The caches' slot axes have no static size.
      lambda i, ids, logprobs, done, *_: (i < length) & ~tf.reduce_all(done), body, state)
  return (tf.reshape(ids, [batch, n, length]), tf.reshape(logprobs, [batch, n]))


def _draw(logits, temperature, top_k, top_p, seed):
  """One token a row of logits float32 [N, V] -> int32 [N] (see `sample`)."""
  logits = logits / tf.maximum(tf.cast(temperature, tf.float32), 1e-6)
  if top_k:
    kth = tf.math.top_k(logits, top_k).values[:, -1:]  # [N, 1]
    logits = tf.where(logits < kth, beam_search.NEG_INF, logits)
  if top_p < 1.0:
    probs = tf.sort(tf.nn.softmax(logits), direction="DESCENDING")  # [N, V]
    before = tf.cumsum(probs, axis=1, exclusive=True)  # mass of the tokens ranked above
    least = tf.reduce_min(tf.where(before < top_p, probs, 2.0), axis=1, keepdims=True)
    logits = tf.where(tf.nn.softmax(logits) < least, beam_search.NEG_INF, logits)
  return tf.cast(tf.random.stateless_categorical(logits, 1, seed)[:, 0], tf.int32)


def target_logprobs(model, inputs, outputs):
  """Forced decoding: log P(outputs | inputs) under the model (PAD excluded from the softmax,
  as in `beams`): inputs int32 [B, S]; outputs int32 [B, T], each ending in EOS, 0-padded ->
  (sum of the log-probabilities float32 [B], tokens int32 [B], EOS included)."""
  outputs = tf.convert_to_tensor(outputs, tf.int32)
  logits = tf.cast(model({"inputs": inputs, "targets": outputs}, training=False), tf.float32)
  logits += tf.one_hot(PAD_ID, tf.shape(logits)[-1], on_value=beam_search.NEG_INF)
  logprobs = tf.gather(tf.nn.log_softmax(logits), outputs, batch_dims=2)  # [B, T]
  real = tf.not_equal(outputs, PAD_ID)
  return (tf.reduce_sum(tf.where(real, logprobs, 0.0), axis=1),
          tf.reduce_sum(tf.cast(real, tf.int32), axis=1))


def sequence_scores(model, inputs, outputs, alpha):
  """Length-penalised log P(outputs | inputs) under the model, as beam search scores them:
  outputs int32 [B, T], each cut after its first EOS (0s after it) -> float32 [B]."""
  logprob, tokens = target_logprobs(model, inputs, outputs)
  return logprob / beam_search.length_penalty(tokens, alpha)


def trim_at_eos(ids):
  """int32 [B, L] -> [B, L]: EOS and every token after it replaced by PAD (0)."""
  before_eos = tf.equal(tf.cumsum(tf.cast(tf.equal(ids, EOS_ID), tf.int32), axis=1), 0)
  return tf.where(before_eos, ids, PAD_ID)


def best(model, inputs, **settings):
  """The best beam of `beams(model, inputs, **settings)` -> (ids int32 [B, L] without EOS,
  0-padded; scores float32 [B])."""
  ids, scores = beams(model, inputs, **settings)  # [B, K, L], [B, K]
  return trim_at_eos(ids[:, 0]), scores[:, 0]
