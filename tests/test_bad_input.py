"""Bad input to every tool: one line on stderr naming the value or path, exit status 2 (1 for
run-time failures), nothing written that a later run would trip over, no TensorFlow noise.

The CLI cases run the console scripts as their own processes, as a user would.
"""
import gzip
import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest
from conftest import file_hashes, train_in_process

import t2t_lite

# No TF_CPP_MIN_LOG_LEVEL: the tools must be quiet by themselves.
ENV = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
ENV["CUDA_VISIBLE_DEVICES"] = ""  # the same on a machine with a GPU


def run_tool(tool, *args, stdin=subprocess.DEVNULL, timeout=300):
  """(exit status, stdout, stderr) of `python -m t2t_lite.bin.<tool> args`."""
  run = subprocess.run([sys.executable, "-m", f"t2t_lite.bin.{tool}", *map(str, args)],
                       env=ENV, stdin=stdin, capture_output=True, text=True, timeout=timeout)
  return run.returncode, run.stdout, run.stderr


def start_tool(tool, *args, stdin=subprocess.DEVNULL, text=True):
  """`python -m t2t_lite.bin.<tool> args` started, for finish(): the independent tools of one
  test run side by side (that saves the test's wall time, not CPU)."""
  return subprocess.Popen([sys.executable, "-m", f"t2t_lite.bin.{tool}", *map(str, args)],
                          env=ENV, stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=text)


def finish(process, stdin=None, timeout=300):
  """(exit status, stdout, stderr) of a start_tool process, `stdin` written to it first."""
  try:
    out, err = process.communicate(stdin, timeout=timeout)
  except subprocess.TimeoutExpired:
    process.kill()
    process.communicate()
    raise
  return process.returncode, out, err


def assert_one_line(err, prog, *parts):
  """stderr ends with one `prog: error: ...` line holding `parts` (log lines may come first)."""
  errors = [line for line in err.splitlines() if line.startswith(f"{prog}: error: ")]
  assert len(errors) == 1 and err.endswith(errors[0] + "\n") and "Traceback" not in err, err
  for part in parts:
    assert str(part) in errors[0], err


# ------------------------------------------------------------------------------ hparams
@pytest.mark.parametrize("override, message", [
    ("learning_rate=-1", "learning_rate must be a finite number > 0, got -1.0"),
    ("learning_rate=inf", "learning_rate must be a finite number > 0, got inf"),
    ("adam_beta1=2", "adam_beta1 must be in [0, 1), got 2.0"),
    ("adam_beta2=1", "adam_beta2 must be in [0, 1), got 1.0"),
    ("adam_epsilon=-1", "adam_epsilon must be a finite number > 0, got -1.0"),
    ("beam_size=0", "beam_size must be >= 1, got 0"),
    ("alpha=-0.5", "alpha must be a finite number >= 0, got -0.5"),
    ("alpha=nan", "alpha must be a finite number >= 0, got nan"),
    ("extra_length=0", "extra_length must be >= 1, got 0"),
    ("dropout=1", "dropout must be in [0, 1), got 1.0"),
    ("label_smoothing=-0.1", "label_smoothing must be in [0, 1), got -0.1"),
    ("warmup_steps=-5", "warmup_steps must be >= 0, got -5"),
    ("num_heads=0", "num_heads must be >= 1, got 0"),
])
def test_hparams_out_of_range_are_refused_when_built(override, message):
  with pytest.raises(t2t_lite.HParamsError) as error:
    t2t_lite.get_hparams("transformer_base", override)
  assert str(error.value) == message


def test_hparams_json_is_checked_when_loaded(tmp_path):
  path = tmp_path / "hparams.json"
  path.write_text(json.dumps({"learning_rate": -1.0}))
  with pytest.raises(t2t_lite.HParamsError, match=f"^{path}: learning_rate must be a finite"):
    t2t_lite.HParams.load(str(path))
  path.write_text(json.dumps({"num_layers": "two"}))
  with pytest.raises(t2t_lite.HParamsError,
                     match=f"^bad value for hparam 'num_layers' in {path}: 'two' is not an integer"):
    t2t_lite.HParams.load(str(path))
  path.write_text("{not json")
  with pytest.raises(t2t_lite.HParamsError, match=f"^{path} is not JSON"):
    t2t_lite.HParams.load(str(path))
  path.write_text(json.dumps({"learning_rate": 2, "beam_size": None}))  # JSON ints are floats
  loaded = t2t_lite.HParams.load(str(path))
  assert loaded.learning_rate == 2.0 and isinstance(loaded.learning_rate, float)


def test_train_refuses_a_bad_hparam_before_writing_anything(tmp_path):
  code, out, err = run_tool(
      "train", "--problem=algorithmic_reverse", "--hparams=transformer_tiny",
      "--hparams_overrides=adam_beta1=2", f"--data_dir={tmp_path}/data",
      f"--model_dir={tmp_path}/model")
  assert code == 2
  assert err == "t2t-lite-train: error: adam_beta1 must be in [0, 1), got 2.0\n"
  assert not (tmp_path / "model").exists() and not (tmp_path / "data").exists()


# ------------------------------------------------------------------------------ quiet tools
def test_a_problem_setting_out_of_range_is_refused_before_anything_without_tensorflow_noise(
    tmp_path):
  """Without --verbose, the tool prints its one line and none of TensorFlow's; with it, they
  are back. Refused once TensorFlow is loaded (the problem's plug-in imports it to read its
  settings), so that TensorFlow has had its say; what a tool refuses before loading it is in
  tests/test_refusals.py."""
  flags = ["--problem=algorithmic_reverse", "--problem_settings=num_symbols=-3",
           f"--data_dir={tmp_path}/data", f"--model_dir={tmp_path}/model"]
  quiet, loud = start_tool("train", *flags), start_tool("train", *flags, "--verbose")
  quiet, loud = finish(quiet), finish(loud)
  message = "t2t-lite-train: error: algorithmic_reverse: num_symbols must be >= 1, got -3\n"
  assert quiet == (2, "", message)
  assert loud[0] == 2 and loud[2].endswith(message)
  assert "cpu_feature_guard" in loud[2] or "cuda" in loud[2].lower()  # TF's own lines are back
  assert not (tmp_path / "data").exists() and not (tmp_path / "model").exists()


# ------------------------------------------------------------------------------ data
def _multi30k_raw(raw_dir, **contents):
  """Tiny multi30k_ende raw files (gzipped); contents: {file stem: bytes written as they are}."""
  raw_dir.mkdir(exist_ok=True)
  for stem in ("train", "val", "test_2016_flickr"):
    for lang, text in (("en", "a man rides a horse\n"), ("de", "ein mann reitet\n")):
      name = f"{stem}.{lang}.gz"
      data = contents.get(f"{stem}_{lang}", gzip.compress(text.encode() * 20))
      (raw_dir / name).write_bytes(data)
  return raw_dir


def test_datagen_raw_file_that_is_not_gzip_is_named(tmp_path):
  raw = _multi30k_raw(tmp_path / "raw", train_de=b"ein mann reitet\n")
  code, _, err = run_tool("datagen", "--problem=multi30k_ende", f"--data_dir={tmp_path}/data",
                          f"--raw_dir={raw}")
  assert code == 2
  assert_one_line(err, "t2t-lite-datagen", f"{raw}/train.de.gz is not a complete gzip file")
  assert not (tmp_path / "data" / "manifest.json").exists()  # not "prepared"


def test_datagen_empty_training_files_are_named(tmp_path):
  raw = _multi30k_raw(tmp_path / "raw", train_en=gzip.compress(b""), train_de=gzip.compress(b""))
  code, _, err = run_tool("datagen", "--problem=multi30k_ende", f"--data_dir={tmp_path}/data",
                          f"--raw_dir={raw}")
  assert code == 2
  assert err.endswith(f"\nt2t-lite-datagen: error: multi30k_ende: no training text in "
                      f"{raw}/train.en.gz, {raw}/train.de.gz (every pair is empty): nothing to "
                      "learn a vocabulary from or train on\n")
  assert_one_line(err, "t2t-lite-datagen")


@pytest.fixture()
def reverse_data(reverse_dir, tmp_path):
  """A test's own copy of algorithmic_reverse's prepared data (tests damage it)."""
  return pathlib.Path(shutil.copytree(reverse_dir, tmp_path / "reverse"))


def _train_reverse(data_dir, model_dir, *flags):
  return run_tool("train", "--problem=algorithmic_reverse", "--hparams=transformer_tiny",
                  "--hparams_overrides=num_layers=1,d_model=32,d_ff=64,num_heads=2,"
                  "batch_size=256,max_length=24", f"--data_dir={data_dir}",
                  f"--model_dir={model_dir}", "--eval_steps=0", "--noxla", "--log_every=1",
                  "--eval_decode_examples=0", *flags)


def test_train_truncated_record_file_is_named_before_training(reverse_data, tmp_path):
  path = reverse_data / "train-00000-of-00001.tfrecord"
  size = path.stat().st_size
  with open(path, "r+b") as f:
    f.truncate(size // 2)
  code, out, err = _train_reverse(reverse_data, tmp_path / "model", "--train_steps=2")
  assert code == 2, err
  assert err == (f"t2t-lite-train: error: {path} has {size // 2} bytes but had {size} when "
                 f"{reverse_data} was prepared: it was truncated or overwritten; remove "
                 f"{reverse_data} and prepare it again with t2t-lite-datagen\n")


def test_train_overwritten_record_file_is_named(reverse_data, tmp_path):
  path = reverse_data / "train-00000-of-00001.tfrecord"
  data = bytearray(path.read_bytes())
  data[len(data) // 2:len(data) // 2 + 64] = b"\xff" * 64  # same size, bad checksums
  path.write_bytes(bytes(data))
  # The shuffle buffer holds all of this small split: the first step reads it to the end.
  code, out, err = _train_reverse(reverse_data, tmp_path / "model", "--train_steps=2")
  assert code == 2, err
  assert_one_line(err, "t2t-lite-train", f"{path} is damaged (", f"remove {reverse_data} and")


# ------------------------------------------------------------------------------ decode, export
def make_model_dir(model_dir, data_dir, overrides, seed=1, problem="multi30k_ende"):
  """A model_dir laid out as t2t-lite-train does, with random weights saved as ckpt-10."""
  import keras
  import tensorflow as tf
  from t2t_lite.rundir import run_files
  hparams = t2t_lite.get_hparams("transformer_tiny", overrides)
  run_files.write_run_files(str(model_dir), hparams, {"problem": problem}, str(data_dir))
  keras.utils.set_random_seed(seed)
  model = t2t_lite.build_model(hparams, t2t_lite.get_problem(problem).tokenizer(
      str(model_dir)).vocab_size)
  manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model), str(model_dir), 3)
  manager.save(checkpoint_number=10)
  return model_dir


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
  """{"small", "wide"}: two tiny multi30k_ende model_dirs of different shapes, one vocabulary."""
  import random
  from t2t_lite.data import tokenizers
  root = tmp_path_factory.mktemp("models")
  rng = random.Random(0)
  words = "a man rides horse the dog runs in park ein mann reitet hund".split()
  texts = [" ".join(rng.choice(words) for _ in range(6)) for _ in range(300)]
  tokenizers.train_sentencepiece(texts, str(root / "data" / "vocab.model"), 400)
  small = "num_layers=1,d_model=32,d_ff=64,num_heads=2"
  return {"small": make_model_dir(root / "small", root / "data", small),
          "wide": make_model_dir(root / "wide", root / "data", small + ",d_ff=96")}


def test_decode_checkpoint_of_another_model_is_one_line(model_dirs, tmp_path):
  (tmp_path / "in.txt").write_text("a man rides\n")
  code, out, err = run_tool("decode", "--model_dir", model_dirs["small"], "--checkpoint_path",
                            model_dirs["wide"] / "ckpt-10", "--input_file", tmp_path / "in.txt")
  assert code == 2 and out == ""
  assert_one_line(err, "t2t-lite-decode", f"checkpoint {model_dirs['wide']}/ckpt-10 does not "
                                          "match the model of")


@pytest.mark.parametrize("output, message", [
    ("missing/out.txt", "--output_file {tmp}/missing/out.txt: directory {tmp}/missing does not "
                        "exist"),
    ("sub", "--output_file {tmp}/sub is a directory")])
def test_decode_bad_output_file_is_refused_before_decoding(model_dirs, tmp_path, output, message):
  (tmp_path / "in.txt").write_text("a man rides\n")
  (tmp_path / "sub").mkdir()
  code, out, err = run_tool("decode", "--model_dir", "/nonexistent", "--input_file",
                            tmp_path / "in.txt", "--output_file", tmp_path / output)
  assert code == 2  # refused before model_dir is even read
  assert err == f"t2t-lite-decode: error: {message.format(tmp=tmp_path)}\n"


def test_avg_checkpoints_refuses_checkpoints_of_another_problem(model_dirs, tmp_path):
  small = model_dirs["small"]
  other = make_model_dir(tmp_path / "enfr", small.parent / "data",
                         "num_layers=1,d_model=32,d_ff=64,num_heads=2", seed=2,
                         problem="multi30k_enfr")  # same shapes and vocabulary
  mixed = tmp_path / "mixed"
  for path in small.iterdir():
    (mixed / path.name).parent.mkdir(exist_ok=True)
    (mixed / path.name).write_bytes(path.read_bytes())
  (mixed / "checkpoint").write_text(  # the index lists a checkpoint of the other model_dir
      f'model_checkpoint_path: "{other}/ckpt-10"\n'
      f'all_model_checkpoint_paths: "{mixed}/ckpt-10"\n'
      f'all_model_checkpoint_paths: "{other}/ckpt-10"\n')
  code, out, err = run_tool("avg_checkpoints", "--model_dir", mixed, "--num_last=2",
                            "--output_dir", tmp_path / "avg")
  assert code == 2
  assert err == (f"t2t-lite-avg-checkpoints: error: {mixed}/ckpt-10 and {other}/ckpt-10 come "
                 "from different runs: problem 'multi30k_ende' vs 'multi30k_enfr'\n")
  assert not (tmp_path / "avg").exists()


@pytest.mark.parametrize("tool, flag", [("export", "--export_dir"), ("train", "--data_dir")])
def test_a_directory_flag_that_names_a_file_is_one_line(model_dirs, tmp_path, tool, flag):
  path = tmp_path / "file"
  path.write_text("x")
  args = (["--model_dir", model_dirs["small"], "--export_dir", path] if tool == "export" else
          ["--problem=algorithmic_reverse", "--hparams=transformer_tiny", "--data_dir", path,
           "--model_dir", tmp_path / "model"])
  code, out, err = run_tool(tool, *args)
  assert code == 2
  assert_one_line(err, f"t2t-lite-{tool}", f"{flag[2:]} {path} is a file, not a directory")


def test_decode_invalid_utf8_in_a_file_and_on_stdin_is_replaced_with_a_warning(model_dirs,
                                                                             tmp_path):
  lines = b"a man rides\nthe \xff dog\n\x80\n"
  (tmp_path / "in.txt").write_bytes(lines)
  from_file = start_tool("decode", "--model_dir", model_dirs["small"], "--input_file",
                         tmp_path / "in.txt", "--no_progress")
  from_stdin = start_tool("decode", "--model_dir", model_dirs["small"], "--no_progress",
                          stdin=subprocess.PIPE, text=False)
  stdin_run = finish(from_stdin, stdin=lines)  # Its lines first: it waits for them.
  code, out, err = finish(from_file)
  assert code == 0, err
  assert len(out.splitlines()) == 3
  assert (f"{tmp_path}/in.txt: 2 line(s) with invalid UTF-8 (first: line 2); the invalid bytes "
          "were replaced by U+FFFD") in err
  code, out, err = stdin_run
  assert code == 0, err
  assert len(out.splitlines()) == 3
  assert b"stdin: 2 line(s) with invalid UTF-8 (first: line 2)" in err


def test_decode_with_stdin_closed_prints_nothing_and_exits_0(model_dirs):
  run = subprocess.run(["sh", "-c", f'exec "{sys.executable}" -m t2t_lite.bin.decode '
                                    f'--model_dir "{model_dirs["small"]}" --no_progress <&-'],
                       env=ENV, capture_output=True, text=True, timeout=300)
  assert run.returncode == 0, run.stderr
  assert run.stdout == "" and "Traceback" not in run.stderr


def test_train_deleted_record_file_is_named(reverse_data, tmp_path):
  path = reverse_data / "dev-00000-of-00001.tfrecord"
  path.unlink()
  code, out, err = _train_reverse(reverse_data, tmp_path / "model", "--train_steps=1",
                                  "--eval_steps=1")
  assert code == 2, err
  assert_one_line(err, "t2t-lite-train", f"{path} is missing; remove {reverse_data} and")


# ------------------------------------------------------------------------------ run directory,
# settings, platform, raw data, disk: each refused with one line and its exit status before
# anything is written or trained, leaving nothing behind.
REVERSE_TINY = "num_layers=1,d_model=32,d_ff=64,num_heads=2,batch_size=256,max_length=24"


def _train(data_dir, model_dir, *flags):
  return run_tool("train", "--problem=algorithmic_reverse", "--hparams=transformer_tiny",
                  f"--hparams_overrides={REVERSE_TINY}", f"--data_dir={data_dir}",
                  f"--model_dir={model_dir}", "--noxla", "--eval_decode_examples=0", *flags)


def test_a_data_dir_prepared_with_other_settings_is_refused(reverse_data, tmp_path):
  before = file_hashes(reverse_data)
  code, out, err = _train(reverse_data, tmp_path / "model", "--problem_settings=num_symbols=20")
  assert code == 2
  assert_one_line(err, "t2t-lite-train", f"{reverse_data} holds algorithmic_reverse data "
                  "prepared with {'num_symbols': 10,", "not algorithmic_reverse with "
                  "{'num_symbols': 20,", "use another --data_dir")
  assert file_hashes(reverse_data) == before and not (tmp_path / "model").exists()


def test_multi_worker_without_tf_config_is_refused(tmp_path):
  code, out, err = _train(tmp_path / "data", tmp_path / "model", "--strategy=multi_worker")
  assert code == 2
  assert_one_line(err, "t2t-lite-train", "--strategy=multi_worker found no cluster: set "
                  "TF_CONFIG to the cluster and this worker's task")
  assert not (tmp_path / "data").exists() and not (tmp_path / "model").exists()


def test_a_tpu_that_is_not_there_is_named_not_the_data(tmp_path):
  code, out, err = _train(tmp_path / "data", tmp_path / "model", "--strategy=tpu")
  assert code == 2
  # This TensorFlow has no TPU kernels: said in words, without TensorFlow's op dump, and
  # without advising the --tpu=local that was in effect.
  assert_one_line(err, "t2t-lite-train", "--strategy=tpu: no TPU on this machine (this "
                  "TensorFlow has no TPU support (it is not a TPU build)); --tpu=local is for a "
                  "Cloud TPU VM")
  assert "reading" not in err and "OpKernel" not in err and "use --tpu=local" not in err
  assert not (tmp_path / "data").exists() and not (tmp_path / "model").exists()


def test_a_tpu_asked_for_with_another_strategy_is_refused(tmp_path):
  code, out, err = _train(tmp_path / "data", tmp_path / "model", "--strategy=default",
                          "--tpu=local")
  assert code == 2
  assert err == ("t2t-lite-train: error: --tpu=local asks for a TPU, but --strategy=default "
                 "trains without one: use --strategy=tpu (or auto), or leave out --tpu\n")
  assert not (tmp_path / "data").exists() and not (tmp_path / "model").exists()


@pytest.fixture(scope="module")
def _reverse_run(reverse_dir, tmp_path_factory):
  """A 3-step algorithmic_reverse run with a checkpoint at every step, trained once on the
  session's data (which training only reads)."""
  run = tmp_path_factory.mktemp("reverse_run") / "run"
  train_in_process("algorithmic_reverse", reverse_dir, run, REVERSE_TINY, 3,
                   checkpoint_every_minutes=1e-9)
  return run


@pytest.fixture()
def reverse_run(_reverse_run, tmp_path):
  """A copy of that run for this test alone (its checkpoint index names them relatively)."""
  return pathlib.Path(shutil.copytree(_reverse_run, tmp_path / "run"))


def test_a_refused_resume_changes_no_byte_of_the_run(reverse_run, tmp_path):
  model_dir = reverse_run
  before = file_hashes(model_dir)
  # A data_dir of another vocabulary size (15 ids, not 13) for the same run.
  code, out, err = _train(tmp_path / "twelve", model_dir, "--train_steps=4", "--eval_steps=0",
                          "--problem_settings=num_symbols=12")
  assert code == 2
  assert_one_line(err, "t2t-lite-train", f"{model_dir} was trained on algorithmic_reverse data "
                  "prepared with {'num_symbols': 10,", "not {'num_symbols': 12,")
  assert file_hashes(model_dir) == before and "step 1/" not in out


def test_a_run_of_another_problem_is_refused_before_any_data_is_prepared(reverse_run, tmp_path):
  before = file_hashes(reverse_run)
  code, out, err = run_tool("train", "--problem=algorithmic_copy", "--hparams=transformer_tiny",
                            f"--hparams_overrides={REVERSE_TINY}",
                            f"--data_dir={tmp_path}/new_data", f"--model_dir={reverse_run}",
                            "--noxla", "--eval_decode_examples=0")
  assert code == 2
  assert err == (f"t2t-lite-train: error: {reverse_run} was trained on problem "
                 "'algorithmic_reverse', not 'algorithmic_copy': use a new --model_dir\n")
  assert "preparing" not in out and not (tmp_path / "new_data").exists()
  assert file_hashes(reverse_run) == before


def test_a_resume_with_other_hparams_names_both_hparams_sets(reverse_run, reverse_data):
  before = file_hashes(reverse_run)
  code, out, err = run_tool("train", "--problem=algorithmic_reverse", "--hparams=transformer_tiny",
                            f"--hparams_overrides={REVERSE_TINY.replace('d_ff=64', 'd_ff=96')}",
                            f"--data_dir={reverse_data}", f"--model_dir={reverse_run}",
                            "--noxla", "--eval_decode_examples=0", "--eval_steps=0")
  assert code == 2
  assert_one_line(err, "t2t-lite-train", f"{reverse_run} was trained with d_ff=64 (hparams set "
                  f"transformer_tiny with '{REVERSE_TINY}'), not 96 (hparams set transformer_tiny "
                  f"with '{REVERSE_TINY.replace('d_ff=64', 'd_ff=96')}')")
  assert file_hashes(reverse_run) == before


def test_init_from_the_run_itself_is_refused_and_from_another_run_says_it_is_not_used(
    reverse_run, reverse_data, tmp_path):
  before = file_hashes(reverse_run)
  code, out, err = _train(reverse_data, reverse_run, "--train_steps=4", "--eval_steps=0",
                          f"--init_from={reverse_run}")
  assert code == 2
  assert err == (f"t2t-lite-train: error: --init_from {reverse_run} is inside --model_dir "
                 f"{reverse_run}: to resume the run, leave out --init_from; to fine-tune from "
                 "it, give a new --model_dir\n")
  assert file_hashes(reverse_run) == before
  # Another run as the source of a run that has checkpoints: it resumes, and says so. Both
  # lines come before the first step (checking the resume, restoring), so the run asks for no
  # step more than it has (3): no training step is traced for what this checks.
  other = tmp_path / "other"
  shutil.copytree(reverse_run, other)
  code, out, err = _train(reverse_data, reverse_run, "--train_steps=3", "--eval_steps=0",
                          f"--init_from={other}")
  assert code == 0, err
  assert (f"--init_from {other} is not used: {reverse_run} has checkpoints and the run resumes "
          "from them") in out
  assert f"restored {reverse_run}/ckpt-3 (step 3)" in out


def test_avg_checkpoints_skips_a_damaged_checkpoint_naming_it(reverse_run, tmp_path):
  data = reverse_run / "ckpt-3.data-00000-of-00001"
  os.truncate(data, data.stat().st_size // 2)
  before = file_hashes(reverse_run)
  two = start_tool("avg_checkpoints", "--model_dir", reverse_run, "--num_last=2", "--output_dir",
                   tmp_path / "avg")
  three = start_tool("avg_checkpoints", "--model_dir", reverse_run, "--num_last=3",
                     "--output_dir", tmp_path / "avg3")
  code, out, err = finish(two)
  assert code == 0, err
  assert (f"WARNING checkpoint {reverse_run}/ckpt-3 does not read (" in err
          and f"using the previous one, {reverse_run}/ckpt-2" in err), err
  averaged = json.loads((tmp_path / "avg" / "averaged.json").read_text())["averaged"]
  assert averaged == [f"{reverse_run}/ckpt-1", f"{reverse_run}/ckpt-2"]
  code, out, err = finish(three)
  assert code == 2
  assert_one_line(err, "t2t-lite-avg-checkpoints", f"{reverse_run} has 2 checkpoints that read "
                  "(the other 1 do not), fewer than the 3 asked for")
  assert not (tmp_path / "avg3").exists() and file_hashes(reverse_run) == before


def test_a_negative_time_budget_is_refused(tmp_path):
  code, out, err = _train(tmp_path / "data", tmp_path / "model", "--train_minutes=-1")
  assert code == 2
  assert err == "t2t-lite-train: error: train_minutes must be positive, got -1.0\n"
  assert not (tmp_path / "data").exists() and not (tmp_path / "model").exists()


def test_a_vocabulary_too_small_for_the_text_says_how_large(multi30k_dir, tmp_path):
  code, out, err = run_tool("datagen", "--problem=multi30k_ende", f"--data_dir={tmp_path}/data",
                            f"--raw_dir={multi30k_dir}", "--problem_settings=vocab_size=100")
  assert code == 2
  assert_one_line(err, "t2t-lite-datagen", "multi30k_ende: vocab_size=100 is smaller than the ",
                  "pieces a SentencePiece vocabulary of this text needs", "use vocab_size >= ")
  assert "RuntimeError" not in err and not (tmp_path / "data").exists()


@pytest.mark.parametrize("contents, message", [
    ({"train_de": gzip.compress(b"ein mann reitet\n" * 19)},
     "{raw}/train.en.gz:20: line has no counterpart in {raw}/train.de.gz (20 vs 19 lines; the "
     "files are not parallel)"),
    ({"train_de": gzip.compress(b"ein mann reitet\n" * 5 + b"gr\xfcn\n")},
     "{raw}/train.de.gz:6: not UTF-8 (invalid start byte at byte 2)"),
    ({"train_de": gzip.compress(b"ein mann reitet\n" * 20)[:-12]},
     "{raw}/train.de.gz is not a complete gzip file"),
    ({"train_de": b""}, "{raw}/train.de.gz is empty (0 bytes, not a gzip file)"),
    ({"train_de": gzip.compress(b"")},
     "{raw}/train.de.gz has no lines, and {raw}/train.en.gz has 20: the files are not parallel"),
])
def test_raw_training_files_that_do_not_read_are_named_and_leave_nothing(tmp_path, contents,
                                                                         message):
  raw = _multi30k_raw(tmp_path / "raw", **contents)
  code, out, err = run_tool("datagen", "--problem=multi30k_ende", f"--data_dir={tmp_path}/data",
                            f"--raw_dir={raw}")
  assert code == 2
  assert_one_line(err, "t2t-lite-datagen", message.format(raw=raw))
  assert "RuntimeError" not in err and "INTERNAL" not in err
  assert not (tmp_path / "data").exists()


def test_an_empty_dev_split_is_refused_before_training(tmp_path, caplog):
  raw = _multi30k_raw(tmp_path / "raw", val_en=gzip.compress(b""), val_de=gzip.compress(b""))
  t2t_lite.get_problem("multi30k_ende").prepare(str(tmp_path / "data"), str(raw))  # datagen's
  assert "multi30k_ende dev: no examples; training with evaluation" in caplog.text
  code, out, err = run_tool("train", "--problem=multi30k_ende", "--hparams=transformer_tiny",
                            f"--hparams_overrides={REVERSE_TINY}", f"--data_dir={tmp_path}/data",
                            f"--model_dir={tmp_path}/model", "--noxla")
  assert code == 2
  assert_one_line(err, "t2t-lite-train", f"the dev split of {tmp_path}/data has no example",
                  "(--eval_steps=0)")
  assert "step 1/" not in out and not (tmp_path / "model").exists()


def test_an_export_onto_a_full_disk_is_one_line_and_leaves_nothing(model_dirs, tiny_disk):
  code, out, err = run_tool("export", "--model_dir", model_dirs["small"], "--export_dir",
                            tiny_disk / "exports")
  assert code == 1
  assert_one_line(err, "t2t-lite-export", f"writing the export to {tiny_disk}/exports/1 failed: ",
                  "No space left on device", "MB); nothing was left in")
  assert list(tiny_disk.iterdir()) == []


def test_training_onto_a_full_disk_names_the_size_of_a_checkpoint(reverse_data, tiny_disk,
                                                                   _reverse_run):
  model_dir = tiny_disk / "model"
  code, out, err = _train(reverse_data, model_dir, "--train_steps=1", "--eval_steps=0")
  assert code == 1
  assert_one_line(err, "t2t-lite-train", f"saving the step 1 checkpoint in {model_dir} failed: ",
                  "No space left on device (a checkpoint of this run takes ",
                  " MB); no checkpoint was saved before")
  assert not list(model_dir.glob("*_temp")) and not (model_dir / "lease.json").exists()
  # The figure is what the same run's checkpoint takes on a disk with room: weights, Adam's
  # slots and the input pipeline's state (its shuffle buffer), not the weights alone.
  size = sum(path.stat().st_size for path in _reverse_run.glob("ckpt-1.*"))
  reported = float(err.split("a checkpoint of this run takes ")[1].split(" MB")[0])
  assert abs(reported - size / 1e6) <= 0.1, (reported, size)
