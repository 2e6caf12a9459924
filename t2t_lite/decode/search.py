"""Beam search over a Transformer, in the graph: encode once, then search over
`model.decode_step` with its key/value cache, growing (TensorFlow's ops) or in fixed-size
buffers (XLA, TPU). Everything here is TensorFlow ops; text, batching and settings are
`t2t_lite/decode/translation.py`'s, sampling `sampling.py`'s and forced decoding
`forced_decoding.py`'s.

Shapes: B sentences, S source length, K beam size, L longest output, V vocabulary.
"""
import tensorflow as tf

from t2t_lite.decode import beam_search, cky, lexical, processors
from t2t_lite.data.tokenizers import EOS_ID, PAD_ID
from t2t_lite.modeling.span_parser import SpanParser


def beams(model, inputs, *, beam_size, alpha, extra_length, max_lengths=None,
          static_shapes=False, constraint=None, concurrent=1, shortlist=None, prefix=None,
          not_after_prefix=None, phrases=None, bracket_offset=0.0):
  """Beam search over the model: inputs int32 [B, S] -> (ids int32 [B, K, L], scores [B, K]).

  Args:
    inputs: source ids, 0-padded, each row ending in EOS (as `tokenizer.encode(add_eos=True)`).
    extra_length: each sentence's output has at most (its source length + extra_length) tokens.
    max_lengths: optional int [B] per-sentence limits instead (e.g. 1 for padding rows).
    static_shapes: the search XLA compiles (`Translator(jit_compile=True)`, `--xla`, a TPU):
      every loop variable keeps its shape. The self-attention keys/values are fixed-size
      [B*K, H, L, K] buffers, updated in place, that each hypothesis reads through the rows
      where its earlier slots were written (beam_search's reorder_cache=False), so nothing is
      copied between beams. L may be known only as a tensor (a graph traced for any input
      shape): XLA reads it off the input's shape when it compiles for that shape. Without
      static_shapes the keys/values grow by one slot a step and are reordered by beam: without
      XLA, TensorFlow's ops would copy a whole buffer at every update.
    constraint: optional output constraint (e.g. a parser's grammar): an object with
      `initial_state(inputs, max_lengths)` and `mask_logits(ids, index, state, logits) ->
      (logits, state)`, a grammar (processors.Grammar).
    concurrent: without static_shapes, the batch is split into this many parts (rows in order)
      that are searched at the same time: independent loops, which TensorFlow's executor
      interleaves. One search's step is a chain of small ops that leaves cores idle while they
      wait for each other; a second search fills them. Each sentence's search is its own, so
      the outputs are one search's (with a shortlist, each part searches over its own sources'
      vocabulary). The tools, the export and training's evaluation pass the decoding plan's
      number (plan.concurrent_searches): this module never chooses it. With XLA
      (static_shapes) there is one search.
    shortlist: optional shortlist.Shortlist: each search runs over its sources' vocabulary
      (`batch_vocabulary`, with the prefix's and phrases' tokens) instead of the whole one.
    prefix, not_after_prefix: target prefixes [B, P] and the tokens that may not follow one
      or a phrase [V] (processors.Prefix; L >= P + extra_length).
    phrases: optional lexical.Constraints [B, C]: target phrases every output must contain
      (lexical constraints, processors.Phrases). What composes with what:
      composition.py's table, which Translator checks (decode_settings.check_request).
    bracket_offset: a span parser's (parse_spans); the other settings are a Transformer's.
  Returns ids (EOS included, 0-padded; PAD is never generated) and length-penalised scores
  (log-probabilities renormalised without PAD), best first. With the learned position
  encoding, outputs are also limited to hparams.max_length tokens.
  """
  inputs = tf.convert_to_tensor(inputs, tf.int32)
  if isinstance(model, SpanParser):  # its best tree (K = 1) whatever the beam
    return parse_spans(model, inputs, extra_length if static_shapes else None, bracket_offset)
  settings = dict(beam_size=beam_size, alpha=alpha, extra_length=extra_length,
                  static_shapes=static_shapes, constraint=constraint, shortlist=shortlist,
                  not_after_prefix=not_after_prefix)
  max_lengths = None if max_lengths is None else tf.convert_to_tensor(max_lengths, tf.int32)
  prefix = None if prefix is None else tf.convert_to_tensor(prefix, tf.int32)
  if max_lengths is None:  # Each sentence's own source length (EOS included) + extra_length.
    max_lengths = tf.reduce_sum(tf.cast(tf.not_equal(inputs, PAD_ID), tf.int32), axis=1)
    max_lengths += extra_length  # [B]
  if static_shapes or concurrent <= 1 or inputs.shape[0] == 1:
    return _search(model, inputs, max_lengths, prefix, phrases, **settings)
  return _concurrently(model, concurrent, settings, inputs, max_lengths, prefix, phrases)


def _concurrently(model, concurrent, settings, inputs, max_lengths, prefix, phrases):
  """`beams` as `concurrent` searches of consecutive rows, their results concatenated."""
  sizes = _part_sizes(tf.shape(inputs)[0], concurrent)  # [concurrent], summing to B
  split = lambda x: [None] * concurrent if x is None else tf.split(x, sizes, num=concurrent)
  phrase_parts = split(None) if phrases is None else [
      lexical.Constraints(*part) for part in zip(*map(split, phrases))]
  # One search traced once and called for each part: a search's graph is large, and tracing
  # it once per part doubled the start-up time of every bf16 decode.
  search = tf.function(lambda *part: _search(model, *part, **settings), autograph=False,
                       reduce_retracing=True)
  ids, scores = zip(*[search(*part) for part in zip(split(inputs), split(max_lengths),
                                                    split(prefix), phrase_parts)])
  return tf.concat(ids, axis=0), tf.concat(scores, axis=0)  # [B, K, L], [B, K]


def _part_sizes(batch, parts):
  """int32 [parts]: the sizes of `parts` consecutive slices of `batch` rows, as equal as they
  can be (larger first; some are 0 when batch < parts)."""
  return (batch + parts - 1 - tf.range(parts)) // parts


def _search(model, inputs, max_lengths, prefix, phrases, *, beam_size, alpha, extra_length,
            static_shapes, constraint, shortlist, not_after_prefix):
  """`beams` as one search over all of `inputs` (max_lengths int [B] given)."""
  encoder_output, inputs_mask = model.encode(inputs, training=False)  # [B, S, D], [B, S]
  batch = inputs.shape[0] if inputs.shape[0] is not None else tf.shape(inputs)[0]
  max_decode_length = output_length(model, inputs, extra_length, prefix)  # L
  if static_shapes:  # [B*K, H, L, K] buffers, read through each hypothesis' rows.
    step = lambda ids, index, cache, rows, **kw: model.decode_step(ids, index, cache,
                                                                   cache_rows=rows, **kw)
    cache = model.init_cache(encoder_output, inputs_mask, max_decode_length)
  else:  # Growing keys/values, reordered by beam after each step: both copy only written slots.
    step, cache = model.decode_step, model.init_cache(encoder_output, inputs_mask)

  # With a shortlist the search runs over positions in its vocabulary (ids [V'], in id order:
  # PAD and EOS keep positions 0 and 1), mapped to token ids for the model and the outputs;
  # the forced tokens (a prefix's, the phrases') are in it, at their positions.
  forced = [x for x in (prefix, None if phrases is None else phrases.ids) if x is not None]
  words = None if shortlist is None else processors.Shortlisted(
      shortlist.batch_vocabulary(inputs, forced), model)
  projection = {} if words is None else {"output_rows": words.output_rows}

  def step_without_pad(ids, index, cache, *cache_rows):
    if words is not None:
      ids = words.token_ids(ids)  # [B*K] token ids
    logits, cache = step(ids, index, cache, *cache_rows, **projection)  # [B*K, V or V']
    return without_pad(logits), cache

  if words is not None:  # forced tokens at their positions in the shortlist's vocabulary
    prefix = None if prefix is None else words.positions(prefix)
    phrases = None if phrases is None else phrases._replace(ids=words.positions(phrases.ids))
    not_after_prefix = None if not_after_prefix is None else words.of_vocabulary(
        not_after_prefix)
  chain = processors.for_search(
      beam_size=beam_size, length=max_decode_length, eos_id=EOS_ID,
      logits_mask_fn=constraint and constraint.mask_logits,
      mask_state=() if constraint is None else constraint.initial_state(inputs, max_lengths),
      forced_ids=prefix, not_after_forced=not_after_prefix, constraints=phrases)
  ids, scores = beam_search.beam_search(
      step_without_pad, cache, batch_size=batch, beam_size=beam_size, alpha=alpha, eos_id=EOS_ID,
      max_decode_length=max_decode_length, max_lengths=max_lengths,
      reorder_cache=not static_shapes, processors=chain)
  return (ids if words is None else words.token_ids(ids)), scores


def parse_spans(model, inputs, extra_length=None, bracket_offset=0.0):
  """A span parser's best trees (cky.py: CKY over its span scores, bracket_offset added to
  each span's log-odds), written as linearized trees: inputs int32 [B, S] -> (ids int32
  [B, 1, L], scores [B, 1]: each tree's sum of its spans' log-odds). With extra_length (static
  shapes) L is output_length's, else the longest output's."""
  max_length = None if extra_length is None else output_length(model, inputs, extra_length)
  log_probs, tags = model.span_scores(inputs)  # [B, S, S, C], [B, S]
  lengths = tf.reduce_sum(tf.cast(tf.not_equal(inputs, PAD_ID), tf.int32), axis=1) - 1
  labels, scores = cky.best_trees(log_probs, tf.maximum(lengths, 0),
                                  bracket_offset)  # [B, S, S], [B]
  spans = model.spans
  ids = cky.linearize(labels, tags, tf.maximum(lengths, 0), tf.constant(spans.opens, tf.int32),
                        tf.constant(spans.closes, tf.int32), max_length=max_length)
  return ids[:, None], scores[:, None]


def output_length(model, inputs, extra_length, prefix=None):
  """L, the longest output of inputs [B, S] (and target prefixes [B, P]): max(S, P) +
  extra_length, and no longer than the model's max_length with learned positions (it has none
  past it). A Python int when S (and P) are static, else an int32 scalar."""
  width = lambda x: x.shape[1] if x.shape[1] is not None else tf.shape(x)[1]
  length = width(inputs) + extra_length
  if prefix is not None:
    both = (length, width(prefix) + extra_length)
    length = max(both) if all(isinstance(n, int) for n in both) else tf.maximum(*both)
  if model.hparams.position_encoding != "learned":
    return length
  return (min(length, model.hparams.max_length) if isinstance(length, int)
          else tf.minimum(length, model.hparams.max_length))


def without_pad(logits):
  """logits float [..., V] -> float32 [..., V] with PAD at NEG_INF: PAD is never an output
  token, and the model's distribution is renormalised over the others."""
  logits = tf.cast(logits, tf.float32)
  return logits + tf.one_hot(PAD_ID, tf.shape(logits)[-1], on_value=beam_search.NEG_INF)


def trim_at_eos(ids):
  """int32 [B, L] -> [B, L]: EOS and every token after it replaced by PAD (0)."""
  before_eos = tf.equal(tf.cumsum(tf.cast(tf.equal(ids, EOS_ID), tf.int32), axis=1), 0)
  return tf.where(before_eos, ids, PAD_ID)

