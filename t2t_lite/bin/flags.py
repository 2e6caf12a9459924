"""Flags shared by the tools: --verbose (all), --problem_settings (train, datagen), and those of
the tools that load a trained model_dir (decode, export, attention)."""
from t2t_lite.modeling.mixed_precision import PRECISIONS


def add_model_flags(parser):
  """--model_dir, --checkpoint_path and --precision."""
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
  """--beam_size, --alpha and --extra_length (default: hparams.json's, else the problem's)."""
  parser.add_argument("--beam_size", type=int, default=None, help="1 = greedy")
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
