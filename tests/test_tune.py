"""t2t-lite-tune: ranged hparams sample inside their ranges and refuse what their fields refuse;
and one study of real t2t-lite-train trials on algorithmic_reverse (transformer_tiny, 5 steps a
trial) through the tool's processes: two workers share its SQLite file (one's trial pruned at
its first evaluation, far from its budget), the other is SIGKILLed mid-trial (its trainer dies
with it) and the same command resumes the study to its 3 trials. One study for all those
assertions: a trial is a TensorFlow process of 15-20 s on a CPU.
"""
import os
import shlex
import signal
import subprocess
import sys
import time

import optuna
import pytest
from optuna.trial import TrialState

from conftest import file_hashes
from t2t_lite import registry, search_space
from t2t_lite.bin import train as train_cli
from t2t_lite.search_space import Choice, FloatRange, IntRange, SearchSpace
from t2t_lite.train.train_config import TrainConfig
from t2t_lite.tune import studies, trials

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
      metric="loss", study_dir=str(tmp_path))
  study = optuna.create_study(sampler=studies.TrialSeededTPE(seed=1))
  seen = []
  studies.run(study, setup, 3, 1, report=lambda study, trial: seen.append(trial), log=print)
  assert [t.state for t in study.trials] == [TrialState.PRUNED] * 3 == [t.state for t in seen]
  assert all("not divisible by num_heads=4" in t.user_attrs["reason"] for t in study.trials)
  assert list(tmp_path.iterdir()) == []  # no trainer started


def _children(pid):
  with open(f"/proc/{pid}/task/{pid}/children") as f:
    return [int(child) for child in f.read().split()]


def _alive(pid):
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has ended
  except FileNotFoundError:
    return False


def _wait_for(condition, seconds, what):
  """-> condition()'s first true value, polled every 0.2 s for up to `seconds`."""
  deadline = time.time() + seconds
  while not (value := condition()):
    assert time.time() < deadline, f"waited {seconds} s for {what}"
    time.sleep(0.2)
  return value


def _load(study_dir):
  return optuna.load_study(study_name="study", storage=f"sqlite:///{study_dir}/study.db").trials


@pytest.fixture(scope="module")
def study(reverse_dir, tmp_path_factory):
  """Worker B (1 trial of 1000 steps, and a threshold no trial meets: pruned at its first
  evaluation) starts trial 0, then tuner A (3 trials of 5 steps) joins it on one SQLite file; A
  is SIGKILLed while the trial after its first trains, then the same command resumes the study.
  B's trainer is held (SIGSTOP) until A's first trainer runs: left to the machine's load, B's
  trial could end before A asks, and the two would not run side by side.
  -> what each process said and did."""
  study_dir = tmp_path_factory.mktemp("tune") / "study"
  common = [*TUNE, *TINY, f"--data_dir={reverse_dir}", f"--study_dir={study_dir}"]
  command = [*common, "--train_steps=5", "--pruner=none",
             "--enqueue=d_model=64,learning_rate=0.5"]
  pruned = [*common, "--train_steps=1000", "--pruner=threshold", "--prune_threshold=0",
            "--trials=1"]
  other = subprocess.Popen(pruned, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  held = _wait_for(lambda: _children(other.pid), 120, "B's trainer")[0]
  os.kill(held, signal.SIGSTOP)
  first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  try:
    _wait_for(lambda: _children(first.pid), 120, "A's first trainer")
  finally:
    os.kill(held, signal.SIGCONT)
  progress = []
  for line in first.stderr:
    progress.append(line)
    if line.startswith("trial "):
      break
  before_kill = _load(study_dir)
  trainer = _wait_for(lambda: _children(first.pid), 60, "A's second trainer")[0]
  first.kill()
  first.wait()
  resumed = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
  _wait_for(lambda: not _alive(trainer), 60, "the trainer to end with its tuner")
  outputs = [worker.communicate(timeout=300) for worker in (resumed, other)]
  return {"dir": study_dir, "command": command, "first_progress": progress,
          "before_kill": before_kill, "outputs": outputs,
          "codes": [worker.returncode for worker in (resumed, other)],
          "trials": _load(study_dir)}


def test_sigkill_of_the_tuner_then_resume_keeps_finished_trials_and_finishes(study):
  assert study["codes"] == [0, 0], [err[-2000:] for _, err in study["outputs"]]
  trials_ = study["trials"]
  number = int(study["first_progress"][-1].split()[1])  # A's first trial
  assert study["first_progress"][-1].startswith(f"trial {number}  COMPLETE  loss ")
  kept = study["before_kill"][number]
  assert (trials_[number].state, trials_[number].value, trials_[number].params) == (
      TrialState.COMPLETE, kept.value, kept.params)
  # Trial 2 was A's when it was killed: failed once stale, and run again with its values as
  # trial 3 by the resumed tuner. 3 finished trials in all, as asked.
  assert trials_[2].state == TrialState.FAIL and "reason" not in trials_[2].user_attrs
  assert (trials_[3].state, trials_[3].params) == (TrialState.COMPLETE, trials_[2].params)
  assert len(trials_) == 4 and sum(studies.is_finished(t) for t in trials_) == 3
  # A's first trial was the one it queued; the resumed command did not queue it again.
  assert [t.number for t in trials_ if t.params["learning_rate"] == 0.5] == [number]
  assert trials_[number].params["d_model"] == 64
  ran = {int(line.split()[1]) for line in study["outputs"][0][1].splitlines()
         if line.startswith("trial ")}
  assert ran == {3}


def test_two_workers_share_one_sqlite_study(study):
  first, second = study["trials"][:2]
  assert {first.state, second.state} == {TrialState.COMPLETE, TrialState.PRUNED}
  # Side by side: each started before the other ended.
  assert first.datetime_start < second.datetime_complete
  assert second.datetime_start < first.datetime_complete
  ran = {int(line.split()[1]) for line in study["outputs"][1][1].splitlines()
         if line.startswith("trial ")}
  assert ran == {t.number for t in study["trials"] if t.state == TrialState.PRUNED}
  assert [t.number for t in study["trials"]] == [0, 1, 2, 3]
  logs = sorted(p.name for p in study["dir"].glob("trial_*.log"))
  assert logs == ["trial_0.log", "trial_1.log", "trial_2.log", "trial_3.log"]
  run_dirs = {p.name for p in study["dir"].iterdir() if p.is_dir()}
  assert {"trial_0", "trial_1", "trial_3"} <= run_dirs <= {"trial_0", "trial_1", "trial_2",
                                                           "trial_3"}


def test_a_pruned_trial_stops_before_its_budget(study):
  pruned = [t for t in study["trials"] if t.state == TrialState.PRUNED]
  assert len(pruned) == 1
  trial = pruned[0]
  assert list(trial.intermediate_values) == [5]
  assert trial.user_attrs["reason"] == "pruned at step 5"
  assert "--train_steps=1000" in trial.user_attrs["args"]
  log = (study["dir"] / f"trial_{trial.number}.log").read_text()
  done = [line for line in log.splitlines() if line.startswith("done: step ")]
  assert done and "(stopped by SIGTERM)" in done[0], log[-2000:]
  assert int(done[0].split()[2]) < 20


def test_the_study_ends_with_a_table_best_overrides_command_and_pictures(study):
  out = study["outputs"][0][0].splitlines()
  assert out[0].split() == ["trial", "state", "loss", "minutes", "values"]
  assert [line.split()[:2] for line in out[1:5]] == [
      [str(t.number), t.state.name] for t in study["trials"]]
  complete = [t for t in study["trials"] if t.state == TrialState.COMPLETE]
  best = min(complete, key=lambda t: t.value)
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
