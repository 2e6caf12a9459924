"""A LiteRT export directory, read and checked without TensorFlow: t2t_lite_litert.json (what
the model needs and how it was made), model.tflite and the tokenizer's file.

  t2t_lite_litert.json  {"format": "t2t-lite-litert", "version": 1, "inputs": {"inputs",
                        "max_lengths", "prefix": tensor names}, "outputs": {"ids", "scores"},
                        "vocab_size", "pad_id", "eos_id", "unk_id", "beam_size", "alpha",
                        "extra_length", "n_best", "max_input_length", "tokenizer": {"kind":
                        "sentencepiece" | "words", "file"}, "quantization", and the record of
                        its making (problem, model_dir, checkpoint, plan, tensorflow)}
  model.tflite          int32 inputs [B, S] (0-padded, EOS-ended), max_lengths [B], prefix
                        [B, P] -> ids int32 [B, K, L], scores float32 [B, K], best first.

Every refusal is one line naming the file (LiteRTError, exit status 2).
"""
import dataclasses
import json
import os

from t2t_lite.decode import export_checks
from t2t_lite.errors import T2TLiteError

# The export's names, as litert_export.py writes them (export_checks owns them).
EXPORT_FILE, MODEL_FILE = export_checks.LITERT_SETTINGS_FILE, export_checks.LITERT_MODEL_FILE
FORMAT, VERSION = export_checks.LITERT_FORMAT, export_checks.LITERT_FORMAT_VERSION
QUANTIZATIONS = export_checks.LITERT_QUANTIZATIONS
TOKENIZER_KINDS = ("sentencepiece", "words")
_NEEDED = ("inputs", "outputs", "vocab_size", "pad_id", "eos_id", "unk_id", "beam_size", "alpha",
           "extra_length", "n_best", "max_input_length", "tokenizer", "quantization")


class LiteRTError(T2TLiteError, ValueError):
  """An export the LiteRT runtime cannot run, or a request it cannot carry (one line)."""


class MissingRuntime(T2TLiteError, ImportError):
  """ai_edge_litert (or sentencepiece) is not installed (one line, exit status 2)."""


def is_export(directory):
  """Whether `directory` holds a LiteRT export (its JSON), rather than, say, a training run."""
  return os.path.isfile(os.path.join(directory, EXPORT_FILE))


@dataclasses.dataclass(frozen=True)
class Export:
  """An export directory's JSON, checked: the model's tensors' names and its settings."""
  directory: str
  info: dict

  def __getattr__(self, name):  # The JSON's fields: export.vocab_size, export.beam_size...
    try:
      return self.__dict__["info"][name]
    except KeyError:
      raise AttributeError(name) from None

  @property
  def model_path(self):
    return os.path.join(self.directory, MODEL_FILE)

  @property
  def tokenizer_path(self):
    return os.path.join(self.directory, self.info["tokenizer"]["file"])


def read(directory):
  """The export in `directory` -> Export, refused in one line naming the file when it is not a
  LiteRT export of a version this runtime reads, or lacks its model or tokenizer file."""
  path = os.path.join(directory, EXPORT_FILE)
  if not os.path.isdir(directory):
    raise LiteRTError(f"{directory} is not a directory: give a LiteRT export directory "
                      "(t2t-lite-export --format=litert) or a training run")
  if not os.path.isfile(path):
    raise LiteRTError(f"{path} is missing: {directory} is not a LiteRT export (t2t-lite-export "
                      "--format=litert)")
  try:
    with open(path, encoding="utf-8") as f:
      info = json.load(f)
  except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
    raise LiteRTError(f"{path} is not a LiteRT export's JSON: {e}") from None
  if not isinstance(info, dict) or info.get("format") != FORMAT:
    found = info.get("format") if isinstance(info, dict) else type(info).__name__
    raise LiteRTError(f"{path} is not a LiteRT export's JSON (format {found!r}, not {FORMAT!r})")
  if info.get("version") != VERSION:
    raise LiteRTError(f"{path} is of version {info.get('version')!r}; this runtime reads "
                      f"version {VERSION}: export the model again with this t2t-lite")
  missing = [name for name in _NEEDED if name not in info]
  if missing:
    raise LiteRTError(f"{path} lacks {', '.join(missing)}: export the model again")
  if info["tokenizer"].get("kind") not in TOKENIZER_KINDS:
    raise LiteRTError(f"{path}: tokenizer kind {info['tokenizer'].get('kind')!r} is not one of "
                      f"{', '.join(TOKENIZER_KINDS)}")
  if info["quantization"] not in QUANTIZATIONS:
    raise LiteRTError(f"{path}: quantization {info['quantization']!r} is not one of "
                      f"{', '.join(QUANTIZATIONS)}")
  export = Export(directory, info)
  for needed in (export.model_path, export.tokenizer_path):
    if not os.path.isfile(needed):
      raise LiteRTError(f"{needed} is missing: the LiteRT export in {directory} is incomplete")
  return export
