"""Translating with a trained Transformer: beam search over the model, model_dir loading, the API.

  texts, scores = t2t_lite.translate(model_dir, ["A man rides a horse."], beam_size=4, alpha=0.6)

`translate_ids` is the in-graph part (encode once, then beam search over `model.decode_step`
with its key/value cache); `Translator` adds the vocabulary, batching by length and the
problem's decoding defaults; `t2t_lite.model_dir.load` restores what the trainer wrote.

Shapes: B sentences, S source length, K beam size, L longest output, V vocabulary.
"""
import dataclasses
import logging

import numpy as np
import tensorflow as tf

from t2t_lite import beam_search as beam_search_lib
from t2t_lite import model_dir as model_dir_lib
from t2t_lite.tokenizer import EOS_ID, PAD_ID
from t2t_lite.errors import T2TLiteError

logger = logging.getLogger(__name__)

class DecodingError(T2TLiteError, ValueError):
  """A bad decoding setting (one-line message)."""


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


def translate_ids(model, inputs, *, beam_size, alpha, extra_length, max_lengths=None,
                  cached=True, static_shapes=False, min_length=0, eos_id=EOS_ID, constraint=None):
  """Beam search over the model: inputs int32 [B, S] -> (ids int32 [B, K, L], scores [B, K]).

  Args:
    inputs: source ids, 0-padded, each row ending in EOS (as `tokenizer.encode(add_eos=True)`).
    extra_length: each sentence's output has at most (its source length + extra_length) tokens.
    max_lengths: optional int [B] per-sentence limits instead (e.g. 1 for padding rows).
    cached: use the model's incremental decoder (False: recompute the full prefix each step).
    static_shapes: L = S + extra_length as a Python int (S must be static): for XLA.
    min_length: EOS is forbidden before this position (benchmarks: every output runs to L).
    constraint: optional output constraint (e.g. a parser's grammar): an object with
      `initial_state(inputs, max_lengths)` and `step(ids, index, state) -> (bias, state)`, the
      logits_mask_fn of beam_search.beam_search.
  Returns ids (EOS included, 0-padded; PAD is never generated) and length-penalised scores
  (log-probabilities renormalised without PAD), best first. With the learned position
  encoding, outputs are also limited to hparams.max_length tokens.
  """
  inputs = tf.convert_to_tensor(inputs, tf.int32)
  encoder_output, inputs_mask = model.encode(inputs, training=False)  # [B, S, D], [B, S]
  batch = inputs.shape[0] if inputs.shape[0] is not None else tf.shape(inputs)[0]
  learned = model.hparams.position_encoding == "learned"  # no positions past max_length
  if static_shapes:
    if inputs.shape[1] is None:
      raise DecodingError("static_shapes=True needs inputs with a static length")
    max_decode_length = int(inputs.shape[1]) + extra_length
    if learned:
      max_decode_length = min(max_decode_length, model.hparams.max_length)
  else:
    max_decode_length = tf.shape(inputs)[1] + extra_length
    if learned:
      max_decode_length = tf.minimum(max_decode_length, model.hparams.max_length)
  if max_lengths is None:
    max_lengths = tf.reduce_sum(tf.cast(inputs_mask, tf.int32), axis=1) + extra_length  # [B]
  if cached:
    # The cache is never reordered between beams: each step reads through `rows` instead.
    step = lambda ids, index, cache, rows: model.decode_step(ids, index, cache, cache_rows=rows)
    cache = model.init_cache(encoder_output, inputs_mask, max_decode_length)
  else:
    step, cache = _uncached_step_fn(model, encoder_output, inputs_mask, max_decode_length,
                                    static_shapes)

  def step_without_pad(ids, index, cache, *rows):
    logits, cache = step(ids, index, cache, *rows)  # [B*K, V]
    pad = tf.one_hot(PAD_ID, tf.shape(logits)[-1], on_value=beam_search_lib.NEG_INF)
    return logits + pad, cache  # PAD is never an output token

  mask_state = () if constraint is None else constraint.initial_state(inputs, max_lengths)
  return beam_search_lib.beam_search(
      step_without_pad, cache, batch_size=batch, beam_size=beam_size, alpha=alpha, eos_id=eos_id,
      max_decode_length=max_decode_length, max_lengths=max_lengths, min_length=min_length,
      reorder_cache=not cached, logits_mask_fn=constraint and constraint.step,
      mask_state=mask_state)


def sequence_scores(model, inputs, outputs, alpha):
  """Length-penalised log P(outputs | inputs) under the model, as beam search scores them.

  inputs int32 [B, S]; outputs int32 [B, T], each cut after its first EOS (0s after it).
  Returns float32 [B]: sum of log-probs (PAD excluded from the softmax, as in translate_ids)
  of the tokens up to and including EOS / lp(|Y|).
  """
  outputs = tf.convert_to_tensor(outputs, tf.int32)
  logits = model({"inputs": inputs, "targets": outputs}, training=False)  # [B, T, V]
  logits += tf.one_hot(PAD_ID, tf.shape(logits)[-1], on_value=beam_search_lib.NEG_INF)
  logprobs = tf.gather(tf.nn.log_softmax(logits), outputs, batch_dims=2)  # [B, T]
  real = tf.cast(tf.not_equal(outputs, PAD_ID), tf.float32)
  lengths = tf.reduce_sum(real, axis=1)
  return tf.reduce_sum(logprobs * real, axis=1) / beam_search_lib.length_penalty(lengths, alpha)


# ------------------------------------------------------------------------------ text in, text out


@dataclasses.dataclass
class Encoded:
  """Source ids of one batch of lines, and what happened to them."""
  ids: list  # per line: token ids ending in EOS; [] for an empty line
  truncated: list  # 0-based indices of lines cut to the maximum input length


class Translator:
  """Text in, text out: tokenizes, decodes in length-sorted batches, detokenizes.

  Without XLA one traced decoder serves every shape. With jit_compile=True, one is compiled per
  (batch, source length) shape: batches are padded to `batch_size` rows and sources to a
  multiple of `length_multiple` tokens, so that few shapes (and compilations) are needed.
  """

  def __init__(self, model, tokenizer, *, beam_size, alpha, extra_length, max_input_length=None,
               jit_compile=False, length_multiple=8, constraint=None):
    if beam_size < 1:
      raise DecodingError(f"beam_size must be >= 1, got {beam_size}")
    if alpha < 0:
      raise DecodingError(f"alpha must be >= 0, got {alpha}")
    if extra_length < 1:
      raise DecodingError(f"extra_length must be >= 1, got {extra_length}")
    self.model, self.tokenizer = model, tokenizer
    self.beam_size, self.alpha, self.extra_length = beam_size, alpha, extra_length
    self.max_input_length = max_input_length or model.hparams.max_length
    self.jit_compile = jit_compile
    self.length_multiple = length_multiple
    self.constraint = constraint
    if jit_compile:  # XLA compiles per shape anyway: one trace per (batch, length) bucket.
      self._decode = tf.function(self._decode_ids, jit_compile=True)
    else:  # One trace for every shape.
      self._decode = tf.function(self._decode_ids, input_signature=[
          tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None], tf.int32)])

  @classmethod
  def from_model_dir(cls, model_dir, checkpoint_path=None, beam_size=None, alpha=None,
                     extra_length=None, **kwargs):
    """Settings left None come from hparams.json, else the problem (section 6.1 defaults)."""
    loaded = model_dir_lib.load(model_dir, checkpoint_path)
    settings = loaded.problem.decode_settings(loaded.hparams)
    kwargs.setdefault("constraint", problem_constraint(loaded.problem, model_dir))
    translator = cls(
        loaded.model, loaded.tokenizer,
        beam_size=settings["beam_size"] if beam_size is None else beam_size,
        alpha=settings["alpha"] if alpha is None else alpha,
        extra_length=settings["extra_decode_length"] if extra_length is None else extra_length,
        **kwargs)
    translator.loaded = loaded
    return translator

  def _decode_ids(self, inputs, max_lengths):
    return translate_ids(self.model, inputs, beam_size=self.beam_size, alpha=self.alpha,
                         extra_length=self.extra_length, max_lengths=max_lengths,
                         static_shapes=self.jit_compile, constraint=self.constraint)

  def encode(self, lines):
    """Source ids (EOS-terminated, cut to max_input_length) of each line; [] for empty lines."""
    ids, truncated = [], []
    for i, line in enumerate(lines):
      if not line.strip():
        ids.append([])
        continue
      tokens = list(self.tokenizer.encode(line, add_eos=True))
      if len(tokens) > self.max_input_length:
        tokens = tokens[:self.max_input_length - 1] + [EOS_ID]
        truncated.append(i)
      ids.append(tokens)
    return Encoded(ids, truncated)

  def translate_ids_batch(self, sources, batch_size=None):
    """Decodes a list of EOS-terminated id lists at once -> (best ids list each, scores)."""
    length = max(len(s) for s in sources)
    if self.jit_compile:  # Few distinct shapes: few compilations.
      length = -(-length // self.length_multiple) * self.length_multiple
    rows = len(sources) if batch_size is None else batch_size
    inputs = np.zeros([rows, length], np.int32)
    max_lengths = np.ones([rows], np.int32)  # padding rows: [EOS] -> stop after one step
    inputs[:, 0] = EOS_ID
    for i, source in enumerate(sources):
      inputs[i, :] = 0
      inputs[i, :len(source)] = source
      max_lengths[i] = len(source) + self.extra_length
    ids, scores = self._decode(tf.constant(inputs), tf.constant(max_lengths))
    ids, scores = ids.numpy()[:len(sources), 0], scores.numpy()[:len(sources), 0]  # best beam
    return [_until_eos(row) for row in ids], [float(s) for s in scores]

  def translate(self, lines, batch_size=32, progress=None):
    """Translates lines -> (texts, scores), in input order. Empty lines give "" (score 0).

    Lines are decoded in batches of `batch_size`, longest first (similar lengths together, and
    the slowest batch is found early). `progress(n)` is called after each batch with the number
    of lines done. Lines longer than max_input_length tokens are cut (see `encode`).
    """
    encoded = self.encode(lines)
    return self.translate_encoded(encoded, batch_size, progress)

  def translate_encoded(self, encoded, batch_size=32, progress=None):
    texts, scores = [""] * len(encoded.ids), [0.0] * len(encoded.ids)
    order = sorted((i for i, ids in enumerate(encoded.ids) if ids),
                   key=lambda i: -len(encoded.ids[i]))
    for start in range(0, len(order), batch_size):
      chunk = order[start:start + batch_size]
      pad_to = batch_size if self.jit_compile else None  # one batch shape for XLA
      outputs, chunk_scores = self.translate_ids_batch([encoded.ids[i] for i in chunk], pad_to)
      for i, output, score in zip(chunk, outputs, chunk_scores):
        texts[i] = self.tokenizer.decode(output)
        scores[i] = score
      if progress:
        progress(len(chunk))
    return texts, scores


def problem_constraint(problem, directory):
  """The problem's output constraint for the vocabulary in `directory` (a data_dir or
  model_dir), or None: problems that have one define `decode_constraint(directory)`."""
  make = getattr(problem, "decode_constraint", None)
  return make(directory) if make is not None else None


def _until_eos(row):
  """Output ids up to (not including) the first EOS, without padding."""
  out = []
  for token in row:
    if token == EOS_ID:
      break
    if token != PAD_ID:
      out.append(int(token))
  return out


def translate(model_dir, sentences, beam_size=None, alpha=None, *, checkpoint_path=None,
              extra_length=None, batch_size=32):
  """Translates `sentences` with the model in model_dir -> (texts, scores), in order.

  beam_size / alpha / extra_length default to hparams.json's, else the problem's (the paper:
  4, 0.6, 50). Scores are the length-penalised log-probabilities of the outputs (beam 1:
  log-probabilities). Builds the model each call: use `Translator.from_model_dir` for many calls.
  """
  if isinstance(sentences, str):
    raise DecodingError("translate() takes a list of sentences, got one string")
  translator = Translator.from_model_dir(model_dir, checkpoint_path, beam_size=beam_size,
                                         alpha=alpha, extra_length=extra_length)
  return translator.translate(list(sentences), batch_size=batch_size)
