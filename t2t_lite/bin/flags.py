"""Flags shared by the tools: --verbose (all), --problem_settings (train, datagen), and those of
the tools that load a trained model_dir (decode, export, attention)."""
from t2t_lite.modeling.mixed_precision import PRECISIONS


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
                      help="a checkpoint prefix (e.g. model_dir/ckpt-1000) or a directory whose "
                           "latest checkpoint to use (e.g. an averaged one); default: the latest "
                           "in model_dir")
  parser.add_argument("--precision", default="none", choices=list(PRECISIONS),
                      help="compute precision: none = float32; bf16 = bfloat16 matmuls with "
                           "float32 softmax, log-probabilities and beam scores (CPUs with "
                           "AVX-512 bf16 or AMX, recent GPUs, TPUs); fp16 = float16 (GPUs). "
                           "The trainer's --mixed_precision names; any run's weights load")


def add_beam_flags(parser):
  """--beam_size, --alpha, --extra_length (default: hparams.json's, else the problem's) and
  --n_best."""
  parser.add_argument("--beam_size", type=int, default=None, help="1 = greedy")
  parser.add_argument("--n_best", type=int, default=1,
                      help="outputs a sentence, best first (at most --beam_size; sampled: "
                           "samples a sentence)")
  parser.add_argument("--alpha", type=float, default=None,
                      help="length penalty ((5 + |Y|) / 6)^alpha")
  parser.add_argument("--extra_length", type=int, default=None,
                      help="max output length = input length + this")


def add_verbose_flag(parser):
  """--verbose: read by t2t_lite/bin/__init__.py before TensorFlow is imported."""
  parser.add_argument("--verbose", action="store_true",
                      help="show TensorFlow's own log (start-up, CUDA probing, C++ warnings)")


def add_problem_settings_flag(parser):
  """--problem_settings: a problem's class settings for the data it prepares."""
  parser.add_argument("--problem_settings", default="",
                      help="comma-separated name=value changes to the problem's data settings, "
                           "e.g. 'vocab_size=8000' or wsj_parsing's 'target_tags=all'; they are "
                           "stored in data_dir's manifest (a data_dir prepared otherwise is "
                           "refused) and decoding reads them from the run")


def add_sampling_flags(parser):
  """--sample, --temperature, --top_k, --top_p and --seed."""
  parser.add_argument("--sample", action="store_true",
                      help="draw outputs from the model's distribution instead of searching "
                           "(e.g. for back-translation); --n_best samples a sentence")
  parser.add_argument("--temperature", type=float, default=1.0,
                      help="sampling: logits divided by it (towards 0: greedy)")
  parser.add_argument("--top_k", type=int, default=0,
                      help="sampling: from the k most likely tokens only (0: all)")
  parser.add_argument("--top_p", type=float, default=1.0,
                      help="sampling: from the fewest most likely tokens whose probability "
                           "reaches p (nucleus sampling; 1: all)")
  parser.add_argument("--seed", type=int, default=0,
                      help="sampling: the same seed and input give the same samples")


def model_dirs(args):
  """--model_dir's value: one run directory, or a list of them (an ensemble)."""
  dirs = args.model_dir if isinstance(args.model_dir, list) else [args.model_dir]
  return dirs[0] if len(dirs) == 1 else dirs


_SETTINGS = ("beam_size", "alpha", "extra_length", "n_best", "sample", "temperature", "top_k",
             "top_p", "seed")


def decode_settings(args):
  """The decoding settings the flags give (translation.DecodeSettings' fields)."""
  return {name: getattr(args, name) for name in _SETTINGS if hasattr(args, name)}
