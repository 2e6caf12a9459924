"""The decoding plan (t2t_lite/decode/plan.py): decided from plain values, so every machine kind
is tested here on any; its picks are those the code before it made (mixed_precision.for_search
and search.beams' default by compute dtype), the same for a graph served elsewhere, and the
tools name and record it."""
import json
import pathlib

import pytest

from t2t_lite.decode import plan
from t2t_lite.modeling import mixed_precision
from t2t_lite.modeling.mixed_precision import Machine

ROOT = pathlib.Path(__file__).resolve().parents[1]
INTEL, AMD = "GenuineIntel", "AuthenticAMD"
ZEN3 = Machine(AMD, frozenset({"avx2", "fma"}), onednn=False)  # TensorFlow's default: no oneDNN
ZEN4 = Machine(AMD, frozenset({"avx2", "avx512f", "avx512_bf16", "avx512_vnni"}))
AMX = Machine(INTEL, frozenset({"avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16",
                                "amx_int8", "amx_tile"}))
GPU = Machine(INTEL, frozenset({"avx2"}), ((8, 0),), onednn=False)  # an A100 host
OLD_GPU = Machine(INTEL, frozenset({"avx2"}), ((7, 5),))  # a T4 host
TPU = Machine(INTEL, frozenset({"avx2"}), tpu=True)
MACHINES = {"zen3": ZEN3, "zen4": ZEN4, "amx": AMX, "gpu": GPU, "old_gpu": OLD_GPU, "tpu": TPU}


def before(precision, xla, d_model, machine):
  """What the code before the plan ran, as it read (e8aea19): mixed_precision.for_search's
  precision, compiled matmuls and searches, None standing for search.beams' default (2 in
  bfloat16 or float16, else 1; one search under XLA) -> (precision, compiled, searches)."""
  if precision == "auto":
    precision = mixed_precision.choose(machine, xla)[0]
  gpu_or_tpu = machine.tpu or machine.gpu_capabilities
  compiled = precision == "int8" or (precision == "none" and not xla and not machine.onednn
                                     and not gpu_or_tpu and d_model >= 256)
  searches = 2 if compiled and not xla and not machine.onednn and not gpu_or_tpu else None
  if searches is None:
    searches = 1 if xla or precision in ("none", "int8") else 2
  return precision, compiled, searches


@pytest.mark.parametrize("name, precision, xla, d_model, expected", [
    # Zen 3, AVX2, TensorFlow without oneDNN: float32 with compiled matmuls, two searches
    ("zen3", "auto", False, 512, ("none", True, 2)),
    ("zen3", "auto", False, 128, ("none", False, 1)),  # too narrow to compile
    ("zen3", "auto", True, 512, ("none", False, 1)),  # the search is XLA's
    ("zen3", "int8", False, 64, ("int8", True, 2)),
    ("zen3", "bf16", False, 512, ("bf16", False, 2)),
    # Zen 4, AVX-512 bf16 with oneDNN: bf16, two searches; under XLA float32, one
    ("zen4", "auto", False, 512, ("bf16", False, 2)),
    ("zen4", "auto", True, 512, ("none", False, 1)),
    ("zen4", "int8", False, 512, ("int8", True, 1)),
    ("zen4", "none", False, 512, ("none", False, 1)),
    # Intel AMX: bf16
    ("amx", "auto", False, 512, ("bf16", False, 2)),
    ("amx", "auto", True, 512, ("none", False, 1)),
    # GPUs by compute capability, whatever their host's oneDNN
    ("gpu", "auto", False, 512, ("bf16", False, 2)),
    ("gpu", "none", False, 512, ("none", False, 1)),
    ("old_gpu", "auto", True, 512, ("fp16", False, 1)),
    ("old_gpu", "auto", False, 512, ("fp16", False, 2)),
    # TPU: bf16, XLA's one search
    ("tpu", "auto", True, 512, ("bf16", False, 1)),
])
def test_the_plan_picks_for_each_machine_kind_what_the_code_before_it_did(
    name, precision, xla, d_model, expected):
  machine = MACHINES[name]
  decided = plan.decide(precision, xla, d_model, machine)
  picks = (decided.precision, decided.compiled_matmuls, decided.searches)
  assert picks == expected == before(precision, xla, d_model, machine)
  assert decided.xla is xla and decided.engine == "tensorflow"
  assert decided == plan.decide(precision, xla, d_model, machine)  # deterministic


@pytest.mark.parametrize("machine", MACHINES.values())
@pytest.mark.parametrize("precision", ["auto", "none", "bf16", "fp16", "int8"])
@pytest.mark.parametrize("xla", [False, True])
@pytest.mark.parametrize("d_model", [64, 256, 512])
def test_every_combination_matches_the_code_before_the_plan(machine, precision, xla, d_model):
  decided = plan.decide(precision, xla, d_model, machine)
  assert (decided.precision, decided.compiled_matmuls, decided.searches) == before(
      precision, xla, d_model, machine)
  assert isinstance(decided.searches, int)  # never search.beams' own default


def test_the_first_line_names_the_plan_ending_with_the_precision_as_before():
  decided = plan.decide("none", False, 512, ZEN3)
  assert decided.computing() == (
      "precision none (asked for; float32 matmuls by XLA: TensorFlow runs without oneDNN on "
      "this CPU; each batch searched as two halves at once (no oneDNN))")
  assert decided.describe() == ("plan: engine tensorflow, XLA off, 2 searches a batch, weight "
                                f"matmuls compiled; {decided.computing()}")
  auto = plan.decide("auto", False, 512, ZEN4)
  assert auto.computing() == "precision bf16 (auto: this AMD CPU has AVX-512 bfloat16)"
  assert plan.decide("int8", False, 512, ZEN4).computing() == "precision int8 (asked for)"
  assert json.loads(json.dumps(auto.record())) == dict(
      precision="bf16", precision_why="auto: this AMD CPU has AVX-512 bfloat16",
      compiled_matmuls=False, compiled_why="", searches=2, searches_why="two searches in bf16",
      xla=False, engine="tensorflow")


@pytest.mark.parametrize("precision, searches", [("none", 1), ("bf16", 2), ("int8", 1)])
def test_a_graph_served_elsewhere_takes_none_of_the_machines_choices(precision, searches):
  served = plan.decide(precision, False, 512)  # no machine: the export's
  assert (served.compiled_matmuls or precision == "int8", served.searches) == (
      precision == "int8", searches)
  assert plan.elsewhere(precision, False, 512) == served
  with pytest.raises(ValueError, match="precision auto is chosen for a machine"):
    plan.decide("auto", False, 512)
  with pytest.raises(ValueError, match="unknown precision 'bf32'"):
    plan.decide("bf32", False, 512, ZEN3)


def test_auto_elsewhere_names_this_machines_precision_and_nothing_else_of_it():
  served = plan.elsewhere("auto", False, 512)
  here = plan.decide("auto", False, 512, plan.capabilities())
  assert (served.precision, served.precision_why) == (here.precision, here.precision_why)
  assert not served.compiled_matmuls or served.precision == "int8"


def test_each_measured_default_names_the_benches_that_measured_it():
  for name, measured in plan.MEASURED.items():
    benches = [b.strip() for b in measured.bench.split(",")]
    assert benches and all((ROOT / bench).is_file() for bench in benches), name


def test_the_export_records_the_plan_decided_without_this_machine(make_random_model_dir,
                                                                  tmp_path):
  """The SavedModel export's settings file records its plan: plan.elsewhere's (no compiled
  matmuls, searches by precision), the same on every machine for a precision named."""
  from t2t_lite.decode import export, translation
  model_dir = make_random_model_dir("plan", "a man rides horse the dog runs".split())
  path = export.export_model_dir(model_dir, str(tmp_path / "exports"), precision="none")
  with open(pathlib.Path(path) / "assets.extra" / export.SETTINGS_FILE) as f:
    recorded = json.load(f)
  assert recorded["plan"] == plan.decide("none", False).record()
  assert recorded["precision_chosen"] == "precision none (asked for)"
  # What decode runs is this machine's plan, which its translator searches with.
  translator = translation.Translator.from_model_dir(model_dir, precision="none")
  assert translator.loaded.plan == plan.decide("none", False, 64, plan.capabilities())
  assert translator.searches == translator.loaded.plan.searches
