"""Nothing a user types loses data (issue 80): a command that would write over another run, the
run's best model, its own input or its data_dir is refused before it writes a byte (and, where
the check needs no model, before TensorFlow loads); a count of 0 or less is refused at parsing;
a full disk is one line, exit status 1, naming the file.

Each case runs the tool as a process: its exit status, exactly one `t2t-lite-X: error:` line on
stderr, and the hashes of every file it could touch equal before and after. The models are
random ones (make_random_model_dir): nothing here needs a trained model.
"""
import json
import os
import re
import shutil

import pytest
from conftest import file_hashes
from test_refusals import ENV, assert_refused_before_tensorflow, run_tool

WORDS = "a man rides horse the dog runs in park".split()


def assert_one_error(err, tool, *parts):
  """Exactly one line on stderr, `t2t-lite-<tool>: error: ...`, holding `parts` (any case)."""
  prog = "t2t-lite-" + tool.replace("_", "-")
  assert err.count("\n") == 1 and err.startswith(f"{prog}: error: "), err
  for part in parts:
    assert str(part).lower() in err.lower(), err


@pytest.fixture(scope="module")
def runs(make_random_model_dir):
  """Two runs' model_dirs (random weights, a checkpoint each; read only)."""
  return (make_random_model_dir("lost_a", WORDS, checkpoint_number=600),
          make_random_model_dir("lost_b", WORDS, checkpoint_number=200))


def _run_with_best(run, tmp_path):
  """A copy of `run` that kept a best model, as the trainer writes it: best/ a run directory of
  its own (run files and the weights) with best/best.json."""
  model_dir = tmp_path / "run"
  shutil.copytree(run, model_dir)
  shutil.copytree(run, model_dir / "best")
  (model_dir / "best" / "best.json").write_text(
      json.dumps({"metric": "dev_loss", "value": 3.5, "step": 600}))
  return model_dir


# ------------------------------------------------------------------ 1, 2: avg-checkpoints
@pytest.mark.parametrize("target", ["other_run", "model_dir", "best", "train", "best/avg",
                                    "other_average", "file"])
def test_avg_checkpoints_refuses_an_output_dir_that_is_not_its_own(runs, tmp_path, target):
  """Before TensorFlow loads, writing nothing: another run's model_dir, the run itself, a
  directory its trainer writes (best/ with best.json, train/ before it exists, anything in
  them), an earlier average of another run, a file."""
  model_dir = _run_with_best(runs[0], tmp_path)
  other_average = tmp_path / "other_average"
  shutil.copytree(runs[1], other_average)
  (other_average / "averaged.json").write_text(json.dumps(
      {"model_dir": runs[1], "averaged": [f"{runs[1]}/ckpt-200"]}))
  (tmp_path / "file").write_text("mine\n")
  output_dir = {"other_run": runs[1], "model_dir": model_dir, "other_average": other_average,
                "file": tmp_path / "file"}.get(target, model_dir / target)
  owner = os.path.realpath(model_dir)
  reason = {
      "other_run": f"holds {len(os.listdir(runs[1]))} entries (e.g. checkpoint) and no "
                   "averaged.json of an earlier average: give a new or empty directory",
      "model_dir": "is the model_dir: the average would replace its checkpoints",
      "other_average": f"holds an average of {runs[1]}, not of {model_dir}",
      "file": "is a file, not a directory",
      "best/avg": f"is inside the best/ of the run in {owner}, which t2t-lite-train writes",
  }.get(target, f"is the {target}/ of the run in {owner}, which t2t-lite-train writes")
  before = {path: file_hashes(path) for path in (tmp_path, runs[1])}
  assert_refused_before_tensorflow(
      "avg_checkpoints", [f"--model_dir={model_dir}", "--num_last=1", f"--output_dir={output_dir}"],
      f"output_dir {output_dir} {reason}", tmp_path)
  os.remove(tmp_path / "report")  # assert_refused_before_tensorflow's
  assert {path: file_hashes(path) for path in (tmp_path, runs[1])} == before
  assert not (model_dir / "train").exists()


def test_an_average_replaces_an_earlier_one_of_the_same_model_dir_only(runs, tmp_path):
  """Through the Python API, the same check as the tool's."""
  from t2t_lite.rundir.run_files import RunDirError
  from t2t_lite.train import averaging
  first = averaging.average_last(runs[0], 1, str(tmp_path / "avg"))
  record = json.loads((tmp_path / "avg" / "averaged.json").read_text())
  assert record["model_dir"] == runs[0] and record["output"] == first
  assert averaging.average_last(runs[0], 1, str(tmp_path / "avg")) == first  # replaced
  before = file_hashes(tmp_path)
  with pytest.raises(RunDirError, match=re.escape(f"holds an average of {runs[0]}, not of "
                                                  f"{runs[1]}: give a new or empty directory")):
    averaging.average_last(runs[1], 1, str(tmp_path / "avg"))
  assert file_hashes(tmp_path) == before


def test_avg_checkpoints_on_a_full_disk_is_one_line_and_leaves_no_directory(runs, tiny_disk):
  """The run files fit the 256 kB disk, the checkpoint does not: what was written goes."""
  before = file_hashes(runs[0])
  code, out, err = run_tool("avg_checkpoints", f"--model_dir={runs[0]}", "--num_last=1",
                            f"--output_dir={tiny_disk}/avg/new")
  assert code == 1 and out == "", err
  assert_one_error(err, "avg_checkpoints", f"writing {tiny_disk}/avg/new",
                   "no space left on device", f"; {tiny_disk}/avg was removed")
  assert os.listdir(tiny_disk) == [] and file_hashes(runs[0]) == before


# ------------------------------------------------------------------------ 5: train
@pytest.mark.parametrize("spelling", ["same", "symlink", "dot"])
def test_train_refuses_the_data_dir_as_model_dir(tmp_path, spelling):
  data_dir = tmp_path / "data"
  data_dir.mkdir()
  (data_dir / "manifest.json").write_text('{"problem": "algorithmic_reverse"}')
  (data_dir / "train-00000-of-00001.tfrecord").write_bytes(b"records")
  (tmp_path / "link").symlink_to(data_dir)
  model_dir = {"same": data_dir, "symlink": tmp_path / "link", "dot": f"{data_dir}/./"}[spelling]
  before = file_hashes(tmp_path)
  assert_refused_before_tensorflow(
      "train", ["--problem=algorithmic_reverse", "--hparams=transformer_tiny",
                f"--data_dir={data_dir}", f"--model_dir={model_dir}"],
      f"model_dir {model_dir} is the data_dir {data_dir}: the run's files would go among the "
      "data's", tmp_path)
  os.remove(tmp_path / "report")
  assert file_hashes(tmp_path) == before


# --------------------------------------------------------------- 3: output = input
@pytest.mark.parametrize("tool, spelling", [
    ("decode", "same"), ("decode", "symlink"), ("decode", "dot"), ("score", "same")])
def test_an_output_file_that_is_an_input_is_refused(runs, tmp_path, tool, spelling):
  source = tmp_path / "in.txt"
  source.write_text("a man rides\nthe dog runs\n")
  (tmp_path / "link.txt").symlink_to(source)
  output = {"same": source, "symlink": tmp_path / "link.txt", "dot": f"{tmp_path}/./in.txt"}[
      spelling]
  inputs = ([f"--input_file={source}"] if tool == "decode" else
            [f"--source_file={tmp_path}/link.txt", f"--target_file={source}"])
  before = file_hashes(tmp_path)
  assert_refused_before_tensorflow(
      tool, [f"--model_dir={runs[0]}", *inputs, f"--output_file={output}"],
      f"--output_file {output} is the input file ", tmp_path)
  os.remove(tmp_path / "report")
  assert file_hashes(tmp_path) == before


# ------------------------------------------------- 9: --continue_output of another input
def test_continue_output_longer_than_the_input_is_refused(runs, tmp_path):
  (tmp_path / "in.txt").write_text("a man\nthe dog\n")
  (tmp_path / "out.txt").write_text("1\n2\n3\n4\n5\n")
  before = file_hashes(tmp_path)
  assert_refused_before_tensorflow(
      "decode", [f"--model_dir={runs[0]}", f"--input_file={tmp_path}/in.txt",
                 f"--output_file={tmp_path}/out.txt", "--continue_output"],
      f"--continue_output: {tmp_path}/out.txt has 5 lines but {tmp_path}/in.txt has 2: it is "
      "not the output of this input", tmp_path)
  os.remove(tmp_path / "report")
  assert file_hashes(tmp_path) == before


# ------------------------------------------------------------- 4: counts of 0 or less
@pytest.mark.parametrize("tool, args", [
    ("score", ["--source_file=s", "--target_file=t", "--batch_size=-1"]),
    ("score", ["--source_file=s", "--target_file=t", "--batch_size=0"]),
    ("decode", ["--batch_size=0"]),
    ("avg_checkpoints", ["--output_dir=o", "--num_last=0"]),
])
def test_a_count_below_one_is_refused_at_parsing(tool, args, tmp_path):
  flag, value = args[-1].split("=")
  assert_refused_before_tensorflow(tool, ["--model_dir=m", *args],
                                   f"argument {flag}: must be >= 1, got {value}", tmp_path)


def test_the_python_api_refuses_a_batch_size_below_one(runs):
  import t2t_lite
  from t2t_lite.decode.decode_settings import DecodingError
  with pytest.raises(DecodingError, match="batch_size must be an integer >= 1, got 0"):
    t2t_lite.translate(runs[0], ["a man"], batch_size=0)


# ---------------------------------------------------------- 8: attention --output_dir=FILE
def test_attention_refuses_an_output_dir_that_is_a_file(runs, tmp_path):
  (tmp_path / "pictures").write_text("mine\n")
  before = file_hashes(tmp_path)
  assert_refused_before_tensorflow(
      "attention", [f"--model_dir={runs[0]}", "--text=a man", f"--output_dir={tmp_path}/pictures"],
      f"--output_dir {tmp_path}/pictures is a file, not a directory", tmp_path)
  os.remove(tmp_path / "report")
  assert file_hashes(tmp_path) == before


# ------------------------------------------------------------------- 7: a full disk
def _fill(disk):
  """Fills the file system at `disk` to its last byte."""
  with open(disk / "filler", "wb", buffering=0) as f:
    try:
      while True:
        f.write(b"\0" * 4096)
    except OSError:  # ENOSPC: full
      pass


@pytest.mark.parametrize("tool", ["decode", "score", "attention"])
def test_writing_onto_a_full_disk_is_one_line(runs, tmp_path, tiny_disk, tool):
  (tmp_path / "in.txt").write_text("a man rides\nthe dog runs\n")
  _fill(tiny_disk)
  output = tiny_disk / ("pictures" if tool == "attention" else "out.txt")
  args = {"decode": [f"--input_file={tmp_path}/in.txt", f"--output_file={output}",
                     "--beam_size=1", "--extra_length=2", "--no_progress"],
          "score": [f"--source_file={tmp_path}/in.txt", f"--target_file={tmp_path}/in.txt",
                    f"--output_file={output}"],
          "attention": ["--text=a man", "--target=the dog", f"--output_dir={output}"]}[tool]
  before = (tmp_path / "in.txt").read_bytes(), file_hashes(runs[0])
  code, out, err = run_tool(tool, f"--model_dir={runs[0]}", *args, env=ENV)
  # Log lines (the model chosen) may come first; the error is the last and only one.
  errors = [line for line in err.splitlines() if "error:" in line]
  assert code == 1 and "Traceback" not in err, err
  assert len(errors) == 1 and err.endswith(errors[0] + "\n"), err
  assert_one_error(errors[0] + "\n", tool, f"writing {output}", "no space left on device")
  assert ((tmp_path / "in.txt").read_bytes(), file_hashes(runs[0])) == before
