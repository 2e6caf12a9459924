"""A trained model as a LiteRT (TensorFlow Lite) model: `t2t-lite-export --format=litert`.

  path = litert_export.export_model_dir("runs/ende", "exports/ende-litert", quantization="int8")
  # -> "exports/ende-litert": model.tflite, the tokenizer's file and t2t_lite_litert.json

The .tflite holds one function: the beam search t2t-lite-decode runs (Translator.search_ids,
float32, without XLA, one search a batch), the encoder and the decoder with its growing
key/value cache in one WHILE op, so the cache never leaves the interpreter. Builtin ops only
(ai_edge_litert loads no SELECT_TF_OPS model). B sentences, S source length, P prefix length,
N = n_best outputs, L the longest output the search reached:
  inputs       int32 [B, S]  source ids, 0-padded, each row ending in EOS (S <= max_input_length)
  max_lengths  int32 [B]     each row's longest output, EOS included (MAX_LENGTHS_RULE)
  prefix       int32 [B, P]  target prefixes' ids, 0-padded, without EOS; P = 0: none
  -> ids       int32 [B, N, L]  best first, EOS included, 0-padded
     scores    float32 [B, N]   log P(Y) / ((5 + |Y|) / 6)^alpha, as the search ranks them
Every size may change between calls (the interpreter's resize_tensor_input). Weights in
float32, float16 (`float16_weights`) or int8 dynamic range (the converter's Optimize.DEFAULT).
What Translator does around this search (tokenizing, truncating, blank lines, cutting at EOS)
is the runtime's (t2t_lite/litert/).

t2t_lite_litert.json (SETTINGS_FILE) says what a runtime needs: the tensors' names, the ids,
the decoding settings, the tokenizer's file and where the weights came from (`_record`).
"""
import dataclasses
import json
import logging
import os
import shutil
import time
import warnings

from t2t_lite import registry
from t2t_lite.data import data_files, tokenizers
from t2t_lite.decode import loading
from t2t_lite.decode import plan as decoding_plan
from t2t_lite.decode import translation
from t2t_lite.decode import export_checks
from t2t_lite.decode.export_checks import check_litert_export, check_litert_request
from t2t_lite.errors import RunFailure, reason
from t2t_lite.modeling.span_parser import SpanParser
from t2t_lite.rundir import checkpoints, run_files

FORMAT, FORMAT_VERSION = export_checks.LITERT_FORMAT, export_checks.LITERT_FORMAT_VERSION
MODEL_FILE, SETTINGS_FILE = export_checks.LITERT_MODEL_FILE, export_checks.LITERT_SETTINGS_FILE
SENTENCEPIECE_FILE = "sentencepiece.model"
WORDS_FILE = "words.txt"  # A word tokenizer's vocabulary: line i is id i's word.
MAX_LENGTHS_RULE = ("source tokens after max_input_length, without EOS (with a prefix: the "
                    "longer of them and the prefix's tokens) + 1 + extra_length; 1 for a blank "
                    "line")
# What a cache must have been exported with to serve a request (`cached`).
_CACHE_KEYS = ("beam_size", "alpha", "extra_length", "n_best", "max_input_length", "checkpoint",
               "quantization")
logger = logging.getLogger(__name__)


def search_function(translator):
  """The tf.function to convert: translator's beam search, for any B, S and P."""
  import tensorflow as tf

  def translate(inputs, max_lengths, prefix):
    ids, scores = translator.search_ids(inputs, max_lengths, prefix)  # [B, N, L], [B, N]
    return {"ids": ids, "scores": scores}
  return tf.function(translate, autograph=False, input_signature=[
      tf.TensorSpec([None, None], tf.int32, name="inputs"),
      tf.TensorSpec([None], tf.int32, name="max_lengths"),
      tf.TensorSpec([None, None], tf.int32, name="prefix")])


def convert(function, weights="float32"):
  """A search_function -> the .tflite's bytes, weights in `quantization`.

  From the concrete function alone: the converter then freezes the weights into constants.
  Given the model as well (or from a SavedModel), it keeps them as resource variables that
  nothing in the interpreter initialises, and the model fails at its first READ_VARIABLE."""
  import tensorflow as tf
  converter = tf.lite.TFLiteConverter.from_concrete_functions([function.get_concrete_function()])
  converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
  if weights == "int8":  # Dynamic range: int8 weights, float32 activations.
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
  model_content = converter.convert()
  return float16_weights(model_content) if weights == "float16" else model_content


def float16_weights(model_content, min_elements=1024):
  """A float32 .tflite -> the same with its weights (float32 constants of at least
  `min_elements`) stored as float16, each read through a DEQUANTIZE op (as the converter's own
  float16 quantization does).

  Not the converter's: it makes every float constant float16, the search's small ones too,
  where -1e9 (attention.NEG_INF) becomes -65504 and alpha 0.6 0.6001, and padded batches then
  fail in the interpreter. Here the scalars and the small vectors stay float32."""
  import numpy as np
  from tensorflow.lite.python import schema_py_generated as schema
  from tensorflow.lite.tools import flatbuffer_utils
  model = flatbuffer_utils.read_model_from_bytearray(model_content)
  dequantize = _operator_code(model, schema.BuiltinOperator.DEQUANTIZE, version=3)
  model.buffers.append(schema.BufferT())  # What a dequantized weight's own tensor points to.
  empty = len(model.buffers) - 1
  halves = {}  # float32 buffer -> its float16 copy: subgraphs share the weights' buffers
  for graph in model.subgraphs:
    reads = []
    for index, tensor in enumerate(list(graph.tensors)):
      data = model.buffers[tensor.buffer].data
      if tensor.type != schema.TensorType.FLOAT32 or data is None or len(data) < 4 * min_elements:
        continue
      if tensor.buffer not in halves:
        half = schema.BufferT()
        half.data = np.frombuffer(bytes(bytearray(data)), np.float32).astype(np.float16).view(
            np.uint8)
        model.buffers.append(half)
        halves[tensor.buffer] = len(model.buffers) - 1
      weight = schema.TensorT()
      weight.shape, weight.type, weight.buffer = tensor.shape, schema.TensorType.FLOAT16, (
          halves[tensor.buffer])
      weight.name = (tensor.name or b"") + b"/float16"
      graph.tensors.append(weight)
      tensor.buffer = empty  # Now the DEQUANTIZE's output, before the subgraph's first op.
      read = schema.OperatorT()
      read.opcodeIndex, read.inputs, read.outputs = dequantize, [len(graph.tensors) - 1], [index]
      reads.append(read)
    graph.operators = reads + list(graph.operators)
  for index in halves:
    model.buffers[index].data = None  # The float32 weights, read by nothing now.
  return bytes(flatbuffer_utils.convert_object_to_bytearray(model))


def _operator_code(model, builtin, version):
  """The index of `builtin`'s operator code in model (added if missing)."""
  from tensorflow.lite.python import schema_py_generated as schema
  for index, code in enumerate(model.operatorCodes):
    if code.builtinCode == builtin:
      code.version = max(code.version, version)
      return index
  code = schema.OperatorCodeT()
  code.builtinCode, code.deprecatedBuiltinCode, code.version = builtin, builtin, version
  model.operatorCodes.append(code)
  return len(model.operatorCodes) - 1


def tensor_names(model_content):
  """{"inputs": {"inputs", "max_lengths", "prefix"}, "outputs": {"ids", "scores"}}: each
  tensor's name as an interpreter's get_input_details() / get_output_details() give it (this
  converter path writes no signatures). Inputs go by the names search_function gives them,
  outputs by their type (ids int32, scores float32)."""
  import numpy as np
  import tensorflow as tf
  with warnings.catch_warnings():  # tf.lite.Interpreter's deprecation: only its names are read
    warnings.simplefilter("ignore")
    details = tf.lite.Interpreter(model_content=model_content)
  inputs = {}
  for detail in details.get_input_details():
    key = next((k for k in ("max_lengths", "prefix", "inputs") if k in detail["name"]), None)
    inputs[key] = detail["name"]
  outputs = {"ids" if detail["dtype"] == np.int32 else "scores": detail["name"]
             for detail in details.get_output_details()}
  if sorted(inputs) != ["inputs", "max_lengths", "prefix"] or sorted(outputs) != ["ids",
                                                                                  "scores"]:
    raise RunFailure(f"the converted model's tensors are not the search's: {inputs}, {outputs}")
  return {"inputs": inputs, "outputs": outputs}


def export_model_dir(model_dir, export_dir, *, weights="float32", checkpoint_path=None,
                     max_input_length=None, precision="none", with_alignments=False,
                     forcing=(), **settings):
  """Writes the model trained in model_dir, from the checkpoint `checkpoint_path` names (as
  t2t-lite-decode: loading.py), as a LiteRT model directory export_dir (new or empty; see the
  module doc). `settings`: DecodeSettings' fields, resolved as t2t-lite-decode resolves them;
  max_input_length: default hparams max_length. Everything is checked before anything is
  written (export_checks.check_litert_export, again once the model is loaded), and a failed
  write leaves nothing behind. Returns export_dir."""
  check_litert_export(model_dir, export_dir, quantization=weights, precision=precision,
                      with_alignments=with_alignments, max_input_length=max_input_length,
                      forcing=forcing, **settings)
  if isinstance(model_dir, (list, tuple)):  # One run (an ensemble was refused above).
    model_dir = model_dir[0]
  translator = translation.Translator.from_model_dir(
      model_dir, checkpoint_path, precision="none", planner=decoding_plan.elsewhere,
      max_input_length=max_input_length, searches=1, **settings)
  loaded = translator.loaded
  # Again with what only the loaded run knows (its problem's output constraint, a span parser).
  translation.check_request(
      [translation.TARGET_PREFIXES], engine="litert",
      output_constraint=translator.constraint is not None or translator.output_fn is not None,
      span_parser=isinstance(translator.model, SpanParser), **translator.settings.as_kwargs())
  logger.info("exporting %s to LiteRT (%s weights)", loaded.which(), weights)
  start = time.perf_counter()
  model_content = convert(search_function(translator), weights)
  logger.info("converted in %.1f s: %.1f MB", time.perf_counter() - start,
              len(model_content) / 1e6)
  record = _record(translator, weights, tensor_names(model_content), model_dir)
  return _write(export_dir, model_content, record, loaded.tokenizer)


def _record(translator, weights, names, model_dir):
  """t2t_lite_litert.json's contents (the contract t2t_lite's LiteRT runtime reads)."""
  import tensorflow as tf
  loaded, settings = translator.loaded, translator.settings
  is_words = isinstance(loaded.tokenizer, tokenizers.WordTokenizer)
  return dict(
      format=FORMAT, version=FORMAT_VERSION, **names,
      vocab_size=int(translator.model.vocab_size), pad_id=tokenizers.PAD_ID,
      eos_id=tokenizers.EOS_ID, unk_id=tokenizers.UNK_ID, beam_size=settings.beam_size,
      alpha=settings.alpha, extra_length=settings.extra_length, n_best=settings.n_best,
      max_input_length=translator.max_input_length, max_lengths_rule=MAX_LENGTHS_RULE,
      tokenizer={"kind": "words" if is_words else "sentencepiece",
                 "file": WORDS_FILE if is_words else SENTENCEPIECE_FILE},
      quantization=weights, problem=loaded.problem.name, model_dir=model_dir,
      checkpoint=loaded.checkpoint, checkpoint_chosen=loaded.which(),
      plan=dataclasses.replace(loaded.plan, engine="litert").record(),
      tensorflow=tf.__version__)


def _write(export_dir, model_content, record, tokenizer):
  """The directory written to a temporary sibling, then renamed to export_dir (an empty one
  replaced; `cached` replaces a stale cache's)."""
  parent = os.path.dirname(os.path.abspath(export_dir))
  temp = os.path.join(parent, f".{os.path.basename(os.path.abspath(export_dir))}.tmp-{os.getpid()}")
  try:
    os.makedirs(parent, exist_ok=True)
    shutil.rmtree(temp, ignore_errors=True)
    os.makedirs(temp)
    with open(os.path.join(temp, MODEL_FILE), "wb") as f:
      f.write(model_content)
    tokenizer_file = os.path.join(temp, record["tokenizer"]["file"])
    if record["tokenizer"]["kind"] == "words":
      with open(tokenizer_file, "w", encoding="utf-8") as f:
        f.write("".join(word + "\n" for word in tokenizer.pieces()))
    else:  # The file the run's tokenizer was loaded from (run_files copies it from data_dir).
      shutil.copyfile(data_files.vocab_path(record["model_dir"]), tokenizer_file)
    with open(os.path.join(temp, SETTINGS_FILE), "w") as f:
      f.write(json.dumps(record, indent=2, sort_keys=True) + "\n")
    if os.path.isdir(export_dir):
      shutil.rmtree(export_dir)  # Empty, or a stale cache (`cached`).
    os.rename(temp, export_dir)
  except OSError as e:  # A full disk, a quota: nothing half-written stays.
    shutil.rmtree(temp, ignore_errors=True)
    raise RunFailure(f"writing the LiteRT model to {export_dir} failed: {reason(e)} (the model "
                     f"alone takes {len(model_content) / 1e6:.1f} MB); nothing was left in "
                     f"{parent}") from None
  return export_dir


def read_record(directory):
  """A LiteRT export's t2t_lite_litert.json, or None where there is none that reads."""
  try:
    with open(os.path.join(directory, SETTINGS_FILE)) as f:
      return json.load(f)
  except (OSError, ValueError):
    return None


def cached(model_dir, weights="float32", *, checkpoint_path=None, max_input_length=None,
           **settings):
  """The LiteRT export of model_dir kept beside the run (run_files.litert_cache_dir), for
  `t2t-lite-decode --engine=litert`: exported on first use, and again when the one there was
  made with other settings or from another checkpoint than this request's. -> its path."""
  check_litert_request(model_dir, quantization=weights, max_input_length=max_input_length,
                       **settings)
  directory = run_files.litert_cache_dir(model_dir, weights)
  kept = read_record(directory)
  request = _request(model_dir, weights, checkpoint_path, max_input_length, settings)
  # An export of more outputs a sentence serves fewer (the runtime keeps the first n_best).
  if kept is not None and all(kept.get(key) == value for key, value in request.items()
                              if key != "n_best") and kept.get("n_best", 0) >= request["n_best"]:
    return directory
  logger.info("exporting %s to LiteRT, kept in %s", model_dir, directory)
  temp = directory + f".new-{os.getpid()}"  # export_model_dir writes a new directory only
  try:
    export_model_dir(model_dir, temp, weights=weights,
                     checkpoint_path=checkpoint_path, max_input_length=max_input_length,
                     **settings)
    if os.path.isdir(directory):
      shutil.rmtree(directory)
    os.rename(temp, directory)
  finally:
    shutil.rmtree(temp, ignore_errors=True)
  return directory


def _request(model_dir, weights, checkpoint_path, max_input_length, settings):
  """{key of _CACHE_KEYS: the value a cache made for this request records}, without loading the
  model: the settings resolved as Translator.from_model_dir resolves them, and the checkpoint
  loading.py would choose (its newest listed one: where that one does not read, loading takes
  an older one, and the cache is exported again each time)."""
  saved = run_files.read_run(model_dir)
  hparams = saved.require_hparams()
  problem = registry.get_problem(saved.require_problem(), **saved.data_settings)
  fields = {field.name for field in dataclasses.fields(translation.DecodeSettings)}
  resolved = translation.DecodeSettings.resolve(
      problem, hparams, **{k: v for k, v in settings.items() if k in fields})
  best = loading.best_model(model_dir) if checkpoint_path in (None, loading.BEST) else None
  if best:
    checkpoint = best[0]
  elif checkpoint_path in (None, loading.NEWEST):
    checkpoint = (checkpoints.list_checkpoints(model_dir) or [None])[-1]
  else:
    checkpoint = checkpoints.find_checkpoint(model_dir, checkpoint_path)
  request = dict(resolved.as_kwargs(), checkpoint=checkpoint, quantization=weights,
                 max_input_length=max_input_length or hparams.max_length)
  return {key: request[key] for key in _CACHE_KEYS}
