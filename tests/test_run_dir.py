"""A run directory nothing corrupts: one trainer per model_dir, resume checks, damaged
checkpoints, pre-emption. Trainers run as t2t-lite-train processes, as a user starts them (runs
that tests only resume, decode, damage or compare with are trained in this process:
train_here)."""
import json
import os
import pathlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

import pytest
from conftest import file_hashes, train_in_process

import t2t_lite

TINY = "num_layers=1,d_model=32,d_ff=64,num_heads=2,batch_size=256,max_length=24,dropout=0.2"
ENV = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
ENV["CUDA_VISIBLE_DEVICES"] = ""
STEP_LINE = re.compile(r"^step (\d+)/\d+\s+loss ([0-9.]+)", re.M)


def train_cmd(model_dir, data_dir, steps, *extra, problem="algorithmic_reverse"):
  return [sys.executable, "-m", "t2t_lite.bin.train", f"--problem={problem}",
          "--hparams=transformer_tiny", f"--hparams_overrides={TINY}", f"--data_dir={data_dir}",
          f"--model_dir={model_dir}", f"--train_steps={steps}", "--eval_steps=0", "--noxla",
          "--log_every=1", "--seed=5", "--eval_decode_examples=0", *extra]


def train(model_dir, data_dir, steps, *extra, **kwargs):
  run = subprocess.run(train_cmd(model_dir, data_dir, steps, *extra, **kwargs), env=ENV,
                       capture_output=True, text=True, timeout=600)
  return run.returncode, run.stdout, run.stderr


def start(model_dir, data_dir, steps, *extra):
  return subprocess.Popen(train_cmd(model_dir, data_dir, steps, *extra), env=ENV, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def train_here(model_dir, data_dir, steps, problem="algorithmic_reverse", **config):
  """The run `train` makes, trained in this process (conftest's train_in_process)."""
  train_in_process(problem, data_dir, model_dir, TINY, steps,
                   **dict(dict(log_every=1, seed=5), **config))


def train_here_printing(model_dir, data_dir, steps):
  """train_here's run of algorithmic_reverse -> the lines `train` prints of it (its trainer's
  log, which t2t-lite-train prints as it is), for the losses it logs."""
  from t2t_lite.train import trainer
  lines = []
  trainer.train(t2t_lite.get_problem("algorithmic_reverse"),
                t2t_lite.get_hparams("transformer_tiny", TINY), str(data_dir),
                trainer.TrainConfig(model_dir=str(model_dir), train_steps=steps, eval_steps=0,
                                    eval_decode_examples=0, xla=False, log_every=1, seed=5),
                run_info={"hparams_set": "transformer_tiny", "hparams_overrides": TINY},
                log=lines.append)
  return "".join(line + "\n" for line in lines)


def losses(out):
  return {int(s): float(l) for s, l in STEP_LINE.findall(out)}


def wait_for_line(process, pattern, timeout=300):
  """Reads the process's stdout until a line matches -> the lines read."""
  lines, deadline = [], time.time() + timeout
  while time.time() < deadline:
    line = process.stdout.readline()
    if not line:
      break
    lines.append(line)
    if re.search(pattern, line):
      return lines
  raise AssertionError(f"no line matching {pattern!r}: {''.join(lines)[-2000:]}")


def error_line(err, prog="t2t-lite-train"):
  errors = [line for line in err.splitlines() if line.startswith(f"{prog}: error: ")]
  assert len(errors) == 1 and err.endswith(errors[0] + "\n") and "Traceback" not in err, err
  return errors[0][len(f"{prog}: error: "):]


# ------------------------------------------------------------------------------ the lease
def test_two_trainers_on_one_model_dir_one_trains_and_the_other_is_refused(reverse_dir,
                                                                           tmp_path):
  """The lease of a SIGKILLed holder taken over by the next run: the pre-emption test below
  (its SIGKILLed run's resume)."""
  model_dir = tmp_path / "model"
  first, second = start(model_dir, reverse_dir, 10 ** 6), start(model_dir, reverse_dir, 10 ** 6)
  deadline = time.time() + 300
  while time.time() < deadline and first.poll() is None and second.poll() is None:
    time.sleep(0.1)
  loser = first if first.poll() is not None else second
  winner = second if loser is first else first
  out, err = loser.communicate()
  assert loser.returncode == 2, err
  assert error_line(err).startswith(f"{model_dir} is being trained by host "
                                    f"{socket.gethostname()} pid {winner.pid} (started ")
  wait_for_line(winner, r"^step 2/")  # the holder trains
  assert "step 1/" not in out  # the other one never did
  winner.send_signal(signal.SIGKILL)
  winner.wait()


# ------------------------------------------------------------------------------ pre-emption
@pytest.fixture(scope="module")
def unbroken(reverse_dir, tmp_path_factory):
  """{step: loss} of a 20-step run never stopped: what a run stopped (SIGTERM, SIGKILL) or
  whose data moved must log once resumed. Trained in this process: a reference, not the tool
  under test (its losses print as the tool prints them)."""
  out = train_here_printing(tmp_path_factory.mktemp("unbroken") / "model", reverse_dir, 20)
  assert sorted(losses(out)) == list(range(1, 21))
  return losses(out)


def test_a_run_stopped_by_sigterm_then_sigkilled_resumes_as_if_never_stopped(
    unbroken, reverse_dir, tmp_path):
  """Pre-empted twice: SIGTERM (it saves and exits 0), then, resumed with a checkpoint at every
  step, SIGKILL (no chance to save: the checkpoints it listed must read whole). Resumed again,
  every step each run logged has the loss of the run never stopped, and the last resume takes
  over the lease the SIGKILLed run left behind."""
  import tensorflow as tf
  steps, model_dir = 20, tmp_path / "model"
  stopped = start(model_dir, reverse_dir, steps)
  wait_for_line(stopped, r"^step 4/")
  stopped.send_signal(signal.SIGTERM)
  out, err = stopped.communicate(timeout=300)
  assert stopped.returncode == 0, err
  at = int(re.search(r"stopping at step (\d+): SIGTERM received", out).group(1))
  assert 4 <= at < steps and f"done: step {at} (stopped by SIGTERM)" in out
  assert os.path.exists(model_dir / f"ckpt-{at}.index")

  killed = start(model_dir, reverse_dir, steps, "--checkpoint_every_minutes=0.000001")
  logged = wait_for_line(killed, rf"^step {at + 1}/")
  assert f"restored {model_dir}/ckpt-{at} (step {at})\n" in logged
  logged += wait_for_line(killed, rf"^step {at + 2}/")  # it ran on, and saved, a little
  killed.send_signal(signal.SIGKILL)
  assert killed.wait() == -signal.SIGKILL
  logged = "".join(logged) + killed.stdout.read()
  last = tf.train.get_checkpoint_state(str(model_dir))
  killed_at = int(last.model_checkpoint_path.rsplit("-", 1)[1])
  assert at <= killed_at < steps
  assert (model_dir / "lease.json").exists()  # a SIGKILLed holder's lease stays behind
  for path in last.all_model_checkpoint_paths:  # every listed checkpoint reads completely
    reader = tf.train.load_checkpoint(path)
    for name, dtype in reader.get_variable_to_dtype_map().items():
      if dtype != tf.variant:  # the input iterator's state is restored below
        reader.get_tensor(name)

  code, resumed, err = train(model_dir, reverse_dir, steps)
  assert code == 0, err
  assert f"restored {model_dir}/ckpt-{killed_at} (step {killed_at})" in resumed
  assert (f"taking over the lease of {model_dir} from host {socket.gethostname()} pid "
          f"{killed.pid}") in err and f"its process {killed.pid} is gone" in err
  assert not (model_dir / "lease.json").exists()
  assert sorted(losses(resumed)) == list(range(killed_at + 1, steps + 1))
  assert min(losses(logged)) == at + 1
  for step, loss in [*losses(logged).items(), *losses(resumed).items()]:
    # Progress lines print 4 decimals: allow one unit of rounding. Another batch or another
    # dropout mask would change the loss by far more (consecutive steps differ by ~0.05).
    assert loss == pytest.approx(unbroken[step], abs=1.5e-4), step
  assert tf.train.latest_checkpoint(str(model_dir)).endswith(f"ckpt-{steps}")


# ------------------------------------------------------------------------------ damaged checkpoints
@pytest.fixture(scope="module")
def _four_checkpoints_run(reverse_dir, tmp_path_factory):
  model_dir = tmp_path_factory.mktemp("four_checkpoints") / "model"
  train_here(model_dir, reverse_dir, 4, checkpoint_every_minutes=1e-6)  # one at every step
  assert {f"ckpt-{i}.index" for i in range(1, 5)} <= set(os.listdir(model_dir))
  return model_dir


@pytest.fixture()
def four_checkpoints(_four_checkpoints_run, tmp_path):
  """A model_dir of a finished 4-step run with a checkpoint at every step, for this test alone
  (a copy: the CheckpointManager's state file names checkpoints relative to its directory)."""
  return pathlib.Path(shutil.copytree(_four_checkpoints_run, tmp_path / "model"))


def test_a_resume_removes_unfinished_saves_and_skips_a_newest_checkpoint_that_does_not_read(
    four_checkpoints, reverse_dir):
  """What a killed save can leave, both resumed by one run: the parts of a save that did not
  finish (removed at start) and a truncated newest checkpoint (named; the previous one is
  restored)."""
  model_dir = four_checkpoints
  data = model_dir / "ckpt-4.data-00000-of-00001"
  os.truncate(data, data.stat().st_size // 2)
  temp = model_dir / "ckpt-5_temp"
  temp.mkdir()
  (temp / "part-00000-of-00001.data-00000-of-00001").write_bytes(b"x" * 1000)
  code, out, err = train(model_dir, reverse_dir, 5)
  assert code == 0, err
  assert f"removed {temp}: the parts of a save that did not finish" in out
  assert f"WARNING: checkpoint {model_dir}/ckpt-4 does not read (" in out
  assert f"using the previous one, {model_dir}/ckpt-3" in out
  assert f"restored {model_dir}/ckpt-3 (step 3)" in out
  assert sorted(losses(out)) == [4, 5]
  assert not temp.exists() and (model_dir / "ckpt-5.index").exists()


def test_decode_falls_back_to_the_previous_checkpoint_with_a_warning(_four_checkpoints_run,
                                                                      tmp_path):
  """Three copies of the run, each with its newest checkpoint damaged its own way, decoded as
  one ensemble: each member is restored as decode restores a model, and each one warns."""
  damaged = []
  for damage in ("truncate_data", "delete_data", "garble_index"):
    model_dir = pathlib.Path(shutil.copytree(_four_checkpoints_run, tmp_path / damage))
    data, index = model_dir / "ckpt-4.data-00000-of-00001", model_dir / "ckpt-4.index"
    if damage == "truncate_data":
      os.truncate(data, data.stat().st_size // 2)
    elif damage == "delete_data":
      data.unlink()
    else:
      index.write_bytes(b"\0" * index.stat().st_size)
    damaged.append(model_dir)
  (tmp_path / "in.txt").write_text("1 2 3\n")
  run = subprocess.run([sys.executable, "-m", "t2t_lite.bin.decode",
                        *[f"--model_dir={model_dir}" for model_dir in damaged],
                        f"--input_file={tmp_path}/in.txt", "--no_progress"], env=ENV,
                       capture_output=True, text=True, timeout=300)
  assert run.returncode == 0, run.stderr
  assert len(run.stdout.splitlines()) == 1
  for model_dir in damaged:
    assert (f"WARNING checkpoint {model_dir}/ckpt-4 does not read (" in run.stderr
            and f"using the previous one, {model_dir}/ckpt-3" in run.stderr), run.stderr
  assert "Traceback" not in run.stderr


# ------------------------------------------------------------------------------ resume checks
def test_resume_with_another_setting_is_refused_and_model_dir_kept(four_checkpoints,
                                                                   reverse_dir):
  """Through the tool. The other settings a resume must keep (seed, accumulation, packing, ...)
  are refused by the same check: the test of every refused resume, below."""
  model_dir = four_checkpoints
  # The run was started with --mixed_precision=auto: what it chose depends on the CPU.
  saved = json.loads((model_dir / "run.json").read_text())["mixed_precision"]
  assert saved in ("none", "bf16")
  asked = "none" if saved == "bf16" else "bf16"
  before = {name: (model_dir / name).read_bytes() for name in ("run.json", "hparams.json")}
  code, out, err = train(model_dir, reverse_dir, 6, f"--mixed_precision={asked}")
  assert code == 2
  assert error_line(err) == (f"{model_dir} was trained with mixed_precision={saved!r}, not "
                             f"{asked!r}: exact resume needs the same mixed_precision (see "
                             f"{model_dir}/run.json), or use a new --model_dir")
  assert before == {name: (model_dir / name).read_bytes() for name in before}
  assert "ckpt-5.index" not in os.listdir(model_dir) and not (model_dir / "lease.json").exists()


def _multi30k_data(root, words):
  """A multi30k_ende data_dir prepared from tiny raw files made of `words`."""
  import gzip
  import random
  raw = root / "raw"
  raw.mkdir(parents=True)
  rng = random.Random(len(words))
  for stem in ("train", "val", "test_2016_flickr"):
    lines = "".join(" ".join(rng.choice(words) for _ in range(5)) + "\n" for _ in range(60))
    for lang in ("en", "de"):
      (raw / f"{stem}.{lang}.gz").write_bytes(gzip.compress(lines.encode()))
  data_dir = root / "data"
  t2t_lite.get_problem("multi30k_ende").prepare(str(data_dir), str(raw))
  return data_dir


@pytest.fixture(scope="module")
def _multi30k_run(tmp_path_factory):
  """(raw dir, data_dir, data_dir of another vocabulary, model_dir of a 1-step float32 run on
  data_dir) of multi30k_ende made from tiny raw files: the refused resumes below."""
  root = tmp_path_factory.mktemp("multi30k")
  first = _multi30k_data(root / "a", "a man rides horse the dog runs".split())
  other = _multi30k_data(root / "b", "ein mann reitet pferd der hund läuft".split())
  train_here(root / "model", first, 1, problem="multi30k_ende", mixed_precision="none")
  return root / "a" / "raw", first, other, root / "model"


@pytest.fixture()
def multi30k_run(_multi30k_run, tmp_path):
  """_multi30k_run with a copy of its run for this test alone."""
  raw, first, other, model_dir = _multi30k_run
  return raw, first, other, pathlib.Path(shutil.copytree(model_dir, tmp_path / "model"))


def test_resume_with_a_data_dir_of_another_vocabulary_is_refused(multi30k_run):
  _, first, other, model_dir = multi30k_run
  vocab, run = (model_dir / "vocab.model").read_bytes(), (model_dir / "run.json").read_text()
  code, out, err = train(model_dir, other, 2, problem="multi30k_ende")
  assert code == 2
  assert error_line(err).startswith(
      f"the vocabulary of {other} differs from the one {model_dir} was trained with (sha256 ")
  assert f"resume with the data_dir of the run ({first})" in err
  assert (model_dir / "vocab.model").read_bytes() == vocab
  assert (model_dir / "run.json").read_text() == run
  assert json.loads(run)["vocab_sha256"]


def test_a_run_ended_by_train_minutes_still_evaluates(reverse_dir, tmp_path):
  code, out, err = train(tmp_path / "model", reverse_dir, 1000, "--train_minutes=0.0001",
                         "--eval_steps=1", "--eval_every=1000")
  assert code == 0, err
  lines = out.splitlines()
  stop = next(i for i, line in enumerate(lines) if line.startswith("stopping at step 1: the"))
  assert lines[stop + 1].startswith("eval at step 1: loss ")
  assert "done: step 1 (time budget spent)" in out


def test_model_dir_that_is_a_file_is_one_line(reverse_dir, tmp_path):
  path = tmp_path / "model"
  path.write_text("not a directory")
  code, out, err = train(path, reverse_dir, 1)
  assert code == 2
  assert error_line(err).startswith(f"cannot write model_dir {path}: ")
  assert path.read_text() == "not a directory"


def test_model_dir_on_a_read_only_file_system_is_one_line(reverse_dir, read_only_disk):
  code, out, err = train(read_only_disk / "model", reverse_dir, 1)
  assert code == 2
  assert error_line(err).startswith(f"cannot write model_dir {read_only_disk}/model: ")


def test_disk_full_during_a_save_is_one_line_and_the_last_checkpoint_still_loads(
    _four_checkpoints_run, reverse_dir, small_disk):
  model_dir = pathlib.Path(shutil.copytree(_four_checkpoints_run, small_disk / "model"))
  stat = os.statvfs(small_disk)
  free = stat.f_bavail * stat.f_frsize
  (small_disk / "filler").write_bytes(b"\0" * (free - 20000))  # leave 20 kB
  code, out, err = train(model_dir, reverse_dir, 5)
  assert code == 1, err
  message = error_line(err)
  assert message.startswith(f"saving the step 5 checkpoint in {model_dir} failed: ")
  assert "No space left on device" in message
  assert message.endswith(f"the last good checkpoint, {model_dir}/ckpt-4, is intact")
  assert "MB)" in message  # the size a checkpoint takes
  assert not list(model_dir.glob("*_temp")) and not list(model_dir.glob("*.tmp"))
  (small_disk / "filler").unlink()
  # Loaded as decode loads a model (in this process: decode is not what is tested here): the
  # newest checkpoint, whole (one that did not read would be passed over for ckpt-3).
  from t2t_lite.decode import loading
  assert loading.load(str(model_dir)).checkpoint == f"{model_dir}/ckpt-4"


def test_a_run_started_with_the_in_memory_training_cache_resumes_with_it(reverse_dir, tmp_path):
  model_dir = tmp_path / "model"
  model_dir.mkdir()
  # run.json without "train_cache": a run of the layout before the cache was dropped, whose
  # checkpoints hold the cache in the input iterator's state.
  (model_dir / "run.json").write_text(json.dumps({"problem": "algorithmic_reverse"}))
  train_here(model_dir, reverse_dir, 2)  # its start: what the tool would do, in this process
  assert json.loads((model_dir / "run.json").read_text())["train_cache"] is True
  code, out, err = train(model_dir, reverse_dir, 3)
  assert code == 0, err
  assert f"restored {model_dir}/ckpt-2 (step 2)" in out and sorted(losses(out)) == [3]


def test_every_refused_resume_leaves_every_byte_of_the_run_as_it_was(multi30k_run, reverse_dir,
                                                                    tmp_path):
  """Through the library's train entry (what t2t-lite-train calls), in this process. The run:
  1 step of multi30k_ende in float32 (multi30k_run's, started by that entry too)."""
  from t2t_lite.errors import T2TLiteError
  from t2t_lite.train import trainer
  raw, data_dir, other_vocabulary, model_dir = multi30k_run
  other_settings = tmp_path / "c"
  t2t_lite.get_problem("multi30k_ende", vocab_size=300).prepare(str(other_settings), str(raw))

  def run(problem="multi30k_ende", hparams=TINY, data=data_dir, **config):
    problem = t2t_lite.get_problem(problem) if isinstance(problem, str) else problem
    hparams = t2t_lite.get_hparams("transformer_tiny", hparams) if isinstance(
        hparams, str) else hparams
    config = dict(dict(model_dir=str(model_dir), train_steps=2, eval_steps=0, xla=False, seed=5,
                       eval_decode_examples=0, mixed_precision="none"), **config)
    return trainer.train(problem, hparams, str(data), trainer.TrainConfig(**config),
                         log=lambda line: None)

  before = file_hashes(model_dir)
  refused = {
      "hparams set": (dict(hparams=t2t_lite.get_hparams("transformer_base", TINY)),
                      f"{model_dir} was trained with "),
      "overrides": (dict(hparams=TINY + ",d_ff=96"), f"{model_dir} was trained with d_ff=64"),
      "seed": (dict(seed=6), f"{model_dir} was trained with seed=5, not 6: exact resume needs "
                             f"the same seed (see {model_dir}/run.json), or use a new "
                             "--model_dir"),
      "accumulation": (dict(grad_accum_steps=2), f"{model_dir} was trained with "
                       "grad_accum_steps=1, not 2: exact resume needs the same grad_accum_steps"),
      "packing": (dict(pack=True), f"{model_dir} was trained without --pack"),
      "precision": (dict(mixed_precision="bf16"), "mixed_precision='none', not 'bf16'"),
      "problem": (dict(problem="algorithmic_reverse", data=reverse_dir),
                  "trained on problem 'multi30k_ende', not 'algorithmic_reverse'"),
      "problem settings": (dict(problem=t2t_lite.get_problem("multi30k_ende", vocab_size=300),
                                data=other_settings),
                           "trained on multi30k_ende data prepared with {'vocab_type'"),
      "vocabulary": (dict(data=other_vocabulary),
                     f"the vocabulary of {other_vocabulary} differs from the one"),
  }
  for name, (changes, message) in refused.items():
    with pytest.raises(T2TLiteError) as error:
      run(**changes)
    assert message in str(error.value), name
    assert file_hashes(model_dir) == before, name
  assert run()["step"] == 2  # and the run itself resumes


def test_a_run_dir_written_by_version_0_1_decodes_and_resumes(tmp_path):
  """tests/data/run_dir_v0.1.tar.xz is the model_dir that t2t-lite 0.1 (main at 6f4d273, before
  the run directory had a package of its own) wrote with:
    t2t-lite-train --problem=algorithmic_reverse --problem_settings=train_size=32,eval_size=8,\
max_input_length=6 --hparams=transformer_tiny --hparams_overrides=num_layers=1,d_model=16,\
d_ff=32,num_heads=2,batch_size=32,max_length=8 --train_steps=2 --eval_steps=0 --noxla \
--log_every=1 --seed=5 --eval_decode_examples=0"""
  import tarfile
  with tarfile.open(pathlib.Path(__file__).parent / "data" / "run_dir_v0.1.tar.xz") as archive:
    archive.extractall(tmp_path, filter="data")
  model_dir, data_dir = tmp_path / "model", tmp_path / "data"
  texts, scores = t2t_lite.translate(str(model_dir), ["3 9 4", "1 2"])
  assert len(texts) == 2 and all(isinstance(text, str) for text in texts)
  run = subprocess.run([
      sys.executable, "-m", "t2t_lite.bin.train", "--problem=algorithmic_reverse",
      "--problem_settings=train_size=32,eval_size=8,max_input_length=6",
      "--hparams=transformer_tiny", "--hparams_overrides=num_layers=1,d_model=16,d_ff=32,"
      "num_heads=2,batch_size=32,max_length=8", f"--data_dir={data_dir}",
      f"--model_dir={model_dir}", "--train_steps=3", "--eval_steps=0", "--noxla",
      "--log_every=1", "--seed=5", "--eval_decode_examples=0"], env=ENV, capture_output=True,
      text=True, timeout=300)
  assert run.returncode == 0, run.stderr
  assert f"restored {model_dir}/ckpt-2 (step 2)" in run.stdout
  assert sorted(losses(run.stdout)) == [3] and (model_dir / "ckpt-3.index").exists()
  # Its saved input position names the data_dir it was trained on, gone with that machine.
  assert (f"WARNING: the input's position saved in {model_dir}/ckpt-2 names data that is gone "
          "(/tmp/oldrun/data/train-00000-of-00001.tfrecord; did the data_dir move?): the input "
          "skips the 2 batches its steps used instead") in run.stdout


def test_a_run_whose_data_dir_moved_resumes_with_the_losses_of_an_unbroken_run(
    unbroken, reverse_dir, tmp_path):
  """The saved input position names its record files: moved, they are found again by
  skipping the batches the restored steps used, which gives the same batches. (The run's first
  steps only make the run directory that is resumed: trained in this process.)"""
  shutil.copytree(reverse_dir, tmp_path / "before")
  out = train_here_printing(tmp_path / "moved", tmp_path / "before", 2)
  shutil.move(tmp_path / "before", tmp_path / "after")
  code, resumed, err = train(tmp_path / "moved", tmp_path / "after", 4)
  assert code == 0, err
  assert "names data that is gone" in resumed and "skips the 2 batches" in resumed
  assert sorted(losses(resumed)) == [3, 4]
  assert losses(out) | losses(resumed) == pytest.approx(
      {step: unbroken[step] for step in range(1, 5)}, rel=1e-5)
