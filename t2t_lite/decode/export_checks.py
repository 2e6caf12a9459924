"""What an export refuses before anything is loaded: a setting its format cannot carry, an
export_dir it may not write into, a model_dir that holds no run. For the SavedModel (export.py),
the CTranslate2 model directory (ctranslate2_export.py) and the LiteRT one (litert_export.py)
alike: each export runs its check first, and t2t-lite-export runs the same one before it loads
TensorFlow, which nothing here needs for a local path, so that the tool refuses in a moment and
as the Python API does.
"""
import os
import re

from t2t_lite import files
from t2t_lite.decode.decode_settings import check_request
from t2t_lite.errors import T2TLiteError
from t2t_lite.rundir import run_files

QUANTIZATIONS = ("none", "int8", "int8_float32", "int8_bfloat16", "float16", "bfloat16")
# LiteRT's weights: float32, float16 (dequantized to float32 when the model loads), or int8
# dynamic range (int8 weights, float32 activations).
LITERT_QUANTIZATIONS = ("float32", "float16", "int8")
# A LiteRT export directory's names and format, which litert_export.py writes and the TF-free
# runtime (t2t_lite/litert/exported.py) reads: owned here, below both.
LITERT_FORMAT, LITERT_FORMAT_VERSION = "t2t-lite-litert", 1
LITERT_MODEL_FILE, LITERT_SETTINGS_FILE = "model.tflite", "t2t_lite_litert.json"
VERSION = re.compile(r"^\d+$")  # A version of a SavedModel export base (TF Serving's layout).
TEMP = re.compile(r"^\.tmp-\d+$")  # A version being written (export.save).


class ExportError(T2TLiteError, ValueError):
  """A bad export setting or export_dir (one-line message)."""


class CTranslate2ExportError(T2TLiteError, ValueError):
  """A CTranslate2 export refused: a setting it cannot carry, or a bad export_dir (one line)."""


def _members(model_dir):
  """The run directories of model_dir: itself, or an ensemble's list."""
  return list(model_dir) if isinstance(model_dir, (list, tuple)) else [model_dir]


def check_saved_model_export(model_dir, export_dir, precision="auto", forcing=(),
                             max_input_length=None, jit_compile=False, **settings):
  """Refuses a SavedModel export into an export_dir that is not an export base, in a precision
  TF Serving does not run, of a request decoding refuses (settings: DecodeSettings' fields;
  `forcing`: the signatures that force target prefixes or constraints; check_request), or of
  a model_dir (each of an ensemble's) that holds no run."""
  check_export_base(export_dir)
  check_request(forcing, jit_compile, max_input_length, **settings)
  if precision == "int8":
    raise ExportError("--precision=int8 decodes with XLA-compiled matmuls that TF Serving runs "
                      "only with --xla_cpu_compilation_enabled; export none or bf16, or "
                      "--format=ctranslate2 --quantization=int8")
  for directory in _members(model_dir):
    run_files.check_run_dir(directory)


def check_export_base(export_dir):
  """Refuses an export_dir that is a file, or a directory that holds anything but versions
  (integer-named directories, and what an export that did not finish left): a data_dir or a
  model_dir given by mistake would get a SavedModel among its files."""
  if not files.exists(export_dir):
    return
  if not files.isdir(export_dir):
    raise ExportError(f"export_dir {export_dir} is a file, not a directory")
  names = sorted(files.listdir(export_dir))
  others = [name for name in names if not TEMP.match(name) and not (
      VERSION.match(name) and files.isdir(os.path.join(export_dir, name)))]
  if others:
    raise ExportError(f"export_dir {export_dir} holds {len(others)} entries that are not export "
                      f"versions (e.g. {others[0]}): it is not an export base, whose only entries "
                      "are <version>/ directories; give a new or empty directory")


def check_ctranslate2_export(model_dir, export_dir, *, quantization="none", precision="auto",
                             with_alignments=False, max_input_length=None, **settings):
  """Refuses a CTranslate2 export of an unknown quantization, into an export_dir that is not
  a new or empty local directory, with a setting a CTranslate2 model directory cannot carry
  (`settings`: DecodeSettings' fields) or that decoding refuses (check_request), or of a
  model_dir that holds no run."""
  if quantization not in QUANTIZATIONS:
    raise CTranslate2ExportError(f"quantization {quantization!r} is not one of "
                                 f"{', '.join(QUANTIZATIONS)}")
  if "://" in export_dir:
    raise CTranslate2ExportError(f"export_dir {export_dir}: CTranslate2 writes and reads local "
                                 "directories only")
  if os.path.isfile(export_dir):
    raise CTranslate2ExportError(f"export_dir {export_dir} is a file, not a directory")
  names = sorted(os.listdir(export_dir)) if os.path.isdir(export_dir) else []
  if names:
    raise CTranslate2ExportError(f"export_dir {export_dir} is not empty ({len(names)} entries, "
                                 f"e.g. {names[0]}): a CTranslate2 model directory is written "
                                 "into a new or empty directory")
  refused = [
      (len(_members(model_dir)) > 1,
       "an ensemble (--model_dir given more than once): export one model_dir, e.g. an averaged "
       "one"),
      (settings.get("sample"), "--sample: sampling is a translate_batch option "
                               "(sampling_topk, sampling_temperature), not part of the model"),
      (settings.get("shortlist"), "--shortlist: CTranslate2's vocabulary map (use_vmap) is "
                                  "its own; bench/ctranslate2_decode.py writes one"),
      (with_alignments, "--with_alignments: CTranslate2 gives attention (return_attention), "
                        "not our word alignments"),
      (precision not in ("auto", "none"), f"--precision={precision}: CTranslate2 chooses its "
                                          "compute type when it loads; give --quantization"),
  ]
  for bad, message in refused:
    if bad:
      raise CTranslate2ExportError(f"--format=ctranslate2 with {message}")
  check_request(max_input_length=max_input_length, **settings)
  run_files.check_run_dir(_members(model_dir)[0])


def check_litert_export(model_dir, export_dir, **request):
  """Refuses a LiteRT export into an export_dir that is not a new or empty local directory,
  or of a request check_litert_request refuses."""
  check_litert_request(model_dir, **request)
  if "://" in export_dir:
    raise ExportError(f"export_dir {export_dir}: a LiteRT model is written to a local directory")
  files.check_not_a_file(export_dir, "export_dir", ExportError)
  names = sorted(os.listdir(export_dir)) if os.path.isdir(export_dir) else []
  if names:
    raise ExportError(f"export_dir {export_dir} is not empty ({len(names)} entries, e.g. "
                      f"{names[0]}): a LiteRT model is written into a new or empty directory")


def check_litert_request(model_dir, *, quantization="float32", precision="none",
                         with_alignments=False, max_input_length=None, forcing=(), **settings):
  """Refuses a LiteRT model of an unknown quantization or in a compute precision (its weights
  are converted from float32: the .tflite's types are `quantization`'s), of a request the
  LiteRT engine cannot decode (check_request with engine="litert": sampling, an ensemble, ...;
  `forcing`: target prefixes, which its model always takes, or constraints), or of a model_dir
  that holds no run."""
  if quantization not in LITERT_QUANTIZATIONS:
    raise ExportError(f"--format=litert: quantization {quantization!r} is not one of "
                      f"{', '.join(LITERT_QUANTIZATIONS)}")
  if precision not in ("auto", "none"):
    raise ExportError(f"--format=litert with --precision={precision}: its weights are converted "
                      "from float32; give --quantization (float32, float16 or int8)")
  # Target prefixes, which the model always takes, compose with whatever LiteRT carries.
  check_request(list(forcing), max_input_length=max_input_length,
                with_alignments=with_alignments, engine="litert",
                ensemble=len(_members(model_dir)) > 1, **settings)
  run_files.check_run_dir(_members(model_dir)[0])
