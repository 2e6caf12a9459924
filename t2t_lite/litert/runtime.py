"""LiteRTTranslator: lines decoded by an exported .tflite model, as translation.Translator
decodes them (the same outputs and scores for the same model), without TensorFlow.

What Translator._decode_text does in the graph is done here in numpy: blank lines (no ids,
score 0, never flagged), sources cut to max_input_length - 1 tokens + EOS (flagged), target
prefixes cut alike, max_lengths = 1 for an empty line, else max(source, prefix tokens) + 1 +
extra_length, outputs trimmed at EOS, detokenized and their invalid UTF-8 replaced. Lines go
in batches of similar length, longest first, and come back in input order (line_batches'
decode_lines, the TensorFlow engine's own). The model holds one Transformer's beam search with
the export's beam size, alpha and extra_length; n_best (up to the beam) is chosen here.

Shapes: B sentences, S source tokens (EOS included), P prefix tokens, K = beam_size outputs a
sentence from the model (N = n_best kept), L output length.
"""
import logging
import os
import re

import numpy as np

from t2t_lite import files
from t2t_lite.decode import composition, line_batches
from t2t_lite.decode.decode_settings import (TARGET_PREFIXES, DecodeSettings, DecodingError,
                                             check_request, forced)
from t2t_lite.litert import exported as exports
from t2t_lite.litert import tokenizing
from t2t_lite.litert.exported import LiteRTError, MissingRuntime
from t2t_lite.litert.tokenizing import EOS_ID, PAD_ID, UNK_ID

logger = logging.getLogger(__name__)
_EMBEDDING = re.compile(r"embedding", re.IGNORECASE)


def open_interpreter(model_path, num_threads=None):
  """ai_edge_litert's Interpreter of `model_path`; its absence refused in one line."""
  try:
    from ai_edge_litert.interpreter import Interpreter
  except ImportError:
    raise MissingRuntime("the LiteRT engine needs ai_edge_litert: pip install -e '.[litert]'"
                         ) from None
  try:
    return Interpreter(model_path=model_path, num_threads=num_threads)
  except (ValueError, RuntimeError) as e:
    raise LiteRTError(f"{model_path} is not a LiteRT model this runtime loads: "
                      f"{' '.join(str(e).split())[:300]}") from None


def model_vocab_size(interpreter):
  """The vocabulary size of a t2t-lite .tflite model: the first dimension of its embedding
  table [V, D] (the shared embedding's weights, a constant of the model whatever their
  quantization), or None where no tensor is named so."""
  sizes = {int(d["shape"][0]) for d in interpreter.get_tensor_details()
           if _EMBEDDING.search(d["name"]) and len(d["shape"]) == 2}
  return min(sizes) if len(sizes) == 1 else (max(sizes) if sizes else None)


class LiteRTTranslator(line_batches.LineDecoding):
  """Text in, text out, through an export's .tflite model (module docstring).

  NEG_INF: the score of an output slot the search could not fill (lexical.NEG_INF, the search's
  finite "log 0"; tests/test_litert_runtime.py checks that they agree).

  Args:
    export_dir: a t2t-lite-export --format=litert directory.
    num_threads: the interpreter's threads (None: every core this process may use).
    max_input_length: longer inputs are cut to it, EOS included (default: the export's).
    **settings: DecodeSettings' fields; beam_size, alpha and extra_length are the export's (a
      different value is refused: export again), n_best up to its beam size (default: the
      export's); sampling, a shortlist and lexical constraints are refused
      (check_request(engine="litert")).
  """

  NEG_INF = -1.0e7
  jit_compile = False  # line_batches: batches of any shape

  def __init__(self, export_dir, num_threads=None, *, max_input_length=None, precision="auto",
               **settings):
    check_request(max_input_length=max_input_length, engine="litert", **settings)
    from t2t_lite.decode import plan as decoding_plan
    self.export = export = exports.read(export_dir)
    if precision != "auto" and decoding_plan.litert_quantization(precision) != export.quantization:
      raise LiteRTError(f"--precision={precision}: the LiteRT export {export_dir} holds "
                        f"{export.quantization} weights; leave --precision out, or export with "
                        f"--quantization={decoding_plan.litert_quantization(precision)}")
    self.settings = DecodeSettings(**_settings(export, settings))
    self.max_input_length = (export.max_input_length if max_input_length is None
                             else max_input_length)
    self.tokenizer = tokenizing.tokenizer(export.tokenizer["kind"], export.tokenizer_path)
    if self.tokenizer.vocab_size != export.vocab_size:
      raise LiteRTError(f"{export.tokenizer_path} is a vocabulary of {self.tokenizer.vocab_size}"
                        f" tokens, the model's has {export.vocab_size} "
                        f"({os.path.join(export_dir, exports.EXPORT_FILE)}): not this model's")
    self.plan = decoding_plan.litert(export.quantization, num_threads, precision)
    self.interpreter = open_interpreter(export.model_path, self.plan.threads)
    found = model_vocab_size(self.interpreter)
    if found is not None and found != export.vocab_size:
      raise LiteRTError(f"{export.model_path} is a model of a vocabulary of {found} tokens, "
                        f"not the {export.vocab_size} its JSON and tokenizer have")
    self._inputs = self._tensors(self.interpreter.get_input_details(), "inputs")
    self._outputs = self._tensors(self.interpreter.get_output_details(), "outputs")
    self._shapes = {}  # the input shapes the interpreter is allocated for

  def _tensors(self, details, which):
    """{the JSON's key: the tensor's index} of the model's inputs or outputs."""
    by_name = {d["name"]: d["index"] for d in details}
    names = self.export.info[which]
    missing = [name for name in names.values() if name not in by_name]
    if missing:
      raise LiteRTError(f"{self.export.model_path} has no {which[:-1]} {missing[0]!r} (it has "
                        f"{', '.join(sorted(by_name))}): not the model its JSON describes")
    return {key: by_name[name] for key, name in names.items()}

  # ------------------------------------------------------------------ the model
  def _search(self, inputs, max_lengths, prefix):
    """int32 [B, S], [B], [B, P] -> (ids int32 [B, K, L], scores float32 [B, K])."""
    feeds = {"inputs": inputs, "max_lengths": max_lengths, "prefix": prefix}
    shapes = {key: value.shape for key, value in feeds.items()}
    if shapes != self._shapes:  # Resized (and allocated) only when a shape changes.
      for key, shape in shapes.items():
        self.interpreter.resize_tensor_input(self._inputs[key], list(shape))
      # Quietly: XNNPACK's "Created ... delegate" line would come before a tool's first line.
      files.stderr_to_devnull(self.interpreter.allocate_tensors)
      self._shapes = shapes
    for key, value in feeds.items():
      self.interpreter.set_tensor(self._inputs[key], value)
    self.interpreter.invoke()
    return (self.interpreter.get_tensor(self._outputs["ids"]),
            self.interpreter.get_tensor(self._outputs["scores"]))

  def _source(self, tokens, add_eos=True):
    """Token lists without EOS -> (int32 [B, S] with EOS (or a prefix without), truncated [B],
    lengths [B] without EOS): Translator._source."""
    cut = self.max_input_length - 1
    truncated = np.array([len(t) > cut for t in tokens], bool)
    rows = [list(t[:cut]) + ([EOS_ID] if add_eos else []) for t in tokens]
    width = max([len(r) for r in rows], default=0)
    ids = np.full([len(rows), width], PAD_ID, np.int32)
    for i, row in enumerate(rows):
      ids[i, :len(row)] = row
    lengths = np.array([len(r) - int(add_eos) for r in rows], np.int32)
    return ids, truncated, lengths

  def decode_text(self, lines, prefixes=None):
    """str [B] (and target prefixes str [B]) -> {"outputs": object [B, N], "scores" float32
    [B, N], "truncated" bool [B]}: Translator.decode_text (decode_with_prefix)."""
    lines = [tokenizing.valid_utf8(line) for line in lines]
    blank = np.array([tokenizing.is_blank(line) for line in lines], bool)
    inputs, truncated, lengths = self._source(self.tokenizer.encode(lines))
    empty = blank | (lengths == 0)
    prefix = np.zeros([len(lines), 0], np.int32)
    if prefixes is not None:
      if len(prefixes) != len(lines):
        raise DecodingError("one prefix for each input")
      tokens = self.tokenizer.encode([tokenizing.valid_utf8(p) for p in prefixes])
      if any(UNK_ID in t and not e for t, e in zip(tokens, empty)):
        raise DecodingError("a target prefix has a word that is not in the vocabulary")
      prefix, cut, prefix_lengths = self._source(tokens, add_eos=False)
      prefix[empty] = PAD_ID
      truncated |= cut
      lengths = np.maximum(lengths, prefix_lengths)
    max_lengths = np.where(empty, 1, lengths + 1 + self.settings.extra_length).astype(np.int32)
    ids, scores = self._search(inputs, max_lengths, prefix)
    n = self.settings.n_best
    ids, scores = ids[:, :n].copy(), scores[:, :n].copy()  # [B, N, L], [B, N]
    ids[empty], scores[empty] = PAD_ID, 0.0
    outputs = np.empty(scores.shape, object)
    for i, j in np.ndindex(*scores.shape):
      outputs[i, j] = self.tokenizer.decode(ids[i, j])
    return {"outputs": outputs, "scores": scores.astype(np.float32),
            "truncated": truncated & ~blank}

  # ------------------------------------------------------------------ lines
  def check_forcing(self, what=TARGET_PREFIXES):
    check_request([what], engine="litert", **self.settings.as_kwargs())

  def check_prefixes(self, lines, prefixes, first_number=1):
    """Refuses in one line, naming it, the first line whose target prefix has a word that is
    not in the model's vocabulary (Translator.check_prefixes)."""
    self.check_forcing()
    sources = self.tokenizer.encode([tokenizing.valid_utf8(line) for line in lines])
    forced_tokens = self.tokenizer.encode([tokenizing.valid_utf8(p) for p in prefixes])
    for i, (source, tokens) in enumerate(zip(sources, forced_tokens)):
      if source and UNK_ID in tokens:
        raise DecodingError(f"line {i + first_number}: a target prefix ({prefixes[i]}) has a "
                            "word that is not in the model's vocabulary")

  def check_constraints(self, lines, constraints, first_number=1):
    self.check_forcing(composition.CONSTRAINTS)

  def decode_batch(self, lines, prefixes=None, constraints=None):
    """line_batches' hook: one batch of lines (constraints are refused before: check_request)."""
    return self.decode_text(lines, prefixes)

  def which(self):
    """The export and the checkpoint it holds, for the first line."""
    info = self.export.info
    held = info.get("checkpoint_chosen") or info.get("checkpoint")
    return f"the LiteRT export {self.export.directory}" + (f" ({held})" if held else "")


def _settings(export, given):
  """DecodeSettings' values: the export's beam_size, alpha and extra_length (a different one
  given refused: its model searches with them), n_best given or the export's."""
  values = {k: v for k, v in given.items() if v is not None}
  for name in ("beam_size", "alpha", "extra_length"):
    if name in values and values[name] != export.info[name]:
      raise LiteRTError(
          f"{name}={values[name]}: the LiteRT export {export.directory} searches with "
          f"{name}={export.info[name]}; export it again with --{name}={values[name]} (or use "
          "--engine=tensorflow)")
    values[name] = export.info[name]
  values.setdefault("n_best", export.info["n_best"])
  if values["n_best"] > export.n_best:  # Its model outputs the export's n_best a sentence.
    raise LiteRTError(f"n_best={values['n_best']}: the LiteRT export {export.directory} gives "
                      f"{export.n_best} output(s) a sentence; export it again with --n_best="
                      f"{values['n_best']} (and a --beam_size at least that)")
  return values


def export_for(model_dir, weights, **settings):
  """The LiteRT export of `model_dir`: the directory itself when it is an export, else a
  training run's cached export (litert_export.cached: made, or made again when stale, with
  TensorFlow); where TensorFlow is not installed, the cached export as it is, or a one-line
  refusal when there is none."""
  if exports.is_export(model_dir):
    return model_dir
  if _tensorflow_missing():
    from t2t_lite.rundir import run_files
    cached = run_files.litert_cache_dir(model_dir, weights)
    if exports.is_export(cached):
      return cached
    raise LiteRTError(f"{model_dir} has no LiteRT export and TensorFlow is not installed to make "
                      "one: run t2t-lite-export --format=litert where it is")
  from t2t_lite.decode import litert_export  # TensorFlow: only for a run's export
  return litert_export.cached(model_dir, weights, **settings)


def _tensorflow_missing():
  import importlib.util
  try:
    return importlib.util.find_spec("tensorflow") is None
  except (ImportError, ValueError):
    return True


def translate(export_dir, sentences, *, batch_size=32, prefixes=None, constraints=None,
              num_threads=None, precision="auto", checkpoint_path=None, max_input_length=None,
              **settings):
  """Translates `sentences` with a LiteRT export (or a training run's export, made on first use
  and kept beside it: export_for) -> (texts, scores) in order, as t2t_lite.translate(). No
  TensorFlow for an export directory. `settings`: DecodeSettings' fields (the export's beam_size,
  alpha and extra_length; n_best up to its own)."""
  if isinstance(sentences, str):
    raise DecodingError("translate() takes a list of sentences, got one string")
  check_request(forced(prefixes is not None, constraints is not None), engine="litert",
                max_input_length=max_input_length, **settings)
  from t2t_lite.decode import plan as decoding_plan
  weights = decoding_plan.litert_quantization(precision)
  if exports.is_export(export_dir) and checkpoint_path is not None:
    raise LiteRTError(f"checkpoint_path with the LiteRT export {export_dir}: it holds the "
                      "weights it was exported with")
  directory = export_for(export_dir, weights, checkpoint_path=checkpoint_path,
                         max_input_length=max_input_length, **settings)
  translator = LiteRTTranslator(directory, num_threads, max_input_length=max_input_length,
                                precision=precision if directory == export_dir else "auto",
                                **settings)
  return translator.translate(list(sentences), batch_size=batch_size, prefixes=prefixes)
