"""t2t-lite-avg-checkpoints: average the last N checkpoints of a model_dir (section 6.1).

  t2t-lite-avg-checkpoints --model_dir=runs/ende --num_last=5 --output_dir=runs/ende/avg5
  t2t-lite-decode --model_dir=runs/ende/avg5 --input_file=...

The paper averages the last 5 checkpoints (written every 10 minutes) for base models and the last
20 for big ones. output_dir gets the averaged model weights (a checkpoint that decode and export
accept) plus hparams.json, run.json and the vocabulary. Checkpoints whose model variables differ
in names or shapes are refused, naming the first difference.

output_dir must be a new or empty directory, or an earlier output of t2t-lite-avg-checkpoints
of the same model_dir, which is replaced. Anything else is refused before a byte is written:
the model_dir itself, another run's model_dir, a directory the trainer writes (best/, train/,
eval/), any other directory with files in it. A write that fails (a full disk) leaves no
directory it created.
"""
import json
import logging
import sys

from t2t_lite.bin import cli, flags
from t2t_lite.errors import T2TLiteError
from t2t_lite.rundir import run_files


def parse_args(argv=None):
  parser = cli.ArgumentParser(prog="t2t-lite-avg-checkpoints",
                                   description=__doc__.split("\n")[0])
  parser.add_argument("--model_dir", required=True, help="a t2t-lite-train model_dir")
  parser.add_argument("--num_last", type=flags.positive_int, default=5,
                      help="how many of the newest checkpoints to average (paper: 5 base, 20 big)")
  parser.add_argument("--output_dir", required=True,
                      help="where the averaged checkpoint and the model_dir files go: a new or "
                           "empty directory, or an earlier average of the same --model_dir "
                           "(replaced); not a run's model_dir or its best/, train/, eval/")
  flags.add_verbose_flag(parser)
  return parser.parse_args(argv)


def main(argv=None):
  args = parse_args(argv)
  cli.configure_logging(args.verbose, logging.INFO)
  try:
    # As average_last does, before TensorFlow loads.
    run_files.check_run_dir(args.model_dir)
    run_files.check_average_dir(args.model_dir, args.output_dir)
    from t2t_lite.train import averaging
    prefix = averaging.average_last(args.model_dir, args.num_last, args.output_dir)
  except T2TLiteError as e:
    return cli.fail("t2t-lite-avg-checkpoints", e, e.exit_status)
  print(json.dumps({"output": prefix, "num_last": args.num_last, "model_dir": args.model_dir}))
  return 0


if __name__ == "__main__":
  sys.exit(main())
