"""Exporting a trained model as a SavedModel that TF Serving answers with translations of raw text.

  path = export.export_model_dir("runs/ende", "exports/ende", beam_size=4, alpha=0.6)
  # -> "exports/ende/3": TF Serving's versioned layout, one new integer version per export.
  # Or, from a `translation.Translator` already in memory:
  path = export.save(export.TranslationModule(translator), "exports/ende")

Signatures of the SavedModel (tag "serve"):
  serving_default  inputs: string [B] UTF-8 sentences
                   -> outputs: string [B] the best translation of each, scores: float32 [B],
                      truncated: bool [B]
  translate_ids    inputs: int32 [B, S] source ids, 0-padded (an EOS, if any, ends a row)
                   -> outputs: int32 [B, L] the best output's ids, 0-padded, without EOS,
                      scores: float32 [B], truncated: bool [B]
Scores are the beam search's length-penalised log-probabilities, log P(Y) / lp(|Y|);
`truncated` says which inputs were cut to max_input_length (nothing is cut silently).

Everything runs in the graph: invalid UTF-8 is replaced by U+FFFD (so every element gets an
output), the text is tokenized with the problem's tokenizer (TF Text's SentencePiece ops or core
lookup tables), truncated to `max_input_length` tokens (EOS included), translated by beam search
and detokenized. Empty inputs (nothing left after tokenizing) get an empty output and score 0.
The graph holds only ops of core TensorFlow and TF Text, which the stock `tensorflow_model_server`
links in; it is not XLA-compiled (see `TranslationModule`).

Shapes: B sentences, S source length, K beam size, L longest output.
"""
import json
import os
import re

import keras
import numpy as np
import tensorflow as tf

from t2t_lite import files
from t2t_lite.data.tokenizers import EOS_ID, PAD_ID
from t2t_lite.decode import search, translation
from t2t_lite.errors import RunFailure, T2TLiteError
from t2t_lite.modeling import mixed_precision

SETTINGS_FILE = "t2t_lite_export.json"  # Written to <version>/assets.extra/ for the record.
_VERSION = re.compile(r"^\d+$")
# Whitespace as Python's str.isspace() sees it (RE2's \s is ASCII only; \p{Z}: separators).
_BLANK = r"[\s\x0b\x1c-\x1f\x85\p{Z}]*"


class ExportError(T2TLiteError, ValueError):
  """A bad export setting or export_dir (one-line message)."""


class TranslationModule(tf.Module):
  """A `translation.Translator`'s model, tokenizer and settings, with the two serving functions.

  The graph answers as the Translator (t2t-lite-decode) does: same beam size, alpha, extra
  length, max_input_length and handling of empty and overlong inputs.

  Not XLA-compiled by default: TF Serving runs XLA:CPU only with its experimental
  --xla_cpu_compilation_enabled flag, string ops cannot be compiled, and a compiled beam search
  is compiled again for every new (batch, length) shape a client sends (the measurements are in
  README, "Serving with TensorFlow Serving"). `jit_compile=True` compiles the beam search
  alone, for that comparison.
  """

  def __init__(self, translator, *, jit_compile=False, name="translation"):
    super().__init__(name=name)
    if translator.max_input_length < 2:
      raise ExportError(f"max_input_length must be >= 2 (a token and EOS), got "
                        f"{translator.max_input_length}")
    self.model = translator.model
    self.tokenizer = translator.tokenizer
    self.vocab_size = int(translator.model.vocab_size)
    self.beam_size = int(translator.settings.beam_size)
    self.alpha = float(translator.settings.alpha)
    self.extra_length = int(translator.settings.extra_length)
    self.max_input_length = int(translator.max_input_length)
    self.jit_compile = bool(jit_compile)
    self._search = tf.function(self._beam_search, jit_compile=True) if jit_compile else (
        self._beam_search)

  def settings(self):
    return {"beam_size": self.beam_size, "alpha": self.alpha, "extra_length": self.extra_length,
            "max_input_length": self.max_input_length, "vocab_size": self.vocab_size,
            "jit_compile": self.jit_compile, "precision": mixed_precision.of_model(self.model)}

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
  def translate_text(self, inputs):
    """string [B] -> {"outputs": string [B], "scores": float32 [B], "truncated": bool [B]}."""
    inputs = _check_batch_of_strings(inputs)
    text = tf.strings.unicode_transcode(inputs, input_encoding="UTF-8", output_encoding="UTF-8",
                                        errors="replace", replacement_char=0xFFFD)
    blank = tf.strings.regex_full_match(text, _BLANK)  # [B], as Python's not line.strip()
    result = self._translate(self.tokenizer.tokenize(text), blank)
    result["outputs"] = tf.strings.unicode_transcode(  # Byte pieces may not form valid UTF-8.
        self.tokenizer.detokenize(result["outputs"]), input_encoding="UTF-8",
        output_encoding="UTF-8", errors="replace", replacement_char=0xFFFD)
    return result

  @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name="inputs")])
  def translate_ids(self, inputs):
    """int32 [B, S] 0-padded -> {"outputs": int32 [B, L] 0-padded, "scores", "truncated"}."""
    inputs = tf.ensure_shape(inputs, [None, None], name="inputs_must_be_a_matrix_of_ids")
    checks = [
        tf.debugging.assert_non_negative(inputs, message="input ids must be >= 0"),
        tf.debugging.assert_less(inputs, self.vocab_size,
                                 message=f"input ids must be < vocab_size={self.vocab_size}")]
    with tf.control_dependencies(checks):
      tokens = tf.ragged.boolean_mask(inputs, tf.not_equal(search.trim_at_eos(inputs), PAD_ID))
    return self._translate(tokens, tf.zeros([tf.shape(inputs)[0]], tf.bool))

  def _beam_search(self, inputs, max_lengths):
    return search.best(self.model, inputs, beam_size=self.beam_size, alpha=self.alpha,
                       extra_length=self.extra_length, max_lengths=max_lengths)

  def _translate(self, tokens, blank):
    """ragged int32 [B, (T)] source tokens without EOS, bool [B] inputs to leave untranslated
    -> {"outputs": ids int32 [B, L] without EOS, "scores": float32 [B], "truncated": bool [B]};
    no ids and score 0 for blank or empty inputs."""
    truncated = tokens.row_lengths() > self.max_input_length - 1  # [B]
    tokens = tokens[:, :self.max_input_length - 1]
    empty = tf.logical_or(blank, tf.equal(tokens.row_lengths(), 0))  # [B]
    eos = tf.RaggedTensor.from_tensor(tf.fill([tokens.nrows(), 1], EOS_ID))
    inputs = tf.concat([tokens, eos], axis=1).to_tensor(PAD_ID)  # [B, S]
    # Empty inputs decode one step only (their output is replaced by "" below).
    max_lengths = tf.where(empty, 1, tf.cast(tokens.row_lengths(), tf.int32) + 1 +
                           self.extra_length)
    if self.jit_compile:  # Pad S to a multiple of 32: fewer shapes, fewer XLA compilations.
      length = tf.shape(inputs)[1]
      inputs = tf.pad(inputs, [[0, 0], [0, (-length) % 32]])
    best, scores = self._search(inputs, max_lengths)  # [B, L] without EOS, [B]
    best = tf.where(empty[:, None], PAD_ID, best)
    length = tf.reduce_max(tf.reduce_sum(tf.cast(tf.not_equal(best, PAD_ID), tf.int32), axis=1))
    return {"outputs": best[:, :length], "scores": tf.where(empty, 0.0, scores),
            "truncated": tf.logical_and(truncated, tf.logical_not(blank))}


def _check_batch_of_strings(inputs):
  """inputs, after a run-time check that they are a vector [B]. The signature says [None], but
  a server (TF Serving's C++ session, the TF2 signature wrapper) does not check the shape of a
  request: a [B, 1] batch would otherwise fail deep in the beam search with "Incompatible
  shapes". EnsureShape runs when the request does, and names both shapes (an Assert on the
  rank would not: grappler folds the rank of a [None] input into the constant 1)."""
  return tf.ensure_shape(inputs, [None], name="inputs_must_be_a_vector_of_sentences")


def next_version(export_dir):
  """1 + the largest integer-named subdirectory of export_dir (1 for a new or empty one)."""
  if not tf.io.gfile.isdir(export_dir):
    return 1
  versions = [int(name.rstrip("/")) for name in tf.io.gfile.listdir(export_dir)
              if _VERSION.match(name.rstrip("/"))]
  return max(versions, default=0) + 1


def save(module, export_dir, extra_info=None):
  """Writes `module` as `<export_dir>/<next version>/`; returns that path.

  Written through `keras.export.ExportArchive`, which lists the Keras variables on the saved
  root object: TF Serving's loader (the TF1 session path: import the MetaGraph, run the saver's
  restore op, then the signatures by tensor name) only restores variables reached that way. A
  plain `tf.saved_model.save` of a module holding Keras 3 layers writes a graph whose restore op
  misses them ("Could not find variable ..."), although `tf.saved_model.load` hides it.

  The SavedModel is written to a temporary sibling first and renamed, so that TF Serving, which
  polls export_dir, never loads a half-written version.
  """
  existed = tf.io.gfile.isdir(export_dir)
  files.make_dirs(export_dir, "export_dir", ExportError)
  version = next_version(export_dir)
  path = os.path.join(export_dir, str(version))
  temp_path = os.path.join(export_dir, f".tmp-{version}")
  if export_dir.startswith("ram://"):
    # Renaming a ram:// directory drops its files (TF 2.21); nothing polls ram:// anyway.
    temp_path = path
  if tf.io.gfile.exists(temp_path):
    tf.io.gfile.rmtree(temp_path)
  try:
    _write(module, temp_path, dict(module.settings(), version=version, **(extra_info or {})))
    if temp_path != path:
      tf.io.gfile.rename(temp_path, path)
  except (tf.errors.OpError, OSError) as e:  # A full disk, a quota: nothing half-written stays.
    _remove(temp_path)
    if not existed:
      _remove(export_dir)
    size = sum(int(np.prod(v.shape)) * tf.as_dtype(v.dtype).size for v in module.model.weights)
    reason = (str(getattr(e, "message", e)).strip().splitlines() or [""])[0]
    raise RunFailure(f"writing the export to {path} failed: {reason} (its weights alone take "
                     f"{size / 1e6:.1f} MB); nothing was left in {export_dir}") from None
  return path


def _write(module, directory, settings):
  """The SavedModel of `module`'s signatures and its settings file, into `directory`."""
  archive = keras.export.ExportArchive()
  archive.track(module.model)
  archive.track(module.tokenizer)  # Its SentencePiece model or lookup table.
  for name, function in (("serving_default", module.translate_text),
                         ("translate_ids", module.translate_ids)):
    function.get_concrete_function()  # Traced once from its input_signature.
    archive.add_endpoint(name, function)
  archive.write_out(directory, verbose=False)
  tf.io.gfile.makedirs(os.path.join(directory, "assets.extra"))
  with tf.io.gfile.GFile(os.path.join(directory, "assets.extra", SETTINGS_FILE), "w") as f:
    f.write(json.dumps(settings, indent=2, sort_keys=True))


def _remove(directory):
  try:
    if tf.io.gfile.exists(directory):
      tf.io.gfile.rmtree(directory)
  except tf.errors.OpError:
    pass  # The error that brought us here is the one to report.


def export_model_dir(model_dir, export_dir, *, checkpoint_path=None, beam_size=None, alpha=None,
                     extra_length=None, max_input_length=None, jit_compile=False,
                     precision="none"):
  """Exports the model trained in model_dir (its latest checkpoint, or `checkpoint_path`).

  Settings left None default as in t2t-lite-decode: hparams.json's, else the problem's;
  max_input_length: hparams.max_length. precision: the graph's compute precision (precision.py;
  the weights stay float32), written to the settings file. Returns `<export_dir>/<version>`.
  """
  # Before the model is loaded: an export_dir that is a file fails at once (created by `save`
  # only once there is a model to write, so a failed export leaves nothing behind).
  if tf.io.gfile.exists(export_dir) and not tf.io.gfile.isdir(export_dir):
    raise ExportError(f"export_dir {export_dir} is a file, not a directory")
  translator = translation.Translator.from_model_dir(
      model_dir, checkpoint_path, beam_size=beam_size, alpha=alpha, extra_length=extra_length,
      max_input_length=max_input_length, precision=precision)
  module = TranslationModule(translator, jit_compile=jit_compile)
  return save(module, export_dir, extra_info={
      "model_dir": model_dir, "checkpoint": translator.loaded.checkpoint,
      "problem": translator.loaded.problem.name})
