"""--precision=auto / --mixed_precision=auto: the table of mixed_precision.choose, and the tools
saying what they chose, recording it, and keeping a resumed run's own."""
import json
import os
import subprocess
import sys

import pytest

from conftest import train_in_process

from t2t_lite.decode import plan, translation
from t2t_lite.modeling import mixed_precision
from t2t_lite.modeling.mixed_precision import Machine

ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
INTEL, AMD = "GenuineIntel", "AuthenticAMD"
AMX = frozenset({"avx512f", "avx512_bf16", "amx_bf16", "amx_int8", "amx_tile"})
AVX512_BF16 = frozenset({"avx512f", "avx512_bf16", "avx512_vnni"})
AVX2 = frozenset({"avx2", "fma"})


@pytest.mark.parametrize("machine, xla, expected", [
    (Machine(INTEL, AMX), False, ("bf16", "AMX")),
    (Machine(INTEL, AMX), True, ("none", "XLA")),  # XLA's CPU dots do not use oneDNN's AMX
    (Machine(AMD, AVX512_BF16), False, ("bf16", "AMD")),
    (Machine(AMD, AVX512_BF16), True, ("none", "XLA")),
    (Machine(INTEL, AVX512_BF16), False, ("none", "no AMX")),  # the Xeon: bf16 0.71x
    (Machine(AMD, frozenset({"avx2", "fma"})), False, ("none", "no bfloat16")),
    (Machine(), False, ("none", "no bfloat16")),  # not Linux: nothing read, float32
    (Machine(INTEL, AMX, ((8, 0), (9, 0))), True, ("bf16", "8.0")),  # the slowest GPU decides
    (Machine(INTEL, AMX, ((7, 5),)), False, ("fp16", "7.5")),
    (Machine(INTEL, AMX, ((6, 1),)), False, ("none", "6.1")),
    (Machine(INTEL, frozenset(), (), tpu=True), True, ("bf16", "TPU")),
])
def test_auto_picks_by_the_table(machine, xla, expected):
  name, why = mixed_precision.choose(machine, xla)
  assert name == expected[0] and expected[1] in why, (name, why)


@pytest.mark.parametrize("machine, precision, xla", [
    (Machine(INTEL, AMX), "bf16", False),  # oneDNN's AMX kernels, which XLA does not call
    (Machine(AMD, AVX512_BF16), "bf16", False),
    (Machine(AMD, AVX512_BF16), "none", True),
    (Machine(INTEL, AVX512_BF16), "none", True),
    (Machine(INTEL, AMX, ((8, 0),)), "bf16", True),  # GPUs: XLA's fusions
    (Machine(INTEL, frozenset(), (), tpu=True), "bf16", True),
])
def test_training_compiles_with_xla_unless_bf16_runs_on_a_cpu(machine, precision, xla):
  assert mixed_precision.training_xla(precision, machine)[0] is xla


@pytest.mark.parametrize("machine, precision, xla, d_model, compiled", [
    (Machine(AMD, AVX2, onednn=False), "none", False, 512, True),  # Eigen's, not oneDNN's
    (Machine(AMD, AVX2, onednn=False), "none", False, 256, True),
    (Machine(AMD, AVX2, onednn=False), "none", False, 128, False),  # too small to gain
    (Machine(AMD, AVX2, onednn=False), "none", True, 512, False),  # the search is XLA's
    (Machine(AMD, AVX2, onednn=False), "bf16", False, 512, False),
    (Machine(AMD, AVX512_BF16), "none", False, 512, False),  # oneDNN's matmul
    (Machine(AMD, AVX2, ((8, 0),), onednn=False), "none", False, 512, False),  # a GPU's
    (Machine(AMD, AVX512_BF16), "int8", False, 64, True),  # int8's are XLA programs always
])
def test_decoding_compiles_its_float32_matmuls_where_tensorflow_has_no_onednn(
    machine, precision, xla, d_model, compiled):
  assert plan.compiled_matmuls(precision, machine, xla, d_model)[0] is compiled


@pytest.mark.parametrize("machine, precision, compiled, searches", [
    (Machine(AMD, AVX2, onednn=False), "none", True, 2),  # compiled float32 without oneDNN
    (Machine(AMD, AVX2, onednn=False), "int8", True, 2),  # int8 alike
    (Machine(AMD, AVX2, onednn=False), "none", False, 1),  # by precision: float32's one
    (Machine(AMD, AVX512_BF16), "int8", True, 1),  # int8 with oneDNN: one search measured faster
    (Machine(AMD, AVX2, ((8, 0),), onednn=False), "int8", True, 1),  # a GPU's
])
def test_decoding_splits_a_batch_into_two_searches_where_its_matmuls_are_compiled_without_onednn(
    machine, precision, compiled, searches):
  assert plan.concurrent_searches(precision, machine, False, compiled)[0] == searches


def test_an_explicit_precision_wins_and_a_wrong_one_is_refused():
  assert mixed_precision.resolve("none", xla=False) == ("none", "asked for")
  assert mixed_precision.resolve("fp16", xla=True) == ("fp16", "asked for")
  name, why = mixed_precision.resolve("auto", xla=False)
  assert name in mixed_precision.PRECISIONS and why.startswith("auto: ")
  with pytest.raises(ValueError, match="unknown precision 'bf32'"):
    mixed_precision.resolve("bf32", xla=False)


def test_this_machine_is_read_from_proc_cpuinfo():
  machine = Machine.this()
  if os.path.exists("/proc/cpuinfo"):
    flags = next(line for line in open("/proc/cpuinfo") if line.startswith("flags"))
    assert machine.cpu_flags == frozenset(flags.split(":", 1)[1].split())
    vendor = next(line for line in open("/proc/cpuinfo") if line.startswith("vendor_id"))
    assert machine.vendor == vendor.split(":", 1)[1].strip() != ""
  assert all(len(capability) == 2 for capability in machine.gpu_capabilities)
  assert not machine.tpu


SMALL = "num_layers=1,d_model=16,d_ff=32,num_heads=2,batch_size=64"


def _train(model_dir, data_dir, steps, *extra):
  run = subprocess.run(
      [sys.executable, "-m", "t2t_lite.bin.train", "--problem=algorithmic_reverse",
       "--hparams=transformer_tiny", f"--hparams_overrides={SMALL}",
       f"--data_dir={data_dir}", f"--model_dir={model_dir}", f"--train_steps={steps}",
       "--eval_steps=0", "--eval_decode_examples=0", *extra],
      env=ENV, capture_output=True, text=True, timeout=600)
  assert run.returncode == 0, run.stderr
  return run.stdout


def test_training_says_what_auto_chose_records_it_and_a_resumed_run_keeps_its_own(
    reverse_dir, tmp_path):
  # Neither flag given: the precision chosen without XLA, then XLA as that precision wants.
  chosen, why = mixed_precision.resolve("auto", xla=False)
  xla, why_xla = mixed_precision.training_xla(chosen, Machine.this())
  out = _train(tmp_path / "auto", reverse_dir, 1)  # says and records it before its first step
  assert f"computing in {chosen} ({why})" in out.splitlines()
  assert f"XLA {'on' if xla else 'off'} ({why_xla})" in out.splitlines()
  assert json.loads((tmp_path / "auto" / "run.json").read_text())["mixed_precision"] == chosen

  # A run started in the precision auto would not choose here resumes in it, not refused.
  other = "none" if chosen == "bf16" else "bf16"
  train_in_process("algorithmic_reverse", reverse_dir, tmp_path / "other", SMALL, 2,
                   mixed_precision=other)  # only resumed below
  out = _train(tmp_path / "other", reverse_dir, 3, "--noxla")
  assert f"computing in {other} (auto: the precision this run was started in)" in out
  assert "XLA off (asked for)" in out.splitlines()
  assert "step 3/3" in out or "done: step 3" in out
  assert json.loads((tmp_path / "other" / "run.json").read_text())["mixed_precision"] == other


def test_decode_names_the_precision_and_auto_decodes_as_its_choice_does(make_random_model_dir):
  # Wide enough for compiled float32 matmuls where TensorFlow has no oneDNN (below).
  d_model = plan.MEASURED["compiled_matmuls_min_width"].value
  model_dir = make_random_model_dir("auto", "a man rides horse the dog runs".split(),
                                    overrides=f"d_model={d_model},d_ff={2 * d_model}")

  def decode(*extra, text="a man rides\nthe dog runs\n", env=ENV):
    run = subprocess.run(
        [sys.executable, "-m", "t2t_lite.bin.decode", f"--model_dir={model_dir}",
         "--no_progress", "--extra_length=4", *extra],
        input=text, env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    info = [line for line in run.stderr.splitlines() if line.startswith("INFO decoding")]
    return run.stdout, info[0]

  auto = plan.decide("auto", False, d_model, plan.capabilities())
  chosen = auto.precision
  auto_out, auto_line = decode()
  assert auto_line.endswith(f"; {auto.describe()}")  # the plan, ending with its precision
  given_out, given_line = decode(f"--precision={chosen}")
  given = plan.decide(chosen, False, d_model, plan.capabilities())
  assert given_line.endswith(f"; {given.describe()}")
  assert given.computing().startswith(f"precision {chosen} (asked for")
  assert auto_out == given_out and len(auto_out.splitlines()) == 2
  # TensorFlow without oneDNN (its default without AVX-512 VNNI, bf16 or AMX) and with it:
  # float32's weight matmuls by XLA programs of their own only without, the same outputs.
  off_out, off_line = decode("--precision=none", env=dict(ENV, TF_ENABLE_ONEDNN_OPTS="0"))
  on_out, on_line = decode("--precision=none", env=dict(ENV, TF_ENABLE_ONEDNN_OPTS="1"))
  assert off_line.endswith("; precision none (asked for; float32 matmuls by XLA: TensorFlow "
                           "runs without oneDNN on this CPU; each batch searched as two "
                           "halves at once (no oneDNN))")
  assert on_line.endswith("; precision none (asked for)")
  assert off_out == on_out and len(off_out.splitlines()) == 2  # two searches and one alike
  # What the line says is what the translator does: this process's TensorFlow, as it is.
  translator = translation.Translator.from_model_dir(model_dir, precision="none")
  assert translator.searches == (1 if Machine.this().onednn else 2)
  xla_chosen, xla_why = mixed_precision.resolve("auto", xla=True)
  # No lines: the choice is named all the same, without compiling a search for nothing.
  assert decode("--xla", text="")[1].endswith(f"; precision {xla_chosen} ({xla_why})")
