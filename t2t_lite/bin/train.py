"""t2t-lite-train: train a Transformer on a registered problem, on whatever hardware is there.

  t2t-lite-train --problem=multi30k_ende --hparams=transformer_base \\
      --data_dir=~/t2t/data/multi30k_ende --model_dir=~/t2t/runs/base --train_steps=100000

Re-running the same command resumes from model_dir's last checkpoint. `--list` prints the
registered problems and hparams sets. Bad input (unknown names, bad overrides, a model_dir
trained with other hparams, a model_dir that is the data_dir) exits with status 2 and a
one-line message; a failure at run time (a full disk, a diverged run) with status 1.
"""
import argparse
import logging
import os
import sys

from t2t_lite.bin import cli, flags
from t2t_lite.rundir import run_files
from t2t_lite.train.train_config import TrainConfig


def parse_args(argv=None):
  parser = cli.ArgumentParser(
      prog="t2t-lite-train", description=__doc__.split("\n\n")[0],
      formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  add = parser.add_argument
  add("--problem", help="registered problem to train on (see --list), e.g. multi30k_ende")
  add("--hparams", default="transformer_base",
      help="registered hparams set (see --list), e.g. transformer_base")
  add("--hparams_overrides", default="",
      help="comma-separated name=value changes to the set, e.g. 'dropout=0.3,batch_size=4096'; "
           "unknown names are refused")
  add("--data_dir", help="prepared data (vocabulary + TFRecords); prepared here first if it is "
                         "not. Default: $T2T_LITE_HOME/data/<problem> ($T2T_LITE_HOME: "
                         "~/t2t_lite)")
  add("--raw_dir", default=None,
      help="raw data for preparing data_dir (None = the problem's own choice)")
  add("--progress_seconds", type=float, default=10.0,
      help="while preparing data_dir, log pairs read, pairs/s and an ETA at most this often "
           "(0: only when a split is done)")
  flags.add_fields(parser, TrainConfig)  # A flag for every TrainConfig field.
  add("--list", action="store_true",
      help="print the registered problems and hparams sets, then exit")
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
  import t2t_lite
  from t2t_lite.errors import T2TLiteError

  if args.list:
    cli.print_registered()
    return 0
  cli.configure_logging(args.verbose, logging.INFO, "%(message)s")
  chosen = default_dirs(args)
  try:
    # The names, the hparams and the options first: checking them needs no TensorFlow, which
    # the problems (their plug-ins) and the trainer load.
    t2t_lite.registry.PROBLEMS.check(args.problem)
    hparams = t2t_lite.get_hparams(args.hparams, args.hparams_overrides)
    config = TrainConfig(**flags.field_values(args, TrainConfig))
    run_files.check_data_dir_apart(args.model_dir, args.data_dir)  # As trainer.train does.
    problem = t2t_lite.get_problem(
        args.problem, **t2t_lite.problem_settings(args.problem, args.problem_settings))
    # Said once the command is known to be good: a refused one prints nothing but its error.
    for name in chosen:
      print(f"{name}: {getattr(args, name)} (default; set --{name} to choose)", flush=True)
    from t2t_lite.data import preparation
    from t2t_lite.train import trainer
    result = trainer.train(
        problem, hparams, args.data_dir, config, raw_dir=args.raw_dir,
        progress_seconds=args.progress_seconds, workers=preparation.default_workers(),
        run_info={"hparams_set": args.hparams, "hparams_overrides": args.hparams_overrides},
        log=lambda line: print(line, flush=True))
  except T2TLiteError as e:
    return cli.fail("t2t-lite-train", e, e.exit_status)
  stopped = {"SIGTERM": " (stopped by SIGTERM)", "time": " (time budget spent)",
             "early": " (stopped early; the best model is in best/)"}.get(
      result["stopped"], "")
  print(f"done: step {result['step']}{stopped}, checkpoints in {args.model_dir}", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
