"""Translating text with a trained Transformer: the decoding settings, `Translator`, the API.

  texts, scores = t2t_lite.translate(model_dir, ["A man rides a horse."], beam_size=4, alpha=0.6)

`DecodeSettings` holds beam size, alpha and extra length, resolved in one place with one rule:
a value given by the caller (a flag), else hparams.json's, else the problem's (section 6.1).
`Translator` adds the vocabulary and batching by length to the in-graph search of
t2t_lite/decode/search.py; `loading.load` restores what the trainer wrote.
"""
import dataclasses
import logging
from typing import Optional

import numpy as np
import tensorflow as tf

from t2t_lite.data.problem_base import ProblemError
from t2t_lite.data.tokenizers import EOS_ID, PAD_ID
from t2t_lite.decode import loading, search
from t2t_lite.errors import T2TLiteError

logger = logging.getLogger(__name__)


class DecodingError(T2TLiteError, ValueError):
  """A bad decoding setting (one-line message)."""


@dataclasses.dataclass(frozen=True)
class DecodeSettings:
  """How to search: beam size, length penalty alpha, max output = source length + extra_length."""
  beam_size: int
  alpha: float
  extra_length: int

  def __post_init__(self):
    if self.beam_size < 1:
      raise DecodingError(f"beam_size must be >= 1, got {self.beam_size}")
    if self.alpha < 0:
      raise DecodingError(f"alpha must be >= 0, got {self.alpha}")
    if self.extra_length < 1:
      raise DecodingError(f"extra_length must be >= 1, got {self.extra_length}")

  @classmethod
  def resolve(cls, problem, hparams=None, *, beam_size=None, alpha=None, extra_length=None):
    """Each setting: the argument (a flag) if not None, else hparams' if set, else the
    problem's class default. The one place where these three sources meet."""
    given = dict(beam_size=beam_size, alpha=alpha, extra_length=extra_length)
    values = {}
    for field in dataclasses.fields(cls):
      for source in (given.get(field.name), getattr(hparams, field.name, None),
                     getattr(problem, field.name)):
        if source is not None:
          values[field.name] = source
          break
    return cls(**values)

  def as_kwargs(self):
    return dataclasses.asdict(self)


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
    self.model, self.tokenizer = model, tokenizer
    self.settings = DecodeSettings(beam_size, alpha, extra_length)
    self.max_input_length = max_input_length or model.hparams.max_length
    self.jit_compile = jit_compile
    self.length_multiple = length_multiple
    self.constraint = constraint  # e.g. a parser's grammar (search.beams)
    self.loaded: Optional[loading.LoadedModel] = None  # Set by from_model_dir.
    if jit_compile:  # XLA compiles per shape anyway: one trace per (batch, length) bucket.
      self._decode = tf.function(self._best, jit_compile=True)
    else:  # One trace for every shape.
      self._decode = tf.function(self._best, input_signature=[
          tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None], tf.int32)])

  @classmethod
  def from_model_dir(cls, model_dir, checkpoint_path=None, beam_size=None, alpha=None,
                     extra_length=None, precision="none", **kwargs):
    """The model of model_dir, computing in `precision` (precision.py); settings left None
    resolved by `DecodeSettings.resolve`."""
    loaded = loading.load(model_dir, checkpoint_path, precision)
    settings = DecodeSettings.resolve(loaded.problem, loaded.hparams, beam_size=beam_size,
                                      alpha=alpha, extra_length=extra_length)
    kwargs.setdefault("constraint", problem_constraint(loaded.problem, model_dir))
    translator = cls(loaded.model, loaded.tokenizer, **settings.as_kwargs(), **kwargs)
    translator.loaded = loaded
    return translator

  @property
  def beam_size(self):
    return self.settings.beam_size

  @property
  def alpha(self):
    return self.settings.alpha

  @property
  def extra_length(self):
    return self.settings.extra_length

  def _best(self, inputs, max_lengths):
    return search.best(self.model, inputs, max_lengths=max_lengths,
                       static_shapes=self.jit_compile, constraint=self.constraint,
                       **self.settings.as_kwargs())

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

  def _decode_batch(self, sources, batch_size=None):
    """EOS-terminated id lists, decoded at once -> (best ids without EOS each, scores)."""
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
      max_lengths[i] = len(source) + self.settings.extra_length
    ids, scores = self._decode(tf.constant(inputs), tf.constant(max_lengths))
    ids, scores = ids.numpy()[:len(sources)], scores.numpy()[:len(sources)]
    return [[int(t) for t in row if t != PAD_ID] for row in ids], [float(s) for s in scores]

  def translate(self, lines, batch_size=32, progress=None):
    """Translates lines -> (texts, scores), in input order. Empty lines give "" (score 0).

    Lines are decoded in batches of `batch_size`, longest first (similar lengths together, and
    the slowest batch is found early). `progress(n)` is called after each batch with the number
    of lines done. Lines longer than max_input_length tokens are cut (see `encode`).
    """
    return self.translate_encoded(self.encode(lines), batch_size, progress)

  def translate_encoded(self, encoded, batch_size=32, progress=None):
    """`translate` of lines already encoded by `encode`."""
    texts, scores = [""] * len(encoded.ids), [0.0] * len(encoded.ids)
    order = sorted((i for i, ids in enumerate(encoded.ids) if ids),
                   key=lambda i: -len(encoded.ids[i]))
    for start in range(0, len(order), batch_size):
      chunk = order[start:start + batch_size]
      pad_to = batch_size if self.jit_compile else None  # one batch shape for XLA
      outputs, chunk_scores = self._decode_batch([encoded.ids[i] for i in chunk], pad_to)
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


def translate(model_dir, sentences, beam_size=None, alpha=None, *, checkpoint_path=None,
              extra_length=None, batch_size=32, precision="none"):
  """Translates `sentences` with the model in model_dir -> (texts, scores), in order.

  beam_size / alpha / extra_length default to hparams.json's, else the problem's (the paper:
  4, 0.6, 50). Scores are the length-penalised log-probabilities of the outputs (beam 1:
  log-probabilities). precision: "none" (float32), "bf16" or "fp16" (precision.py). Builds the
  model each call: use `Translator.from_model_dir` for many calls.
  """
  if isinstance(sentences, str):
    raise DecodingError("translate() takes a list of sentences, got one string")
  translator = Translator.from_model_dir(model_dir, checkpoint_path, beam_size=beam_size,
                                         alpha=alpha, extra_length=extra_length,
                                         precision=precision)
  return translator.translate(list(sentences), batch_size=batch_size)


def problem_metric_fn(problem, data_dir, hparams, num_examples=100, batch_size=32):
  """-> metric_fn(model): the problem's own metric (BLEU, bracket F1, accuracy) on the first
  `num_examples` dev pairs, decoded with the run's settings (`DecodeSettings.resolve`); None
  when num_examples is 0 or data_dir keeps no dev text. For `Trainer(metric_fn=...)`."""
  if not num_examples:
    return None
  try:
    pairs = problem.text_pairs("dev", data_dir)[:num_examples]
  except ProblemError:
    return None
  sources, references = [s for s, _ in pairs], [t for _, t in pairs]
  settings = DecodeSettings.resolve(problem, hparams)
  translators = {}

  def metric_fn(model):
    if id(model) not in translators:  # One compiled decoder per model, reused every eval.
      translators[id(model)] = Translator(
          model, problem.tokenizer(data_dir), **settings.as_kwargs(),
          constraint=problem_constraint(problem, data_dir))
    hypotheses, _ = translators[id(model)].translate(sources, batch_size)
    scores = problem.score(sources, hypotheses, references)
    return {f"dev_{name}": value for name, value in scores.items()
            if isinstance(value, (int, float, str))}  # str: a BLEU's signature

  return metric_fn
