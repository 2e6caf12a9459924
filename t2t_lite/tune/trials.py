"""One trial of a study: the values its sampler drew, run as an ordinary t2t-lite-train process
(its own run directory `<study_dir>/trial_<number>` and output `trial_<number>.log`, its own
time budget); each evaluation's dev metric reported to the pruner as the trainer prints it, and
the trial's value read from the run's best/best.json.

The tuner follows the trainer's "eval at step N:" lines on its stdout rather than the run's
eval/ TensorBoard scalars: a line is there the moment the evaluation ends, while a summary
writer flushes its event file only now and then (every 2 minutes by default), which would
leave the pruner that far behind.
"""
import ctypes
import dataclasses
import os
import shlex
import signal
import subprocess
import sys

import optuna

from t2t_lite import search_space
from t2t_lite.errors import RunFailure, T2TLiteError
from t2t_lite.registry import get_hparams
from t2t_lite.rundir import run_files
from t2t_lite.search_space import SearchSpace
from t2t_lite.train import training_log
from t2t_lite.train.train_config import TrainConfig

PR_SET_PDEATHSIG = 1  # prctl(2): the signal a child gets when the thread that forked it ends.


class TrialFailed(RunFailure):
  """A trainer that exited with an error, or a run that kept no best model: the trial fails
  (recorded with the reason; the study goes on)."""


class TrialTakenOver(T2TLiteError):
  """This worker's running trial was failed as stale by another worker (its heartbeat came too
  late): its trainer is stopped, and the trial runs again as a new one."""


@dataclasses.dataclass(frozen=True)
class TrialSetup:
  """What every trial of a study shares: the trainer's flags but the sampled ones.

  `config` holds the study's training options (model_dir is each trial's); `metric` is the
  evaluation metric the trials are measured by ("dev_bleu", "loss", ...)."""
  problem: str
  hparams_set: str
  space: SearchSpace
  config: TrainConfig
  metric: str
  study_dir: str
  data_dir: str = None
  problem_settings: str = ""


def trial_dir(study_dir, number):
  return os.path.join(study_dir, f"trial_{number}")


def config_flags(config):
  """t2t-lite-train's flags for the fields of `config` that are not their defaults."""
  flags = []
  for field in dataclasses.fields(config):
    value = getattr(config, field.name)
    if value == field.default:
      continue
    if isinstance(value, bool):
      flags.append(f"--{field.name}" if value else f"--no{field.name}")
    else:
      flags.append(f"--{field.name}={value}")
  return flags


def train_args(setup, model_dir, values):
  """t2t-lite-train's arguments for a run of `values` ({field: value}, hparams and training
  options) in `model_dir`. Raises a T2TLiteError when the combination is refused."""
  overrides = search_space.hparams_overrides(values)
  get_hparams(setup.hparams_set, overrides)  # The checks between fields (d_model, num_heads).
  config = dataclasses.replace(setup.config, model_dir=model_dir,
                               **search_space.training_options(values))
  args = [f"--problem={setup.problem}", f"--hparams={setup.hparams_set}"]
  args += [f"--hparams_overrides={overrides}"] if overrides else []
  args += [f"--data_dir={setup.data_dir}"] if setup.data_dir else []
  args += [f"--problem_settings={setup.problem_settings}"] if setup.problem_settings else []
  return args + config_flags(config)


def command(args):
  """The shell command of t2t-lite-train with `args`."""
  return shlex.join(["t2t-lite-train", *args])


def run_trial(setup, trial):
  """Runs `trial` (an optuna.Trial) to its end: its value (the run's best metric), or
  optuna.TrialPruned (a combination the hparams or options refuse, or the pruner's decision:
  the trainer is stopped with SIGTERM, which saves and exits), or TrialFailed. The reason is
  the trial's user attribute "reason"."""
  values = setup.space.sample(trial)
  model_dir = trial_dir(setup.study_dir, trial.number)
  try:
    args = train_args(setup, model_dir, values)
  except T2TLiteError as e:
    trial.set_user_attr("reason", f"refused: {e}")
    raise optuna.TrialPruned(f"refused: {e}") from None
  trial.set_user_attr("args", args)
  # Line-buffered: `tail -f trial_<n>.log` follows the trainer as it prints.
  with open(f"{model_dir}.log", "w", buffering=1) as log:
    code, pruned_at, last_line = _follow(_start(args, log), trial, setup.metric, log)
  if pruned_at is not None:
    trial.set_user_attr("reason", f"pruned at step {pruned_at}")
    raise optuna.TrialPruned(f"pruned at step {pruned_at}")
  if code:
    raise _failed(trial, f"t2t-lite-train exited with status {code}: {last_line}")
  record = run_files.read_best_record(model_dir)
  if not record or record["metric"] != setup.metric:
    raise _failed(trial, f"{model_dir} kept no best model by {setup.metric}")
  return record["value"]


def _failed(trial, why):
  trial.set_user_attr("reason", why)
  return TrialFailed(why)


def _start(args, log):
  """The trainer process, its stdout and stderr one pipe (its log), ended by the kernel when
  this process ends however it ends (SIGKILL too): Linux's parent-death signal, SIGTERM (the
  trainer saves and exits)."""
  libc = ctypes.CDLL(None, use_errno=True) if sys.platform.startswith("linux") else None
  parent = os.getpid()

  def die_with_parent():
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:  # The parent died before prctl: the signal will not come.
      os.kill(os.getpid(), signal.SIGTERM)

  log.write(f"{command(args)}\n")
  log.flush()
  return subprocess.Popen(
      [sys.executable, "-m", "t2t_lite.bin.train", *args], stdout=subprocess.PIPE,
      stderr=subprocess.STDOUT, text=True, bufsize=1, preexec_fn=libc and die_with_parent)


def _follow(process, trial, metric, log):
  """Copies the trainer's output to `log`, reports each evaluation's `metric` to `trial` and
  stops the trainer (SIGTERM) when the pruner says: (exit status, step pruned at or None,
  its one-line error or else its last line of output). A trial that another worker has failed
  as stale meanwhile (its report refused) stops its trainer too: TrialTakenOver."""
  pruned_at, last_line, error, taken_over = None, "", "", False
  try:
    for line in process.stdout:
      log.write(line)
      last_line = line.strip() or last_line
      if line.startswith("t2t-lite-train: error:"):  # The trainer's one-line error.
        error = line.strip()
      evaluation = training_log.parse_eval_line(line)
      if pruned_at is None and not taken_over and evaluation and metric in evaluation[1]:
        step, metrics = evaluation
        try:
          trial.report(metrics[metric], step)
        except optuna.exceptions.UpdateFinishedTrialError:  # Another worker failed it as stale.
          taken_over = True
          process.send_signal(signal.SIGTERM)
          continue
        if trial.should_prune():
          pruned_at = step
          process.send_signal(signal.SIGTERM)
    code = process.wait()
    if taken_over:
      raise TrialTakenOver(f"trial {trial.number} was failed as stale by another worker")
    return code, pruned_at, error or last_line
  finally:
    if process.poll() is None:  # Interrupted (Ctrl-C): the trainer saves and exits too.
      process.send_signal(signal.SIGTERM)
      process.wait()
