"""Flags shared by the tools: --verbose (all), --problem_settings (train, datagen), those of
the tools that load a trained model_dir (decode, score, export, attention), and the flags made
from a dataclass' fields (decoding settings, training options), whose help is declared beside
each field."""
import argparse
import dataclasses
import typing

from t2t_lite.modeling.mixed_precision import INFERENCE_CHOICES


def add_model_flags(parser, ensemble=False):
  """--model_dir (given several times: an ensemble, where `ensemble`), --checkpoint_path and
  --precision."""
  if ensemble:
    parser.add_argument("--model_dir", required=True, action="append",
                        help="a t2t-lite-train model_dir (hparams.json, run.json, "
                             "checkpoints); given more than once, the models decode as one "
                             "ensemble (their next-token probabilities averaged at each step; "
                             "one vocabulary)")
  else:
    parser.add_argument("--model_dir", required=True,
                        help="a t2t-lite-train model_dir (hparams.json, run.json, checkpoints)")
  parser.add_argument("--checkpoint_path", default=None,
                      help="best = the run's best model (model_dir/best/, kept by the trainer's "
                           "--best_metric); newest = its newest checkpoint; or a checkpoint "
                           "prefix (e.g. model_dir/ckpt-1000) or a directory whose latest "
                           "checkpoint to use (e.g. an averaged one). Default: best when the run "
                           "kept one, else newest; of an ensemble, each member's")
  parser.add_argument("--precision", default="auto", choices=list(INFERENCE_CHOICES),
                      help="compute precision: auto = the fastest on this machine (printed); "
                           "none = float32; bf16 = bfloat16 matmuls with float32 softmax, "
                           "log-probabilities and beam scores (CPUs with AMX or AMD's AVX-512 "
                           "bf16, recent GPUs, TPUs); fp16 = float16 (GPUs); int8 = the "
                           "weights' matmuls in int8, weights quantized per output unit at load "
                           "and activations per row (CPUs with VNNI or AMX-INT8; decoding only, "
                           "not exported). The trainer's --mixed_precision names; any run's "
                           "weights load")


def add_fields(parser, cls, names=None):
  """A flag --<name> for every field of the dataclass `cls` (or those in `names`), with the
  field's type, default (None for a field without one or one resolved elsewhere: metadata
  "resolved"), help and choices (its metadata); a boolean one is --<name>, --no-<name> and
  absl's --no<name>."""
  for field in dataclasses.fields(cls):
    if names is not None and field.name not in names:
      continue
    name, meta = field.name, field.metadata
    resolved = field.default is dataclasses.MISSING or meta.get("resolved")
    default = None if resolved else field.default
    kind = field.type
    if typing.get_origin(kind) is typing.Union:  # Optional[x]
      kind = typing.get_args(kind)[0]
    if kind is bool:
      parser.add_argument(f"--{name}", action=argparse.BooleanOptionalAction, default=default,
                          help=meta["help"])
      parser.add_argument(f"--no{name}", dest=name, action="store_false",
                          help=f"same as --no-{name}")
    else:
      parser.add_argument(f"--{name}", type=kind, default=default, choices=meta.get("choices"),
                          help=meta["help"])


def field_values(args, cls):
  """{name: value} the flags give for the fields of the dataclass `cls` that have a flag."""
  return {field.name: getattr(args, field.name) for field in dataclasses.fields(cls)
          if hasattr(args, field.name)}


def add_verbose_flag(parser):
  """--verbose: read by t2t_lite/bin/__init__.py before TensorFlow is imported."""
  parser.add_argument("--verbose", action="store_true",
                      help="show TensorFlow's own log (start-up, CUDA probing, C++ warnings), "
                           "at the level TF_CPP_MIN_LOG_LEVEL sets (default: all); without "
                           "--verbose it is hidden, whatever TF_CPP_MIN_LOG_LEVEL says")


def add_problem_settings_flag(parser):
  """--problem_settings: a problem's class settings for the data it prepares."""
  parser.add_argument("--problem_settings", default="",
                      help="comma-separated name=value changes to the problem's data settings, "
                           "e.g. 'vocab_size=8000' or wsj_parsing's 'target_tags=all'; they are "
                           "stored in data_dir's manifest (a data_dir prepared otherwise is "
                           "refused) and decoding reads them from the run")


def model_dirs(args):
  """--model_dir's value: one run directory, or a list of them (an ensemble)."""
  dirs = args.model_dir if isinstance(args.model_dir, list) else [args.model_dir]
  return dirs[0] if len(dirs) == 1 else dirs


def positive_int(text):
  """argparse type of a count or size flag (--batch_size, --num_last): an integer >= 1; 0 or a
  negative one is refused at parsing, in one line, not taken to mean nothing or everything."""
  try:
    value = int(text)
  except ValueError:  # argparse's own wording for a type=int flag
    raise argparse.ArgumentTypeError(f"invalid int value: {text!r}") from None
  if value < 1:
    raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
  return value
