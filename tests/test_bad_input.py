"""Bad input to every tool: one line on stderr naming the value or path, exit status 2 (1 for
run-time failures), nothing written that a later run would trip over, no TensorFlow noise.

The CLI cases run the console scripts as their own processes, as a user would.
"""
import json
import os
import subprocess
import sys

import pytest

import t2t_lite

# No TF_CPP_MIN_LOG_LEVEL: the tools must be quiet by themselves.
ENV = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
ENV["CUDA_VISIBLE_DEVICES"] = ""  # the same on a machine with a GPU


def run_tool(tool, *args, stdin=subprocess.DEVNULL, timeout=300):
  """(exit status, stdout, stderr) of `python -m t2t_lite.bin.<tool> args`."""
  run = subprocess.run([sys.executable, "-m", f"t2t_lite.bin.{tool}", *map(str, args)],
                       env=ENV, stdin=stdin, capture_output=True, text=True, timeout=timeout)
  return run.returncode, run.stdout, run.stderr


def assert_one_line(err, prog, *parts):
  assert err.count("\n") == 1 and err.startswith(f"{prog}: error: "), err
  for part in parts:
    assert str(part) in err, err


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
    ("extra_decode_length=0", "extra_decode_length must be >= 1, got 0"),
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
                     match=f"^bad value for hparam 'num_layers' in {path}: 'two' is not a int"):
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
def test_tools_print_no_tensorflow_noise_unless_verbose(tmp_path):
  quiet = run_tool("decode", "--model_dir", tmp_path / "none")
  loud = run_tool("decode", "--model_dir", tmp_path / "none", "--verbose")
  message = (f"t2t-lite-decode: error: {tmp_path}/none/hparams.json is missing: is "
             f"{tmp_path}/none a t2t-lite-train model_dir?\n")
  assert quiet == (2, "", message)
  assert loud[0] == 2 and loud[2].endswith(message)
  assert "cpu_feature_guard" in loud[2] or "cuda" in loud[2].lower()  # TF's own lines are back
