"""t2t-lite-tune: search ranged hparams with trials that are ordinary t2t-lite-train runs.

  t2t-lite-tune --problem=multi30k_ende --hparams=transformer_base \\
      --ranged_hparams=transformer_multi30k_range --data_dir=~/t2t/data/multi30k_ende \\
      --study_dir=~/t2t/studies/multi30k --trials=30 --train_minutes=40 --eval_every=500

Each trial trains in <study_dir>/trial_<number> (its output in trial_<number>.log) with the
hparams set, the trial's sampled overrides and the training flags given here (the same for
every trial: --train_minutes is each trial's budget); its dev metric goes to the pruner at
every evaluation and its value is the run's best (best/best.json). The study lives in an Optuna
storage (--storage; SQLite in study_dir by default): re-running the same command resumes it,
and workers on several machines given one PostgreSQL or MySQL URL share it. --trials is the
study's total. At the end: a table of trials, the best overrides, the t2t-lite-train command
that trains them again, and optimization_history.png / param_importances.png in study_dir.
Bad input exits with status 2 and a one-line message, having written nothing.
"""
import argparse
import dataclasses
import logging
import os
import sys

from t2t_lite.bin import cli, flags
from t2t_lite.train.train_config import TrainConfig, TrainerError

# The training options every trial shares, as t2t-lite-train's flags: all but the run directory
# (each trial's own).
_TRAIN_OPTIONS = [field.name for field in dataclasses.fields(TrainConfig)
                  if field.name != "model_dir"]


def parse_args(argv=None):
  parser = cli.ArgumentParser(
      prog="t2t-lite-tune", description=__doc__.split("\n\n")[0],
      formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  add = parser.add_argument
  add("--problem", help="registered problem to tune on (see --list)")
  add("--hparams", default="transformer_base", help="registered hparams set the trials start "
                                                    "from (see --list)")
  add("--ranged_hparams", help="registered ranged hparams (see --list): the fields searched and "
                               "their ranges, e.g. transformer_multi30k_range")
  add("--data_dir", help="prepared data (t2t-lite-datagen); default: t2t-lite-train's")
  add("--study_dir", help="the trials' run directories and logs, the pictures, and the SQLite "
                          "storage unless --storage")
  add("--study_name", default=None, help="the study's name in its storage (default: the last "
                                         "part of --study_dir)")
  add("--storage", default=None,
      help="Optuna storage URL, e.g. postgresql://user:password@host/db to share a study between "
           "machines (default: sqlite:///<study_dir>/study.db)")
  add("--trials", type=int, default=20, help="finished trials the study holds in total, whichever "
                                             "worker ran them (a resumed study runs the rest)")
  add("--enqueue", action="append", default=[], metavar="NAME=VALUE,...",
      help="a trial to run before the sampled ones, with these values of ranged fields (the "
           "others drawn), e.g. a recipe known to be good; repeatable, in order. A value "
           "already queued or tried is not queued again (re-running the command resumes)")
  add("--sampler_seed", type=int, default=1, help="seed of the TPE sampler (with the trial's "
                                                  "number)")
  add("--pruner", default="median", choices=("median", "hyperband", "threshold", "none"),
      help="Optuna pruner stopping trials whose evaluations are hopeless: median (worse than the "
           "median of earlier trials at the same step), hyperband, threshold "
           "(--prune_threshold), none")
  add("--prune_threshold", type=float, default=None,
      help="--pruner=threshold: prune a trial whose dev metric is below this (above it for a "
           "loss)")
  add("--pruner_warmup_steps", type=int, default=0, help="prune no trial before this step")
  add("--pruner_startup_trials", type=int, default=5,
      help="--pruner=median: prune nothing until this many trials have finished (Optuna's "
           "default 5; fewer when each trial costs many minutes)")
  add("--heartbeat_seconds", type=int, default=60,
      help="a running trial's heartbeat; a trial silent for this plus 60 s (its worker died; "
           "60 s: how long a heartbeat may wait for the storage's lock) is run again. The same "
           "on every worker of a study")
  flags.add_fields(parser, TrainConfig, _TRAIN_OPTIONS)
  flags.add_problem_settings_flag(parser)
  add("--list", action="store_true",
      help="print the registered problems, hparams sets and ranged hparams, then exit")
  flags.add_verbose_flag(parser)
  args = parser.parse_args(argv)
  if not args.list and not (args.problem and args.ranged_hparams and args.study_dir):
    parser.error("--problem, --ranged_hparams and --study_dir are required (or --list)")
  if args.trials < 1 or args.heartbeat_seconds < 1:
    parser.error("--trials and --heartbeat_seconds must be >= 1")
  if args.pruner_startup_trials < 0:
    parser.error("--pruner_startup_trials must be >= 0")
  return args


def _setup(args):
  """The study's TrialSetup, attributes and direction, every name and value checked (nothing
  written). The checks that need no TensorFlow come before the imports that load it."""
  import t2t_lite
  space = t2t_lite.registry.get_ranged_hparams(args.ranged_hparams)
  config = TrainConfig(model_dir=args.study_dir, **{
      name: getattr(args, name) for name in _TRAIN_OPTIONS})
  if config.best_metric == "none":
    raise TrainerError("t2t-lite-tune measures trials by their best_metric: "
                       "--best_metric=none measures none")
  if config.best_metric == "auto":  # Resolved here: the trial commands say what they keep.
    config = dataclasses.replace(config, best_metric="dev_metric" if (
        config.eval_steps and config.eval_decode_examples) else "loss")
  space.check({name: (lambda value, name=name: dataclasses.replace(config, **{name: value}))
               for name in _TRAIN_OPTIONS})
  t2t_lite.get_hparams(args.hparams)
  settings = t2t_lite.problem_settings(args.problem, args.problem_settings)  # Checks the problem.
  from t2t_lite.train import model_selection
  from t2t_lite.tune import trials
  metric = model_selection.metric_name(config, t2t_lite.registry.PROBLEMS.get(args.problem),
                                       decodes=config.eval_decode_examples > 0)
  setup = trials.TrialSetup(
      problem=args.problem, hparams_set=args.hparams, space=space, config=config, metric=metric,
      study_dir=args.study_dir, data_dir=args.data_dir, problem_settings=args.problem_settings)
  attrs = {"problem": args.problem, "hparams": args.hparams,
           "ranged_hparams": args.ranged_hparams, "metric": metric,
           "problem_settings": ",".join(f"{k}={v}" for k, v in sorted(settings.items()))}
  return setup, attrs, "minimize" if model_selection.lower_is_better(metric) else "maximize"


def _study(args, queued, attrs, direction):
  """(The study, opened or made in its storage, the trials of --enqueue queued; the storage);
  the study directory made."""
  from t2t_lite.tune import studies
  pruner = studies.make_pruner(args.pruner, direction, args.pruner_warmup_steps,
                               args.prune_threshold, args.pruner_startup_trials)
  if not args.storage:
    os.makedirs(args.study_dir, exist_ok=True)  # The default storage lives in it.
  storage = studies.open_storage(args.storage or studies.default_storage(args.study_dir),
                                 args.heartbeat_seconds)
  name = args.study_name or os.path.basename(os.path.normpath(args.study_dir))
  study = studies.open_study(storage, name, attrs, direction,
                             studies.TrialSeededTPE(args.sampler_seed), pruner)
  os.makedirs(args.study_dir, exist_ok=True)
  studies.enqueue(study, queued)
  return study, storage


def main(argv=None):
  args = parse_args(argv)
  from t2t_lite.errors import T2TLiteError

  if args.list:
    cli.print_registered(ranged=True)
    return 0
  cli.configure_logging(args.verbose, logging.INFO, "%(message)s")
  try:
    setup, attrs, direction = _setup(args)
    queued = [setup.space.values(text) for text in args.enqueue]
  except T2TLiteError as e:
    return cli.fail("t2t-lite-tune", e, e.exit_status)
  import matplotlib
  matplotlib.use("Agg")  # The pictures are files; no display.
  import optuna
  optuna.logging.set_verbosity(optuna.logging.INFO if args.verbose else optuna.logging.ERROR)
  from t2t_lite.tune import results, studies

  def progress(line):
    print(line, file=sys.stderr, flush=True)

  try:
    study, storage = _study(args, queued, attrs, direction)
    studies.run(study, storage, setup, args.trials, args.heartbeat_seconds,
                report=lambda study, trial: trial.user_attrs.get("surplus") or progress(
                    results.trial_line(setup.metric, trial)), log=progress)
  except T2TLiteError as e:
    return cli.fail("t2t-lite-tune", e, e.exit_status)
  except KeyboardInterrupt:  # The trainer was stopped; its trial failed and does not count.
    return cli.fail("t2t-lite-tune", "interrupted: run the same command to resume the study", 130)
  print("\n".join(results.summary(study, args.study_dir)), flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main())
