"""A study: its Optuna storage, its sampler and pruner, and the loop that runs trials until the
study holds the number asked for.

- Storage: any Optuna storage URL (SQLite by default, `<study_dir>/study.db`); several worker
  processes, on one machine or on several pointed at one PostgreSQL or MySQL URL, share a study
  by its name. The study records its problem, hparams set, ranged hparams and metric (user
  attributes), and a run that names others is refused before anything is written.
- Resume: each running trial records a heartbeat; a trial whose worker died (SIGKILL, a lost
  machine) goes stale after the grace period, is marked failed by the next worker that looks,
  and is run again with the same values (a new trial number and run directory). A worker whose
  trial was failed so while it still ran (a heartbeat that came too late) stops that trial's
  trainer and goes on: the trial runs again elsewhere.
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
import contextlib
import os
import re
import threading
import time
import warnings

import optuna
from optuna.trial import TrialState

from t2t_lite import errors
from t2t_lite.errors import T2TLiteError
from t2t_lite.tune import trials

STORAGE_FILE = "study.db"  # The default storage, SQLite in the study directory.
# How long a write may wait for another process' lock on the storage (SQLite's busy timeout):
# a live worker's heartbeat can come this late, so a trial is stale only after its heartbeat
# interval and this. Optuna's default grace of twice the interval failed live trials of a
# loaded machine (issue 79: a tuner crashed with "Cannot tell a FAIL trial").
LOCK_SECONDS = 60
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


def stale_seconds(heartbeat_seconds):
  """How long after its last heartbeat a running trial counts as its worker's death."""
  return heartbeat_seconds + LOCK_SECONDS


def open_storage(url, heartbeat_seconds):
  """The Optuna storage at `url`, with heartbeats every `heartbeat_seconds` (a trial is stale
  after stale_seconds) and stale trials run again."""
  kwargs = {"connect_args": {"timeout": LOCK_SECONDS}} if url.startswith("sqlite") else {}
  for attempt in range(_OPEN_ATTEMPTS):
    try:
      with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.storages.RDBStorage(
            url, engine_kwargs=kwargs, heartbeat_interval=heartbeat_seconds,
            grace_period=stale_seconds(heartbeat_seconds), heartbeat_stale_trial_callback=optuna.storages.RetryHeartbeatStaleTrialCallback())
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


@contextlib.contextmanager
def heartbeats(storage, study, trial, seconds):
  """Records `trial`'s heartbeat in `storage` now and every `seconds` while the block runs."""
  trial_id = storage.get_trial_id_from_study_id_trial_number(
      storage.get_study_id_from_name(study.study_name), trial.number)
  stop = threading.Event()

  def beat():
    while True:
      storage.record_heartbeat(trial_id)
      if stop.wait(seconds):
        return

  thread = threading.Thread(target=beat, daemon=True)
  thread.start()
  try:
    yield
  finally:
    stop.set()
    thread.join()


def _run_one(study, storage, setup, total, heartbeat_seconds):
  """Asks the study for a trial, runs it with heartbeats and tells its end: the trial as stored
  (FrozenTrial), and whether another worker had already failed it as stale.

  This is Optuna's optimize() for one trial but for the tell: optimize() raises "Cannot tell a
  FAIL trial" when another worker has failed the trial meanwhile, while here the stored end
  stands (skip_if_finished)."""
  with warnings.catch_warnings():
    # "Heartbeat of storage is supposed to be used with Study.optimize": the heartbeats here.
    warnings.simplefilter("ignore", UserWarning)
    trial = study.ask()
  value, state, error = None, TrialState.COMPLETE, None
  with heartbeats(storage, study, trial, heartbeat_seconds):
    try:
      value = _objective(study, setup, total, trial)
    except optuna.TrialPruned:
      state = TrialState.PRUNED
    except (trials.TrialFailed, trials.TrialTakenOver, SurplusTrial):
      state = TrialState.FAIL
    except BaseException as e:  # Ctrl-C or a bug: the trial fails, and the error goes on.
      state, error = TrialState.FAIL, e
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", UserWarning)  # Optuna's "already finished" notice.
    frozen = study.tell(trial, value if state == TrialState.COMPLETE else None, state=state,
                        skip_if_finished=True)
  if error is not None:
    raise error
  taken_over = frozen.state == TrialState.FAIL and "reason" not in frozen.user_attrs and (
      not frozen.user_attrs.get("surplus"))
  return frozen, taken_over


def run(study, storage, setup, total, heartbeat_seconds, report, log):
  """Runs trials of `setup` in `study` (kept in `storage`, an RDBStorage with heartbeats) until
  it holds `total` finished ones; report(study, frozen_trial) after each trial this worker ran,
  log(line) while it waits for others or when another worker took over its trial."""
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
      frozen, taken_over = _run_one(study, storage, setup, total, heartbeat_seconds)
      if taken_over:
        log(f"trial {frozen.number}: another worker failed it as stale (no heartbeat for "
            f"{stale_seconds(heartbeat_seconds)} s); its trainer was stopped and its values "
            "run again as a new trial")
      report(study, frozen)
      waiting = False
      continue
    if not waiting:
      log(f"{finished} of {total} trials finished, {running} running elsewhere (or stale: "
          f"failed {stale_seconds(heartbeat_seconds)} s after their worker's last heartbeat): "
          "waiting")
      waiting = True
    time.sleep(heartbeat_seconds)
