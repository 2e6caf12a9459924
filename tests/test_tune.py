"""t2t-lite-tune: ranged hparams sample inside their ranges and refuse what their fields refuse;
a worker whose running trial another worker failed as stale stops its trainer and goes on; and
one study of real t2t-lite-train trials on algorithmic_reverse (transformer_tiny, 5 steps a
trial) through the tool's processes, in steps that follow from each other, never from the
machine's speed: a worker's trial pruned at its first evaluation, far from its budget; a tuner
that waits for the trial another worker (this test, through the storage) runs beside it; a
tuner SIGKILLed mid-trial (its trainer dies with it) whose study the same command resumes.
One study for all those assertions: a trial is a TensorFlow process of 15-20 s on a CPU.
"""
import os
import shlex
import signal
import sqlite3
import subprocess
import sys
import threading
import time

import optuna
import pytest
from optuna.trial import TrialState

from conftest import file_hashes
from t2t_lite import registry, search_space
from t2t_lite.bin import train as train_cli
from t2t_lite.search_space import Choice, FloatRange, IntRange, SearchSpace
from t2t_lite.train.train_config import TrainConfig
from t2t_lite.tune import results, studies, trials

TUNE = [sys.executable, "-m", "t2t_lite.bin.tune"]
TINY = ["--problem=algorithmic_reverse", "--hparams=transformer_tiny",
        "--ranged_hparams=transformer_tiny_range", "--trials=3", "--heartbeat_seconds=1",
        "--eval_every=5", "--eval_steps=1", "--eval_decode_examples=0", "--log_every=5",
        "--noxla", "--static_shapes", "--mixed_precision=none"]


def test_a_ranged_set_samples_only_inside_its_ranges():
  space = SearchSpace(d_model=Choice([32, 64, 128]), warmup_steps=IntRange(10, 1000, log=True),
                      num_layers=IntRange(1, 7, step=2), dropout=FloatRange(0.0, 0.3),
                      learning_rate=FloatRange(1e-3, 3.0, log=True))
  study = optuna.create_study(sampler=studies.TrialSeededTPE(seed=3))
  drawn = []
  for _ in range(60):  # 10 random, then TPE's own draws around the best values told
    trial = study.ask()
    values = space.sample(trial)
    study.tell(trial, values["dropout"] + values["learning_rate"])
    drawn.append(values)
  assert {v["d_model"] for v in drawn} <= {32, 64, 128}
  assert all(type(v["warmup_steps"]) is int and 10 <= v["warmup_steps"] <= 1000 for v in drawn)
  assert {v["num_layers"] for v in drawn} <= {1, 3, 5, 7}
  assert all(0.0 <= v["dropout"] <= 0.3 and 1e-3 <= v["learning_rate"] <= 3.0 for v in drawn)
  assert len({v["learning_rate"] for v in drawn}) == 60  # each trial its own draw
  # The registered sets hold only values their fields take (checked as the tool checks them).
  options = {"ema_decay": lambda v: TrainConfig(model_dir="m", ema_decay=v)}
  for name in registry.RANGED_HPARAMS.names():
    registry.get_ranged_hparams(name).check(options)


def test_a_range_over_an_unknown_field_or_values_it_refuses_is_refused():
  options = {"ema_decay": lambda v: TrainConfig(model_dir="m", ema_decay=v)}
  with pytest.raises(search_space.SearchSpaceError, match="did you mean 'dropout'"):
    SearchSpace(dropuot=FloatRange(0.1, 0.3)).check(options)
  with pytest.raises(search_space.SearchSpaceError, match=r"dropout must be in \[0, 1\)"):
    SearchSpace(dropout=FloatRange(0.5, 1.0)).check(options)
  with pytest.raises(search_space.SearchSpaceError, match=r"ema_decay must be in \(0, 1\)"):
    SearchSpace(ema_decay=FloatRange(0.9, 1.0)).check(options)
  with pytest.raises(search_space.SearchSpaceError, match="not an int"):
    IntRange(0, 10, log=True)


def test_queued_values_are_parsed_by_their_ranges_and_refused_outside_them():
  space = SearchSpace(d_model=Choice([128, 256]), warmup_steps=IntRange(100, 1000, step=100),
                      dropout=FloatRange(0.1, 0.4), share=Choice([True, False]))
  assert space.values("d_model=256, warmup_steps=300,dropout=0.1,share=False") == {
      "d_model": 256, "warmup_steps": 300, "dropout": 0.1, "share": False}
  for text, message in [
      ("d_modle=256", "'d_modle' is not a ranged field; did you mean 'd_model'?"),
      ("d_model=512", r"'512' is not a value of the range Choice\(values=\(128, 256\)\)"),
      ("warmup_steps=350", "'350' is not a value of the range IntRange"),
      ("dropout=0.5", "'0.5' is not a value of the range FloatRange"),
      ("dropout=high", "'high' is not a value"), (" , ", "no name=value in")]:
    with pytest.raises(search_space.SearchSpaceError, match=message):
      space.values(text)


def test_the_median_pruner_prunes_once_its_startup_trials_have_finished():
  """A trial worse than the median at step 5 of two finished trials: pruned with 2 startup
  trials, not with Optuna's default of 5."""
  def pruned(startup_trials):
    study = optuna.create_study(direction="maximize", pruner=studies.make_pruner(
        "median", "maximize", startup_trials=startup_trials))
    for value in (30.0, 40.0):
      study.add_trial(optuna.trial.create_trial(value=value, intermediate_values={5: value}))
    trial = study.ask()
    trial.report(10.0, 5)
    return trial.should_prune()
  assert pruned(2) and not pruned(5)


def test_a_combination_the_hparams_refuse_is_a_pruned_trial_and_the_study_goes_on(tmp_path):
  setup = trials.TrialSetup(
      problem="algorithmic_reverse", hparams_set="transformer_tiny",
      space=SearchSpace(d_model=Choice([30, 33])), config=TrainConfig(model_dir="m"),
      metric="loss", study_dir=str(tmp_path / "study"))
  storage, study = _new_study(tmp_path)
  seen = []
  studies.run(study, storage, setup, 3, 1, report=lambda study, trial: seen.append(trial),
              log=print)
  assert [t.state for t in study.trials] == [TrialState.PRUNED] * 3 == [t.state for t in seen]
  assert all("not divisible by num_heads=4" in t.user_attrs["reason"] for t in study.trials)
  assert not (tmp_path / "study").exists()  # no trainer started


def _new_study(tmp_path):
  """(storage, study): a new study in a SQLite file of tmp_path, heartbeats every second."""
  storage = studies.open_storage(f"sqlite:///{tmp_path}/study.db", 1)
  return storage, optuna.create_study(study_name="study", storage=storage,
                                      sampler=studies.TrialSeededTPE(seed=1))


def _wait_for(condition, what, seconds=300):
  """-> condition()'s first true value, polled every 0.1 s. The events waited for follow from
  what the test itself did; `seconds` only turns a hang (a bug) into a failure."""
  deadline = time.time() + seconds
  while not (value := condition()):
    assert time.time() < deadline, f"no {what} after {seconds} s: something hangs"
    time.sleep(0.1)
  return value


# A trainer that prints what the test feeds it: the test decides when each evaluation comes.
_SCRIPTED_TRAINER = "import sys\nfor line in sys.stdin:\n  print(line, end='', flush=True)"


def test_a_trial_failed_as_stale_by_another_worker_stops_its_trainer_and_the_study_goes_on(
    tmp_path, monkeypatch):
  """Another worker fails a live trial when its heartbeat comes late (a loaded or frozen
  machine). Optuna's optimize() then raised "Cannot tell a FAIL trial" and the tuner died with
  a traceback (issue 79's stall of this file's study fixture). The worker must instead stop
  that trial's trainer at its next evaluation and go on with the study: here it runs the
  retry of the same values, the study's one trial."""
  storage, study = _new_study(tmp_path)
  setup = trials.TrialSetup(
      problem="algorithmic_reverse", hparams_set="transformer_tiny",
      space=registry.get_ranged_hparams("transformer_tiny_range"),
      config=TrainConfig(model_dir="m"), metric="loss", study_dir=str(tmp_path / "study"))
  os.makedirs(setup.study_dir)
  started = []

  def start(args, log):
    started.append(subprocess.Popen([sys.executable, "-u", "-c", _SCRIPTED_TRAINER],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, text=True, bufsize=1))
    return started[-1]

  monkeypatch.setattr(trials, "_start", start)
  said = []
  worker = threading.Thread(target=studies.run, args=(
      study, storage, setup, 1, 1, lambda study, trial: said.append(
          results.trial_line("loss", trial)), said.append))
  worker.start()
  try:
    first = _wait_for(lambda: started and started[0], "trainer")
    first.stdin.write("eval at step 5: loss 2.0000\n")
    _wait_for(lambda: study.trials[0].intermediate_values == {5: 2.0}, "first report")
    # What another worker's optuna.storages.fail_stale_trials does to a trial it finds stale.
    stale = study.trials[0]
    storage.set_trial_state_values(
        storage.get_trial_id_from_study_id_trial_number(
            storage.get_study_id_from_name("study"), 0), TrialState.FAIL)
    optuna.storages.RetryHeartbeatStaleTrialCallback()(study, stale)
    first.stdin.write("eval at step 10: loss 1.9000\n")
    second = _wait_for(lambda: len(started) == 2 and started[1], "the retry's trainer")
    second.stdin.write("eval at step 5: loss 1.5000\n")
    second.stdin.close()
  finally:
    worker.join(timeout=300)
  assert not worker.is_alive()
  assert first.wait() == -signal.SIGTERM  # stopped at its second evaluation
  taken, retry = study.trials
  assert (taken.state, taken.user_attrs.get("reason")) == (TrialState.FAIL, None)
  assert list(taken.intermediate_values) == [5]
  assert retry.params == taken.params and retry.intermediate_values == {5: 1.5}
  # The scripted trainer kept no best model: the retry fails with that reason and counts.
  assert retry.state == TrialState.FAIL
  assert retry.user_attrs["reason"].endswith("trial_1 kept no best model by loss")
  assert said[0].startswith("trial 0: another worker failed it as stale (no heartbeat for 61 s)")
  assert said[1].startswith("trial 0  FAIL") and said[2].startswith("trial 1  FAIL")


def _load(study_dir):
  return optuna.load_study(study_name="study", storage=f"sqlite:///{study_dir}/study.db").trials


def _children(pid):
  with open(f"/proc/{pid}/task/{pid}/children") as f:
    return [int(child) for child in f.read().split()]


def _alive(pid):
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
  except FileNotFoundError:
    return False


@pytest.fixture(scope="module")
def study(reverse_dir, tmp_path_factory):
  """One study, built in steps that each start when the last has ended:
  1. Worker B: a 1000-step trial (trial 0) and a threshold no trial meets: pruned at its first
     evaluation.
  2. This process, as a second worker through the storage, runs trial 1 (heartbeats and all)
     while tuner A, asked for 3 trials with one queued, runs trial 2 and then waits for
     trial 1; trial 1 ends (a loss worse than any) once A says it waits.
  3. A tuner asked for a 4th trial, of 100,000 steps, is SIGKILLed once its trial 3 trains (its
     trainer dies with it). Its heartbeat is set an hour back, as a dead worker's is once the
     grace period has passed, and A's command for 4 trials resumes the study.
  -> what each process said and did."""
  study_dir = tmp_path_factory.mktemp("tune") / "study"
  common = [*TUNE, *TINY, f"--data_dir={reverse_dir}", f"--study_dir={study_dir}"]
  command = [*common, "--train_steps=5", "--pruner=none",
             "--enqueue=d_model=64,learning_rate=0.5"]
  pruned = subprocess.run([*common, "--train_steps=1000", "--pruner=threshold",
                           "--prune_threshold=0", "--trials=1"], capture_output=True, text=True,
                          timeout=600)

  storage = studies.open_storage(studies.default_storage(study_dir), 1)
  own = optuna.load_study(study_name="study", storage=storage)
  trial = own.ask()
  registry.get_ranged_hparams("transformer_tiny_range").sample(trial)
  waited = []
  with studies.heartbeats(storage, own, trial, 1):
    beside = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True)
    for line in beside.stderr:
      waited.append(line)
      if line.startswith("2 of 3 trials finished, 1 running elsewhere"):
        break
    own.tell(trial, 99.0)
  beside_outputs = beside.communicate(timeout=300)

  longer = [*common, "--trials=4", "--train_steps=100000", "--pruner=none"]
  killed = subprocess.Popen(longer, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  log = study_dir / "trial_3.log"
  _wait_for(lambda: log.exists() and "step 5/100000" in log.read_text(), "trial 3 training")
  trainer = _children(killed.pid)[0]
  killed.kill()
  killed.wait()
  _wait_for(lambda: not _alive(trainer), "the trainer's end with its tuner")
  before_resume = _load(study_dir)
  with sqlite3.connect(study_dir / "study.db") as db:
    db.execute("UPDATE trial_heartbeats SET heartbeat = datetime(heartbeat, '-1 hour')")
  resumed = subprocess.run([*command, "--trials=4"], capture_output=True, text=True,
                           timeout=600)
  return {"dir": study_dir, "command": command, "pruned": pruned, "waited": waited,
          "beside": beside_outputs, "beside_code": beside.returncode,
          "before_resume": before_resume, "resumed": resumed, "trials": _load(study_dir)}


def _ran(stderr):
  """The numbers of the trials a tuner reported (its "trial N  STATE ..." lines)."""
  return {int(line.split()[1]) for line in stderr.splitlines()
          if line.startswith("trial ") and line.split()[1].isdigit()}


def test_sigkill_of_the_tuner_then_resume_keeps_finished_trials_and_finishes(study):
  resumed = study["resumed"]
  assert resumed.returncode == 0, resumed.stderr[-2000:]
  trials_ = study["trials"]
  # Trial 3 was the killed tuner's (its trainer ended with it: the fixture waited for that).
  assert study["before_resume"][3].state == TrialState.RUNNING
  # Failed once stale, and run again with its values as trial 4 by the resumed tuner.
  assert trials_[3].state == TrialState.FAIL and "reason" not in trials_[3].user_attrs
  assert (trials_[4].state, trials_[4].params) == (TrialState.COMPLETE, trials_[3].params)
  assert "--train_steps=5" in trials_[4].user_attrs["args"]
  for kept, now in zip(study["before_resume"][:3], trials_[:3]):
    assert (now.state, now.value, now.params) == (kept.state, kept.value, kept.params)
  assert len(trials_) == 5 and sum(studies.is_finished(t) for t in trials_) == 4
  # The queued trial ran once, as A's trial 2; the command run again did not queue it again.
  assert [t.number for t in trials_ if t.params["learning_rate"] == 0.5] == [2]
  assert trials_[2].params["d_model"] == 64
  assert _ran(resumed.stderr) == {4}


def test_two_workers_share_one_sqlite_study(study):
  assert study["beside_code"] == 0, study["beside"][1][-2000:]
  mine, theirs = study["trials"][1:3]
  assert (mine.state, mine.value) == (TrialState.COMPLETE, 99.0)
  assert theirs.state == TrialState.COMPLETE and "args" in theirs.user_attrs
  # Side by side: A ran trial 2 while this worker's trial 1 ran, then waited for it.
  assert mine.datetime_start < theirs.datetime_complete < mine.datetime_complete
  assert study["waited"][-1].startswith("2 of 3 trials finished, 1 running elsewhere")
  assert _ran("".join(study["waited"]) + study["beside"][1]) == {2}
  assert [t.number for t in study["trials"]] == [0, 1, 2, 3, 4]
  logs = sorted(p.name for p in study["dir"].glob("trial_*.log"))
  assert logs == ["trial_0.log", "trial_2.log", "trial_3.log", "trial_4.log"]
  run_dirs = {p.name for p in study["dir"].iterdir() if p.is_dir()}
  assert run_dirs == {"trial_0", "trial_2", "trial_3", "trial_4"}


def test_a_pruned_trial_stops_before_its_budget(study):
  assert study["pruned"].returncode == 0, study["pruned"].stderr[-2000:]
  pruned = [t for t in study["trials"] if t.state == TrialState.PRUNED]
  assert [t.number for t in pruned] == [0] and _ran(study["pruned"].stderr) == {0}
  trial = pruned[0]
  assert list(trial.intermediate_values) == [5]
  assert trial.user_attrs["reason"] == "pruned at step 5"
  assert "--train_steps=1000" in trial.user_attrs["args"]
  log = (study["dir"] / f"trial_{trial.number}.log").read_text()
  done = [line for line in log.splitlines() if line.startswith("done: step ")]
  assert done and "(stopped by SIGTERM)" in done[0], log[-2000:]
  assert int(done[0].split()[2]) < 20


def test_the_study_ends_with_a_table_best_overrides_command_and_pictures(study):
  out = study["resumed"].stdout.splitlines()
  assert out[0].split() == ["trial", "state", "loss", "minutes", "values"]
  assert [line.split()[:2] for line in out[1:6]] == [
      [str(t.number), t.state.name] for t in study["trials"]]
  complete = [t for t in study["trials"] if t.state == TrialState.COMPLETE]
  best = min(complete, key=lambda t: t.value)
  assert best.number in (2, 4)  # a trial of A's, not this test's trial 1 (loss 99)
  assert f"best: trial {best.number}, loss {best.value:.4f}" in out
  overrides = search_space.hparams_overrides(best.params)
  assert f"best overrides: {overrides}" in out
  assert f"best training options: --ema_decay={best.params['ema_decay']}" in out
  again = [line for line in out if line.startswith("train it again: t2t-lite-train ")][0]
  args = train_cli.parse_args(shlex.split(again)[4:])
  assert (args.hparams_overrides, args.ema_decay) == (overrides, best.params["ema_decay"])
  assert args.model_dir == str(study["dir"] / f"trial_{best.number}_again")
  assert (args.train_steps, args.eval_every, args.xla) == (5, 5, False)
  for name in ("optimization_history.png", "param_importances.png"):
    assert f"wrote {study['dir'] / name}" in out
    assert (study["dir"] / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_input_is_one_line_and_writes_nothing(study, tmp_path):
  """An unknown ranged hparams, a study of another problem or problem settings, a storage that
  does not open, a queued trial's unknown field: the tuners run side by side (each imports
  TensorFlow for seconds)."""
  before = {root: file_hashes(root) for root in (tmp_path, study["dir"])}
  runs = [subprocess.Popen([*TUNE, *args], stderr=subprocess.PIPE, text=True) for args in (
      [*TINY, "--ranged_hparams=transformer_tiny_rnge", f"--study_dir={tmp_path}/new"],
      [*study["command"][3:], "--problem=algorithmic_copy"],
      [*study["command"][3:], "--problem_settings=train_size=50"],
      [*TINY, f"--study_dir={tmp_path}/new",
       f"--storage=sqlite:///{tmp_path}/missing/dir/study.db"],
      [*TINY, f"--study_dir={tmp_path}/new", "--enqueue=d_model=64", "--enqueue=d_modle=32"])]
  lines = []
  for run in runs:
    err = run.communicate(timeout=120)[1]
    assert run.returncode == 2, err[-2000:]
    lines.append([line for line in err.splitlines() if line.startswith("t2t-lite-tune")])
    assert len(lines[-1]) == 1 and lines[-1][0].startswith("t2t-lite-tune: error: "), err
  assert "unknown ranged hparams 'transformer_tiny_rnge'; did you mean " \
      "'transformer_tiny_range'" in lines[0][0]
  assert "is a study of problem 'algorithmic_reverse', not 'algorithmic_copy'" in lines[1][0]
  assert "is a study of problem_settings '', not 'train_size=50'" in lines[2][0]
  assert f"the storage sqlite:///{tmp_path}/missing/dir/study.db does not open" in lines[3][0]
  assert lines[4][0].endswith("'d_modle=32': 'd_modle' is not a ranged field; did you mean "
                              "'d_model'?")
  assert {root: file_hashes(root) for root in before} == before
  assert os.listdir(tmp_path) == []
