"""t2t-lite-datagen: build a problem's vocabulary and tokenized cache in --data_dir.

  t2t-lite-datagen --problem=multi30k_ende --data_dir=data/multi30k_ende --raw_dir=raw/multi30k
  t2t-lite-datagen --list

Running it again on a prepared data_dir does nothing. t2t-lite-train prepares by itself too.
While reading each split it logs (stderr) pairs read, pairs/s and an ETA every
--progress_seconds. A long split is tokenized by --workers processes (default: one per core).
"""
import json
import logging
import sys

import t2t_lite
from t2t_lite.bin import cli, flags
from t2t_lite.errors import T2TLiteError


def parse_args(argv=None):
  parser = cli.ArgumentParser(prog="t2t-lite-datagen", description=__doc__.split("\n")[0])
  parser.add_argument("--problem", help="registered problem name (see --list)")
  parser.add_argument("--data_dir", help="where the vocabulary and tokenized data go")
  parser.add_argument("--raw_dir", default=None,
                      help="raw inputs (downloads, TFDS data, treebank); default per problem")
  parser.add_argument("--progress_seconds", type=float, default=10.0,
                      help="log pairs read, pairs/s and an ETA at most this often while "
                           "reading each split (0: only when a split is done)")
  parser.add_argument("--workers", type=int, default=None,
                      help="processes that tokenize a split past its first 50,000 pairs "
                           "(default: one per core; 1: this process only)")
  parser.add_argument("--list", action="store_true", help="print the problems and exit")
  flags.add_problem_settings_flag(parser)
  flags.add_verbose_flag(parser)
  args = parser.parse_args(argv)
  if not args.list and (not args.problem or not args.data_dir):
    parser.error("--problem and --data_dir are required (or --list)")
  if args.workers is not None and args.workers < 1:
    parser.error(f"--workers must be at least 1, not {args.workers}")
  return args


def main(argv=None):
  args = parse_args(argv)
  cli.configure_logging(args.verbose, logging.INFO)
  if args.list:
    for name in t2t_lite.list_problems():
      print(name)
    return 0
  try:
    # An unknown problem is refused before its plug-ins load TensorFlow (registry.py).
    problem = t2t_lite.get_problem(
        args.problem, **t2t_lite.problem_settings(args.problem, args.problem_settings))
    from t2t_lite.data import preparation
    stats = problem.prepare(args.data_dir, args.raw_dir, args.progress_seconds,
                            args.workers or preparation.default_workers())
  except T2TLiteError as e:
    return cli.fail("t2t-lite-datagen", e, e.exit_status)
  summary = {split: {k: s[k] for k in ("pairs", "examples", "empty")} for split, s in stats.items()}
  print(json.dumps({"problem": args.problem, "data_dir": args.data_dir, "splits": summary}))
  return 0


if __name__ == "__main__":
  sys.exit(main())
