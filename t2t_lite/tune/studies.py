"""A study: its Optuna storage, its sampler and pruner, and the loop that runs trials until the
study holds the number asked for.

- Storage: any Optuna storage URL (SQLite by default, `<study_dir>/study.db`); several worker
  processes, on one machine or on several pointed at one PostgreSQL or MySQL URL, share a study
  by its name. The study records its problem, hparams set, ranged hparams and metric (user
  attributes), and a run that names others is refused before anything is written.
- Resume: each running trial records a heartbeat; a trial whose worker died (SIGKILL, a lost
  machine) goes stale after the grace period, is marked failed by the next worker that looks,
  and is run again with the same values (a new trial number and run directory).
- `trials`: the study's total of finished trials (complete, pruned, or failed with a reason:
  a trainer that exited with an error), whichever workers ran them; a worker runs trials while
  the finished and running ones number fewer, waits while the running ones would make up the
  total, and returns when it is reached. A resumed study thus runs only what is missing.
- Queued trials (--enqueue): values a user knows (the current recipe) are tried first, the
  fields they leave out drawn; the sampler then starts from what they measured.
- Sampling: TPE (Optuna's), seeded for each trial from the study's seed and the trial's number:
  the same seed gives the same study, a resumed one does not draw its first values again, and
  workers that start together do not draw the same ones.
"""
import functools
import os
import re
import time
import warnings

import optuna
from optuna.trial import TrialState

from t2t_lite import errors
from t2t_lite.errors import T2TLiteError
from t2t_lite.tune import trials

STORAGE_FILE = "study.db"  # The default storage, SQLite in the study directory.
# Workers that start together on a new database race to create its tables (the loser's
# CREATE TABLE fails): a storage that does not open is tried again, twice.
_OPEN_ATTEMPTS = 3
STUDY_ATTRS = ("problem", "hparams", "ranged_hparams", "metric", "problem_settings")


class StudyError(T2TLiteError, ValueError):
  """A storage that does not open, a study of other settings, or a bad pruner setting."""


class SurplusTrial(T2TLiteError):
  """A trial created while the study's total was already made up by the finished and running
  ones (two workers asked in the same instant): it fails at once and does not count."""


def _hidden_password(url):
  return re.sub(r"(://[^:/@]+:)[^@]*@", r"\1***@", url)


def default_storage(study_dir):
  return f"sqlite:///{os.path.abspath(os.path.join(study_dir, STORAGE_FILE))}"


def open_storage(url, heartbeat_seconds):
  """The Optuna storage at `url`, with heartbeats every `heartbeat_seconds` (a trial is stale
  after twice that) and stale trials run again."""
  kwargs = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}
  for attempt in range(_OPEN_ATTEMPTS):
    try:
      with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.storages.RDBStorage(
            url, engine_kwargs=kwargs, heartbeat_interval=heartbeat_seconds,
            heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback())
    except Exception as e:  # Whatever the URL's driver raises (a missing module, a refused
      # connection, a file that cannot be made): the one-line error names the URL and why.
      why = errors.reason(e)
      if attempt + 1 < _OPEN_ATTEMPTS:
        time.sleep(1)
  raise StudyError(f"the storage {_hidden_password(url)} does not open: {why}")


class TrialSeededTPE(optuna.samplers.BaseSampler):
  """Optuna's TPE sampler, seeded anew for each trial with (seed, trial number)."""

  def __init__(self, seed):
    self.seed = seed
    self._tpe = self._seeded(0)

  def _seeded(self, number):
    with warnings.catch_warnings():  # constant_liar (workers' running trials count) is new.
      warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
      return optuna.samplers.TPESampler(seed=(self.seed * 1_000_003 + number) % 2**32,
                                        constant_liar=True)

  def before_trial(self, study, trial):
    self._tpe = self._seeded(trial.number)
    self._tpe.before_trial(study, trial)

  def infer_relative_search_space(self, study, trial):
    return self._tpe.infer_relative_search_space(study, trial)

  def sample_relative(self, study, trial, search_space):
    return self._tpe.sample_relative(study, trial, search_space)

  def sample_independent(self, study, trial, param_name, param_distribution):
    return self._tpe.sample_independent(study, trial, param_name, param_distribution)

  def after_trial(self, study, trial, state, values):
    self._tpe.after_trial(study, trial, state, values)


def make_pruner(name, direction, warmup_steps=0, threshold=None, startup_trials=5):
  """Optuna's pruner `name`: median (a trial worse than the median of the earlier
  ones at the same step, once `startup_trials` have finished), hyperband, threshold (a value
  worse than `threshold`), none. None before `warmup_steps`."""
  if name == "threshold":
    if threshold is None:
      raise StudyError("--pruner=threshold needs --prune_threshold")
    bound = {"lower" if direction == "maximize" else "upper": threshold}
    return optuna.pruners.ThresholdPruner(**bound, n_warmup_steps=warmup_steps)
  return {"median": lambda: optuna.pruners.MedianPruner(n_startup_trials=startup_trials,
                                                        n_warmup_steps=warmup_steps),
          "hyperband": lambda: optuna.pruners.HyperbandPruner(min_resource=max(1, warmup_steps)),
          "none": optuna.pruners.NopPruner}[name]()


def open_study(storage, name, attrs, direction, sampler, pruner):
  """The study `name` of `storage`, made with `attrs` ({STUDY_ATTRS: value}) when new; one of
  other attrs is refused (nothing written)."""
  try:
    study = optuna.load_study(study_name=name, storage=storage, sampler=sampler, pruner=pruner)
  except KeyError:  # No such study yet.
    study = optuna.create_study(study_name=name, storage=storage, sampler=sampler,
                                pruner=pruner, direction=direction, load_if_exists=True)
  stored = study.user_attrs
  for key in STUDY_ATTRS:
    if key not in stored:  # A new study, made here or by a worker that started with this one.
      study.set_user_attr(key, attrs[key])
  for key in STUDY_ATTRS:
    if study.user_attrs.get(key) != attrs[key]:
      raise StudyError(f"the study {name!r} in {_hidden_password(storage.url)} is a study of "
                       f"{key} {study.user_attrs.get(key)!r}, not {attrs[key]!r}: tune in "
                       "another --study_dir (or --study_name)")
  return study


def enqueue(study, queued):
  """Queues a trial for each {name: value} of `queued` (in order) that no trial of the study
  has taken or been given already: the same command run again does not queue them twice."""
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # Optuna's "already queued" notice.
    for values in queued:
      study.enqueue_trial(values, skip_if_exists=True)


def is_finished(trial):
  """Whether `trial` counts toward the study's total: complete, pruned, or failed with a reason
  (not a stale trial, run again, nor a surplus one)."""
  return trial.state in (TrialState.COMPLETE, TrialState.PRUNED) or (
      trial.state == TrialState.FAIL and "reason" in trial.user_attrs)


def _objective(study, setup, total, trial):
  before = [t for t in study.get_trials(deepcopy=False) if t.number < trial.number]
  if sum(is_finished(t) or t.state in (TrialState.RUNNING, TrialState.WAITING)
         for t in before) >= total:
    trial.set_user_attr("surplus", True)
    raise SurplusTrial(f"trial {trial.number}: the study already has {total} trials")
  return trials.run_trial(setup, trial)


def run(study, setup, total, heartbeat_seconds, report, log):
  """Runs trials of `setup` in `study` until it holds `total` finished ones; report(study,
  frozen_trial) after each trial this worker ran, log(line) while it waits for others."""
  objective = functools.partial(_objective, study, setup, total)
  waiting = False
  while True:
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
      optuna.storages.fail_stale_trials(study)
    states = [(is_finished(t), t.state) for t in study.get_trials(deepcopy=False)]
    finished = sum(done for done, _ in states)
    running = sum(state == TrialState.RUNNING for _, state in states)
    if finished >= total:
      return
    if finished + running < total:
      study.optimize(objective, n_trials=1, catch=(trials.TrialFailed, SurplusTrial),
                     callbacks=[report])
      waiting = False
      continue
    if not waiting:
      log(f"{finished} of {total} trials finished, {running} running elsewhere (or stale: "
          f"failed {2 * heartbeat_seconds} s after their worker's last heartbeat): waiting")
      waiting = True
    time.sleep(heartbeat_seconds)
