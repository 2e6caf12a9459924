"""Every refusal before TensorFlow loads: a mistyped name, a bad hparams override, a model_dir
that holds no run or an export_dir an export may not go into is refused by the tool in a
moment, with one line on stderr and exit status 2, without importing TensorFlow (which takes
seconds). And without --verbose a tool prints none of TensorFlow's own lines, whatever
TF_CPP_MIN_LOG_LEVEL says.

Each refusal runs as two processes: the console script, as a user runs it, for what it prints
and its exit status; and a wrapper that calls the tool's main() and then writes whether
`tensorflow` is in sys.modules. No wall-clock assertion: a slow machine passes alike.
"""
import os
import subprocess
import sys

import pytest

# No TF_CPP_MIN_LOG_LEVEL: the tools must be quiet by themselves.
ENV = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}
WORDS = "a man rides horse the dog runs in park".split()

# python -c _WRAPPER <report file> <tool module> <flags...>: runs the tool as its console script
# does, then writes "True" to the report file if TensorFlow was imported, else "False".
_WRAPPER = """
import importlib, sys
report, tool, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
sys.argv = [tool] + argv  # What t2t_lite/bin/__init__.py reads, as in the console script.
try:
  sys.exit(importlib.import_module("t2t_lite.bin." + tool).main(argv))
finally:
  with open(report, "w") as f:
    f.write(str("tensorflow" in sys.modules))
"""


def _command(tool):
  """The console script of `tool` (a module of t2t_lite/bin/) that pip installed beside this
  Python, or the module run with -m where there is none."""
  script = os.path.join(os.path.dirname(sys.executable), "t2t-lite-" + tool.replace("_", "-"))
  return [script] if os.path.exists(script) else [sys.executable, "-m", f"t2t_lite.bin.{tool}"]


def run_tool(tool, *args, env=ENV):
  """(exit status, stdout, stderr) of the console script."""
  run = subprocess.run(_command(tool) + [str(a) for a in args], env=env,
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
  return run.returncode, run.stdout, run.stderr


def run_wrapped(tool, *args, report, env=ENV):
  """(exit status, stdout, stderr, whether TensorFlow was imported) of the tool's main()."""
  run = subprocess.run([sys.executable, "-c", _WRAPPER, str(report), tool, *map(str, args)],
                       env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                       timeout=300)
  return run.returncode, run.stdout, run.stderr, report.read_text() == "True"


def assert_refused_before_tensorflow(tool, args, reason, tmp_path, env=ENV):
  """The tool exits 2 with exactly one line on stderr, `t2t-lite-<tool>: error: ...reason...`,
  and nothing on stdout, having never imported TensorFlow."""
  code, out, err = run_tool(tool, *args, env=env)
  prog = "t2t-lite-" + tool.replace("_", "-")
  assert (code, out) == (2, ""), (code, out, err)
  assert err.count("\n") == 1 and err.startswith(f"{prog}: error: "), err
  assert reason in err, err
  code, _, _, imported = run_wrapped(tool, *args, report=tmp_path / "report", env=env)
  assert code == 2 and not imported


@pytest.fixture()
def home(tmp_path):
  """An environment whose $T2T_LITE_HOME (where the trainer's default directories go) is a
  path that does not exist yet: a refused command must not create it."""
  return dict(ENV, T2T_LITE_HOME=str(tmp_path / "home"))


@pytest.mark.parametrize("args, reason", [
    (["--problem=wmt_endee"], "unknown problem 'wmt_endee'; did you mean 'wmt_ende'"),
    (["--problem=wmt_ende", "--hparams=nope"], "unknown hparams 'nope' (known: "),
    (["--problem=wmt_ende", "--hparams_overrides=d_model=x"],
     "bad value for hparam 'd_model': 'x' is not an integer"),
], ids=["problem", "hparams", "overrides"])
def test_train_refuses_names_and_overrides_before_tensorflow_and_prints_no_directories(
    args, reason, tmp_path, home):
  """Its data_dir and model_dir lines (stdout) come only once the command is known to be good."""
  assert_refused_before_tensorflow("train", args, reason, tmp_path, env=home)
  assert not (tmp_path / "home").exists()


def test_decode_refuses_a_model_dir_without_a_run_before_tensorflow(tmp_path):
  assert_refused_before_tensorflow(
      "decode", [f"--model_dir={tmp_path}/none"],
      f"{tmp_path}/none/hparams.json is missing: is {tmp_path}/none a t2t-lite-train model_dir?",
      tmp_path)


def test_decode_help_does_not_load_tensorflow(tmp_path):
  code, out, err = run_tool("decode", "--help")
  assert code == 0 and out.startswith("usage: t2t-lite-decode") and err == ""
  assert run_wrapped("decode", "--help", report=tmp_path / "report")[3] is False


def test_tune_refuses_unknown_ranged_hparams_before_tensorflow(tmp_path):
  assert_refused_before_tensorflow(
      "tune", ["--problem=algorithmic_reverse", "--ranged_hparams=nope",
               f"--study_dir={tmp_path}/study"], "unknown ranged hparams 'nope'", tmp_path)
  assert not (tmp_path / "study").exists()


@pytest.fixture(scope="module")
def model_dir(make_random_model_dir):
  return make_random_model_dir("refusals", WORDS)


@pytest.mark.parametrize("export_format, reason", [
    ("savedmodel", "holds 1 entries that are not export versions (e.g. notes.txt)"),
    ("ctranslate2", "is not empty (1 entries, e.g. notes.txt)")])
def test_export_refuses_a_directory_that_is_not_an_export_before_tensorflow(
    model_dir, tmp_path, export_format, reason):
  """As the Python API does: the same check (decode/export_checks.py) runs in both."""
  export_dir = tmp_path / "not_an_export"
  export_dir.mkdir()
  (export_dir / "notes.txt").write_text("mine\n")
  assert_refused_before_tensorflow(
      "export", [f"--model_dir={model_dir}", f"--export_dir={export_dir}",
                 f"--format={export_format}"], f"export_dir {export_dir} {reason}", tmp_path)
  assert os.listdir(export_dir) == ["notes.txt"]


@pytest.mark.parametrize("tool, args, reason", [
    ("export", ["--export_dir={tmp}/exports"], "{tmp}/none/hparams.json is missing"),
    ("score", ["--source_file={tmp}/src", "--target_file={tmp}/tgt"],
     "{tmp}/none/hparams.json is missing"),
    ("attention", ["--text=a man", "--output_dir={tmp}/pictures"],
     "{tmp}/none/hparams.json is missing"),
    ("avg_checkpoints", ["--output_dir={tmp}/avg"], "{tmp}/none/hparams.json is missing"),
])
def test_the_tools_that_read_a_run_refuse_a_model_dir_without_one_before_tensorflow(
    tool, args, reason, tmp_path):
  args = [f"--model_dir={tmp_path}/none"] + [a.format(tmp=tmp_path) for a in args]
  assert_refused_before_tensorflow(tool, args, reason.format(tmp=tmp_path), tmp_path)
  assert sorted(os.listdir(tmp_path)) == ["report"]  # Nothing written.


def test_score_refuses_a_missing_input_file_before_tensorflow(model_dir, tmp_path):
  assert_refused_before_tensorflow(
      "score", [f"--model_dir={model_dir}", f"--source_file={tmp_path}/src",
                f"--target_file={tmp_path}/tgt"], f"{tmp_path}/src does not exist", tmp_path)


def test_datagen_refuses_an_unknown_problem_before_tensorflow(tmp_path):
  assert_refused_before_tensorflow(
      "datagen", ["--problem=multi30k_endee", f"--data_dir={tmp_path}/data"],
      "unknown problem 'multi30k_endee'; did you mean 'multi30k_ende'", tmp_path)
  assert not (tmp_path / "data").exists()


def test_no_tensorflow_lines_whatever_tf_cpp_min_log_level_says(model_dir, tmp_path):
  """A refusal after TensorFlow loaded and built the model (it probes CUDA then: "failed call
  to cuInit" on a machine without a GPU), with the TF_CPP_MIN_LOG_LEVEL=2 many users set: one
  line on stderr all the same."""
  (tmp_path / "in.txt").write_text("a man\n")
  missing = os.path.join(model_dir, "ckpt-999")
  code, out, err, imported = run_wrapped(
      "decode", f"--model_dir={model_dir}", f"--checkpoint_path={missing}",
      f"--input_file={tmp_path}/in.txt", "--no_progress", report=tmp_path / "report",
      env=dict(ENV, TF_CPP_MIN_LOG_LEVEL="2"))
  assert imported  # The lines it would print come with TensorFlow.
  assert (code, out) == (2, "") and err == (
      f"t2t-lite-decode: error: checkpoint {missing} not found (no {missing}.index)\n")


@pytest.mark.parametrize("tool, args, reason", [
    ("decode", ["--model_dir=m", "--precision=bf61"], "argument --precision: invalid choice: 'bf61'"),
    ("export", ["--model_dir=m", "--export_dir=e", "--quantization=bogus"],
     "argument --quantization: invalid choice: 'bogus'"),
    ("train", ["--problem=wmt_ende", "--cooldown_patience=x"],
     "argument --cooldown_patience: invalid int value: 'x'"),
    ("tune", ["--problem=wmt_ende", "--ranged_hparams=r", "--study_dir=s", "--trials=0"],
     "--trials and --heartbeat_seconds must be >= 1"),
    ("score", ["--model_dir=m", "--source_file=s", "--batch_size=x"],
     "argument --batch_size: invalid int value: 'x'"),
    ("attention", ["--model_dir=m", "--text=t", "--output_dir=o", "--precision=bf61"],
     "argument --precision: invalid choice: 'bf61'"),
    ("avg_checkpoints", ["--model_dir=m", "--output_dir=o", "--num_last=x"],
     "argument --num_last: invalid int value: 'x'"),
    ("datagen", ["--problem=wmt_ende", "--data_dir=d", "--workers=x"],
     "argument --workers: invalid int value: 'x'"),
], ids=lambda v: v if isinstance(v, str) and not v.startswith(("arg", "--")) else None)
def test_a_bad_flag_value_is_one_line_with_a_hint_not_the_usage_page(tool, args, reason, tmp_path):
  """argparse's own refusals too: one line naming the flag, then where the help is."""
  prog = "t2t-lite-" + tool.replace("_", "-")
  assert_refused_before_tensorflow(tool, args, reason, tmp_path)
  assert run_tool(tool, *args)[2].rstrip().endswith(f"(see {prog} --help)")
