"""t2t-lite-train: train a Transformer on a registered problem, on whatever hardware is there.

  t2t-lite-train --problem=multi30k_ende --hparams=transformer_base \\
      --data_dir=~/t2t/data/multi30k_ende --model_dir=~/t2t/runs/base --train_steps=100000

Re-running the same command resumes from model_dir's last checkpoint. `--list` prints the
registered problems and hparams sets. Bad input (unknown names, bad overrides, a model_dir
trained with other hparams) exits with status 2 and a one-line message.
"""
import argparse
import logging
import os
import sys

from t2t_lite.bin import flags

HELP = {
    "problem": "registered problem to train on (see --list), e.g. multi30k_ende",
    "hparams": "registered hparams set (see --list), e.g. transformer_base",
    "hparams_overrides": "comma-separated name=value changes to the set, e.g. "
                         "'dropout=0.3,batch_size=4096'; unknown names are refused",
    "data_dir": "prepared data (vocabulary + TFRecords); prepared here first if it is not. "
                "Default: $T2T_LITE_HOME/data/<problem> ($T2T_LITE_HOME: ~/t2t_lite)",
    "raw_dir": "raw data for preparing data_dir (None = the problem's own choice)",
    "model_dir": "checkpoints, hparams.json, run.json, vocabulary and TensorBoard logs; any "
                 "tf.io.gfile path (local, gs://, ram://). An existing run is resumed. "
                 "Default: $T2T_LITE_HOME/runs/<problem>-<hparams>",
    "train_steps": "total optimizer steps (a resumed run continues up to this number)",
    "train_minutes": "also stop (with a checkpoint) after this many minutes of this process's "
                     "wall-clock time (None = no limit)",
    "cooldown_minutes": "not in the paper: over the last this many minutes of --train_minutes "
                        "the learning rate falls linearly to 0 (by wall time; one worker)",
    "eval_every": "evaluate on the dev split every this many steps (and at the end)",
    "eval_steps": "dev batches (per replica) per evaluation; 0 = no evaluation",
    "strategy": "tf.distribute strategy: auto = TPU if one is found, else mirrored over all "
                "GPUs if more than one, else default (one device); multi_worker reads the "
                "cluster from TF_CONFIG",
    "tpu": "TPU name or grpc:// address for TPUStrategy ('local' on a TPU VM)",
    "xla": "compile the training step with XLA (jit_compile); --noxla turns it off",
    "mixed_precision": "none = float32; bf16 = bfloat16 compute (TPU, recent GPUs); fp16 = "
                       "float16 compute with dynamic loss scaling (GPUs)",
    "checkpoint_every_minutes": "save a checkpoint every this many minutes (the paper: 10) "
                                "and at the end",
    "keep_checkpoints": "how many recent checkpoints to keep (the paper averages the last 5 for "
                        "base and 20 for big)",
    "grad_accum_steps": "micro-batches accumulated per optimizer step: hparams.batch_size is "
                        "the GLOBAL token count per step, each replica reads batch_size / "
                        "(replicas x grad_accum_steps) tokens at a time",
    "seed": "seed of weights, dropout and data order (same seed = same run)",
    "steps_per_execution": "optimizer steps per host call (0 = auto: 1, or 100 on TPU)",
    "static_shapes": "pad batches to their bucket's length so only a few shapes exist (fewer "
                     "XLA compilations; required on TPU); default: on for TPU and XLA",
    "pack": "pack several examples into each row of a training batch (tensor2tensor's packed "
            "problems): one static shape, little padding; attention stays inside examples",
    "eval_decode_examples": "at each evaluation, decode this many dev sentences with beam "
                            "search and report the problem's metric (BLEU, bracket F1, "
                            "accuracy); 0 = off",
    "log_every": "print a progress line (and write summaries) every this many steps",
    "progress_seconds": "while preparing data_dir, log pairs read, pairs/s and an ETA at most "
                        "this often (0: only when a split is done)",
    "list": "print the registered problems and hparams sets, then exit",
}


def parse_args(argv=None):
  parser = argparse.ArgumentParser(
      prog="t2t-lite-train", description=__doc__.split("\n\n")[0],
      formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  add = parser.add_argument
  add("--problem", help=HELP["problem"])
  add("--hparams", default="transformer_base", help=HELP["hparams"])
  add("--hparams_overrides", default="", help=HELP["hparams_overrides"])
  add("--data_dir", help=HELP["data_dir"])
  add("--raw_dir", default=None, help=HELP["raw_dir"])
  add("--model_dir", help=HELP["model_dir"])
  add("--train_steps", type=int, default=100000, help=HELP["train_steps"])
  add("--train_minutes", type=float, default=None, help=HELP["train_minutes"])
  add("--cooldown_minutes", type=float, default=None, help=HELP["cooldown_minutes"])
  add("--eval_every", type=int, default=1000, help=HELP["eval_every"])
  add("--eval_steps", type=int, default=20, help=HELP["eval_steps"])
  add("--strategy", default="auto",
      choices=["auto", "default", "mirrored", "multi_worker", "tpu"], help=HELP["strategy"])
  add("--tpu", default=None, help=HELP["tpu"])
  add("--xla", action=argparse.BooleanOptionalAction, default=True, help=HELP["xla"])
  add("--noxla", dest="xla", action="store_false", help="same as --no-xla")
  add("--mixed_precision", default="none", choices=["none", "bf16", "fp16"],
      help=HELP["mixed_precision"])
  add("--checkpoint_every_minutes", type=float, default=10.0,
      help=HELP["checkpoint_every_minutes"])
  add("--keep_checkpoints", type=int, default=20, help=HELP["keep_checkpoints"])
  add("--grad_accum_steps", type=int, default=1, help=HELP["grad_accum_steps"])
  add("--seed", type=int, default=1, help=HELP["seed"])
  add("--steps_per_execution", type=int, default=0, help=HELP["steps_per_execution"])
  add("--static_shapes", action=argparse.BooleanOptionalAction, default=None,
      help=HELP["static_shapes"])
  add("--pack", action=argparse.BooleanOptionalAction, default=False, help=HELP["pack"])
  add("--eval_decode_examples", type=int, default=100, help=HELP["eval_decode_examples"])
  add("--log_every", type=int, default=100, help=HELP["log_every"])
  add("--progress_seconds", type=float, default=10.0, help=HELP["progress_seconds"])
  add("--list", action="store_true", help=HELP["list"])
  flags.add_problem_settings_flag(parser)
  flags.add_verbose_flag(parser)
  args = parser.parse_args(argv)
  if not args.list and not args.problem:
    parser.error("--problem is required (or --list)")
  return args


def default_dirs(args, environ=os.environ):
  """Fills in --data_dir and --model_dir under $T2T_LITE_HOME; returns the names it chose."""
  home = environ.get("T2T_LITE_HOME") or os.path.join(os.path.expanduser("~"), "t2t_lite")
  chosen = []
  if not args.data_dir:
    args.data_dir = os.path.join(home, "data", args.problem)
    chosen.append("data_dir")
  if not args.model_dir:
    args.model_dir = os.path.join(home, "runs", f"{args.problem}-{args.hparams}")
    chosen.append("model_dir")
  return chosen


def main(argv=None):
  args = parse_args(argv)
  import tensorflow as tf

  import t2t_lite
  from t2t_lite import decoding, trainer
  from t2t_lite import model_dir as model_dir_lib
  from t2t_lite import prepare_workers
  from t2t_lite.bin import cli
  from t2t_lite.errors import T2TLiteError

  if args.list:
    print("problems:", " ".join(t2t_lite.list_problems()))
    print("hparams: ", " ".join(t2t_lite.list_hparams()))
    return 0
  cli.configure_logging(args.verbose, logging.INFO, "%(message)s")
  for name in default_dirs(args):
    print(f"{name}: {getattr(args, name)} (default; set --{name} to choose)", flush=True)
  try:
    problem = t2t_lite.get_problem(
        args.problem, **t2t_lite.problem_settings(args.problem, args.problem_settings))
    hparams = t2t_lite.get_hparams(args.hparams, args.hparams_overrides)
    config = trainer.TrainConfig(
        model_dir=args.model_dir, train_steps=args.train_steps, eval_every=args.eval_every,
        eval_steps=args.eval_steps, strategy=args.strategy, tpu=args.tpu, xla=args.xla,
        mixed_precision=args.mixed_precision,
        checkpoint_every_minutes=args.checkpoint_every_minutes,
        keep_checkpoints=args.keep_checkpoints, grad_accum_steps=args.grad_accum_steps,
        seed=args.seed, steps_per_execution=args.steps_per_execution,
        static_shapes=args.static_shapes, pack=args.pack, log_every=args.log_every,
        train_minutes=args.train_minutes, cooldown_minutes=args.cooldown_minutes)
    # The run's one model_dir check: before preparing data or building anything.
    model_dir_lib.check_saved_hparams(args.model_dir, hparams, args.problem)
    if not problem.is_prepared(args.data_dir):
      print(f"preparing {args.problem} in {args.data_dir}", flush=True)
      problem.prepare(args.data_dir, args.raw_dir, args.progress_seconds,
                      prepare_workers.default_workers())
    vocab_size = problem.tokenizer(args.data_dir).vocab_size
    run_info = {"problem": args.problem, "hparams_set": args.hparams,
                "hparams_overrides": args.hparams_overrides}
    metric_fn = decoding.problem_metric_fn(problem, args.data_dir, hparams,
                                           args.eval_decode_examples)
    result = trainer.Trainer(problem, hparams, args.data_dir, config, vocab_size, run_info,
                             metric_fn, log=lambda line: print(line, flush=True)).train()
  except T2TLiteError as e:
    return cli.fail("t2t-lite-train", e, e.exit_status)
  except tf.errors.DataLossError as e:  # A record file damaged after the size check passed.
    e = problem.damaged_data_error(args.data_dir, e)
    return cli.fail("t2t-lite-train", e, e.exit_status)
  except (tf.errors.NotFoundError, tf.errors.PermissionDeniedError) as e:  # data_dir changed
    return cli.fail("t2t-lite-train", f"reading {args.data_dir} failed while training: "
                    f"{cli.op_error_reason(e)}", 1)
  stopped = {"SIGTERM": " (stopped by SIGTERM)", "time": " (time budget spent)"}.get(
      result["stopped"], "")
  print(f"done: step {result['step']}{stopped}, checkpoints in {args.model_dir}", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
