"""Exporting a trained model as a SavedModel that TF Serving answers with translations of raw text.

  path = export.export_model_dir("runs/ende", "exports/ende", beam_size=4, alpha=0.6)
  # -> "exports/ende/3": TF Serving's versioned layout, one new integer version per export.
  # Or, from a `translation.Translator` already in memory:
  path = export.save(export.TranslationModule(translator), "exports/ende")

Signatures of the SavedModel (tag "serve"), each a function of the Translator that
t2t-lite-decode runs (t2t_lite/decode/translation.py), so that they answer what decode prints:
  serving_default  inputs: string [B] UTF-8 sentences
                   -> outputs: string [B] the best output for each (a parser's tree), scores:
                      float32 [B], truncated: bool [B] (and alignments: string [B], Pharaoh
                      word pairs, when exported --with_alignments)
  translate_n_best (exported with --n_best N > 1) inputs: string [B]
                   -> outputs: string [B, N], scores: float32 [B, N], truncated: bool [B]:
                      the N best, best first. A signature of its own, so that serving_default's
                      answer keeps its shape for every client; both share one beam search.
  translate_with_prefix  (exported --target_prefix) inputs: string [B], prefixes: string [B]
                   target prefixes (a translator's first words; "" for none) -> as
                   serving_default, each output starting with its prefix, scored as part of it
  translate_with_constraints  (exported --constraints) inputs: string [B], constraints:
                   string [B, P] target phrases each output must contain ("" pads a row) ->
                   as serving_default; a phrase that cannot be met fails the request
  translate_with_prefix_and_constraints  (exported with both) inputs, prefixes, constraints
                   -> as serving_default, each output starting with its prefix and containing
                   its phrases (the search's processors compose them: composition.py)
  translate_ids    inputs: int32 [B, S] source ids, 0-padded (an EOS, if any, ends a row)
                   -> outputs: int32 [B, L] the best output's ids, 0-padded, without EOS,
                      scores: float32 [B], truncated: bool [B]
Scores are the beam search's length-penalised log-probabilities, log P(Y) / lp(|Y|);
`truncated` says which inputs were cut to max_input_length (nothing is cut silently). An
n-best slot the search could not fill (a sentence with fewer possible outputs) has score
-1e7 and an empty output.

The graph holds only ops of core TensorFlow and TF Text, which the stock `tensorflow_model_server`
links in; it is not XLA-compiled (see `TranslationModule`).
"""
import json
import logging
import os

import keras
import numpy as np
import tensorflow as tf

from t2t_lite import files
from t2t_lite.decode import plan as decoding_plan
from t2t_lite.decode import translation
from t2t_lite.decode.export_checks import (VERSION, ExportError, check_export_base,
                                           check_saved_model_export)
from t2t_lite.errors import RunFailure, reason
from t2t_lite.modeling import mixed_precision

SETTINGS_FILE = "t2t_lite_export.json"  # Written to <version>/assets.extra/ for the record.
logger = logging.getLogger(__name__)


class TranslationModule(tf.Module):
  """The serving signatures of a `translation.Translator`: its functions, sliced to each
  signature's outputs, and nothing of their own.

  Not XLA-compiled by default: TF Serving runs XLA:CPU only with its experimental
  --xla_cpu_compilation_enabled flag, string ops cannot be compiled, and a compiled beam search
  is compiled again for every new (batch, length) shape a client sends (docs/serving.md).
  `jit_compile=True` compiles the search alone, for that comparison. `with_prefix`,
  `with_constraints`: also the translate_with_prefix and translate_with_constraints signatures
  (each a search of its own in the graph, so only when asked for).
  """

  def __init__(self, translator, *, jit_compile=False, with_prefix=False,
               with_constraints=False, name="translation"):
    super().__init__(name=name)
    if jit_compile != translator.jit_compile:
      translator = translator.with_options(jit_compile=jit_compile)
    if with_prefix:
      translator.check_forcing()
    if with_constraints:
      translator.check_forcing("lexical constraints")
    self.translator, self.with_prefix = translator, with_prefix
    self.with_constraints = with_constraints
    self.model, self.tokenizer = translator.model, translator.tokenizer
    self.jit_compile = bool(jit_compile)

  def settings(self):
    """What the settings file records: every decoding setting (DecodeSettings' fields) and how
    the graph was built."""
    translator = self.translator
    return dict(translator.settings.as_kwargs(), max_input_length=translator.max_input_length,
                vocab_size=int(self.model.vocab_size), jit_compile=self.jit_compile,
                with_alignments=translator.with_alignments, with_prefix=self.with_prefix,
                with_constraints=self.with_constraints,
                precision=mixed_precision.of_model(self.model))

  @tf.function(autograph=False, input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
  def translate_text(self, inputs):
    """string [B] -> {"outputs": string [B], "scores": float32 [B], "truncated": bool [B]}."""
    return _best(self.translator.decode_text(inputs))

  @tf.function(autograph=False, input_signature=[tf.TensorSpec([None], tf.string, name="inputs")])
  def translate_n_best(self, inputs):
    """string [B] -> {"outputs": string [B, N], "scores": float32 [B, N], "truncated"}."""
    return self.translator.decode_text(inputs)

  @tf.function(autograph=False, input_signature=[
      tf.TensorSpec([None], tf.string, name="inputs"),
      tf.TensorSpec([None], tf.string, name="prefixes")])
  def translate_with_prefix(self, inputs, prefixes):
    """string [B], string [B] -> as translate_text, outputs starting with their prefixes."""
    return _best(self.translator.decode_with_prefix(inputs, prefixes))

  @tf.function(autograph=False, input_signature=[
      tf.TensorSpec([None], tf.string, name="inputs"),
      tf.TensorSpec([None, None], tf.string, name="constraints")])
  def translate_with_constraints(self, inputs, constraints):
    """string [B], string [B, P] -> as translate_text, outputs containing their phrases."""
    return _best(self.translator.decode_with_constraints(inputs, constraints))

  @tf.function(autograph=False, input_signature=[
      tf.TensorSpec([None], tf.string, name="inputs"),
      tf.TensorSpec([None], tf.string, name="prefixes"),
      tf.TensorSpec([None, None], tf.string, name="constraints")])
  def translate_with_prefix_and_constraints(self, inputs, prefixes, constraints):
    """string [B], string [B], string [B, P] -> as translate_text, outputs starting with their
    prefixes and containing their phrases."""
    return _best(self.translator.decode_with_prefix_and_constraints(inputs, prefixes,
                                                                    constraints))

  @tf.function(autograph=False,
               input_signature=[tf.TensorSpec([None, None], tf.int32, name="inputs")])
  def translate_ids(self, inputs):
    """int32 [B, S] 0-padded -> {"outputs": int32 [B, L] 0-padded, "scores", "truncated"}."""
    return _best(self.translator.decode_ids(inputs))

  def signatures(self):
    """{name: function} of the SavedModel."""
    functions = {"serving_default": self.translate_text, "translate_ids": self.translate_ids}
    if self.translator.settings.n_best > 1:
      functions["translate_n_best"] = self.translate_n_best
    if self.with_prefix:
      functions["translate_with_prefix"] = self.translate_with_prefix
    if self.with_constraints:
      functions["translate_with_constraints"] = self.translate_with_constraints
    if self.with_prefix and self.with_constraints:
      functions["translate_with_prefix_and_constraints"] = (
          self.translate_with_prefix_and_constraints)
    return functions


def _best(result):
  """A decode function's result [B, N, ...] -> the best output's [B, ...] ("truncated" [B] as
  it is)."""
  return {key: value if key == "truncated" else value[:, 0] for key, value in result.items()}


def next_version(export_dir):
  """1 + the largest integer-named subdirectory of export_dir (1 for a new or empty one)."""
  if not tf.io.gfile.isdir(export_dir):
    return 1
  versions = [int(name.rstrip("/")) for name in tf.io.gfile.listdir(export_dir)
              if VERSION.match(name.rstrip("/"))]
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
  check_export_base(export_dir)
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
    raise RunFailure(f"writing the export to {path} failed: {reason(e)} (its weights alone take "
                     f"{size / 1e6:.1f} MB); nothing was left in {export_dir}") from None
  return path


def _write(module, directory, settings):
  """The SavedModel of `module`'s signatures and its settings file, into `directory`."""
  archive = keras.export.ExportArchive()
  for model in getattr(module.model, "models", [module.model]):  # an ensemble's members
    archive.track(model)
  archive.track(module.tokenizer)  # Its SentencePiece model or lookup table.
  if module.translator.vocabulary_shortlist is not None:
    archive.track(module.translator.vocabulary_shortlist)  # Its table's variables.
  for name, function in module.signatures().items():
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


def export_model_dir(model_dir, export_dir, *, checkpoint_path=None, max_input_length=None,
                     jit_compile=False, precision="auto", with_alignments=False,
                     with_prefix=False, with_constraints=False, **settings):
  """Exports the model trained in model_dir (or an ensemble: a list of model_dirs), from the
  checkpoint `checkpoint_path` names as in t2t-lite-decode (default: the run's best model when
  it kept one, else its newest checkpoint; loading.py), into an export_dir that is new, empty
  or holds only earlier versions.

  `settings`: DecodeSettings' fields; beam_size, alpha and extra_length left None default as in
  t2t-lite-decode: hparams.json's, else the problem's; max_input_length: hparams.max_length.
  precision: the graph's compute precision (mixed_precision.py; the weights stay float32);
  "auto" chooses the fastest on THIS machine: to serve on another CPU kind, give it. Not int8:
  its matmuls are XLA clusters, which TF Serving runs only when started with
  --xla_cpu_compilation_enabled (CTranslate2's int8 is the int8 export).
  with_prefix, with_constraints: also the translate_with_prefix signature (target prefixes),
  the translate_with_constraints signature (lexical constraints); both: these two and
  translate_with_prefix_and_constraints.
  The settings file records all of them, the checkpoint and why it was chosen, and the
  decoding plan (plan.py: decided without this machine but for "auto"). Returns
  `<export_dir>/<version>`.
  """
  # Before the model is loaded: a bad export_dir fails at once (created by `save` only once
  # there is a model to write, so a failed export leaves nothing behind).
  forcing = translation.forced(with_prefix, with_constraints)
  check_saved_model_export(model_dir, export_dir, precision, forcing, max_input_length,
                           jit_compile, **settings)
  translator = translation.Translator.from_model_dir(
      model_dir, checkpoint_path, max_input_length=max_input_length, precision=precision,
      jit_compile=jit_compile, with_alignments=with_alignments, planner=decoding_plan.elsewhere,
      forcing=forcing, **settings)
  loaded = translator.loaded
  logger.info("exporting %s; %s", loaded.which(), loaded.computing())
  module = TranslationModule(translator, jit_compile=jit_compile, with_prefix=with_prefix,
                             with_constraints=with_constraints)
  return save(module, export_dir, extra_info={
      "model_dir": model_dir, "checkpoint": loaded.checkpoint,
      "checkpoint_chosen": loaded.which(), "precision_chosen": loaded.plan.computing(),
      "plan": loaded.plan.record(), "problem": loaded.problem.name})

