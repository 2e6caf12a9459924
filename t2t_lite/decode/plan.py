"""The decoding plan: how a loaded model decodes, decided once, at load time, and nowhere else.

A `DecodingPlan` settles the engine (`engine`: TensorFlow's, or LiteRT's for an exported
.tflite model, `litert`), the compute precision, whether the weight matmuls are XLA
programs of their own, how many searches a batch is split into (search.beams' `concurrent`)
and XLA, each with why. `decide` makes it from, in this order:
  1. the user's flags: a precision given (not auto), --xla;
  2. the machine's capabilities (mixed_precision.Machine: TPU, GPU compute capability, CPU
     bf16 / AMX / VNNI, oneDNN on or off), or none for a graph served elsewhere (the export);
  3. the measured table (MEASURED): the defaults measured on particular CPUs, each naming the
     bench that measured it.
`decide` is a pure function of plain values, so that every machine kind is tested on any. The
machine is read by `capabilities` alone (mixed_precision.Machine.this, the one reader training
shares): nothing else under t2t_lite/decode/ reads it. The tools' first line names the plan
(`describe`), and run outputs and the export record it (`record`); the search receives its
plain values.
"""
import dataclasses
import logging
import os
from typing import Optional

from t2t_lite.decode.decode_settings import DecodingError
from t2t_lite.modeling import mixed_precision

ENGINE = "tensorflow"
ENGINES = ("auto", "tensorflow", "litert")  # t2t-lite-decode --engine's choices
# --precision -> the LiteRT export's weights (t2t-lite-export --format=litert --quantization).
LITERT_QUANTIZATION = {"auto": "float32", "none": "float32", "fp16": "float16", "int8": "int8"}
logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Measured:
  """A default measured on particular machines: its value and the bench that measured it."""
  value: object
  bench: str


# What the benches measured (docs/benchmarks.md names each run); a new CPU kind is checked by
# running the bench its entry names.
MEASURED = {
    # auto's precision by TPU / GPU compute capability / CPU instructions and XLA: the table of
    # mixed_precision.choose (training shares it; both benches agreed on every kind measured).
    "auto_precision": Measured(mixed_precision.choose,
                               "bench/decode_speed.py, bench/train_throughput.py"),
    # Where TensorFlow runs without oneDNN its float32 matmul is Eigen's, slower than XLA's dot
    # for models this wide; narrower ones multiply too little to pay for the compiling.
    "compiled_matmuls_min_width": Measured(256, "bench/ctranslate2_decode.py, "
                                                "bench/multi30k_decode.py"),
    # Without oneDNN a step's compiled matmuls leave a core idle between them: a second
    # search fills it (float32 and int8 alike).
    "searches_without_onednn": Measured(2, "bench/ctranslate2_decode.py"),
    # Otherwise, by compute precision: bfloat16 / float16 steps leave cores idle (two), while
    # oneDNN's float32 and int8 matmuls keep them busy (one).
    "searches_by_precision": Measured({"none": 1, "int8": 1, "bf16": 2, "fp16": 2},
                                      "bench/decode_speed.py, bench/ctranslate2_decode.py"),
    # --engine=auto: TensorFlow's until a whole decode (not one step: issue 82 measured one
    # step 1.1x faster than XLA's on a Zen 2) is measured faster in LiteRT; the bench's LiteRT
    # rows (float32, float16, int8; 1 and 2 threads) against its TensorFlow rows decide it.
    "auto_engine": Measured("tensorflow", "bench/ctranslate2_decode.py"),
}
_SPLIT_WHY = "each batch searched as two halves at once (no oneDNN)"


@dataclasses.dataclass(frozen=True)
class DecodingPlan:
  """How a model decodes: plain values the loader and the search take as they are."""
  precision: str
  precision_why: str
  compiled_matmuls: bool = False
  compiled_why: str = ""
  searches: int = 1
  searches_why: str = ""
  xla: bool = False
  engine: str = ENGINE
  threads: Optional[int] = None  # LiteRT's interpreter threads (None: TensorFlow's engine)

  def computing(self):
    """"precision <name> (<why>)": the precision and, where this machine made them, the
    compiled matmuls and the split searches (what the first line said before the plan)."""
    reasons = [self.precision_why,
               self.compiled_why if self.compiled_matmuls and self.precision != "int8" else "",
               self.searches_why if self.searches_why == _SPLIT_WHY else ""]
    return f"precision {self.precision} ({'; '.join(r for r in reasons if r)})"

  def describe(self):
    """The plan in one line, ending with `computing()`: what the tools' first line says."""
    if self.engine == "litert":
      return (f"plan: engine litert, {self.threads} thread{'s' if self.threads > 1 else ''} "
              f"(XNNPACK); quantization {self.precision} ({self.precision_why})")
    searches = f"{self.searches} search{'es' if self.searches > 1 else ''} a batch"
    matmuls = "compiled" if self.compiled_matmuls else "not compiled"
    return (f"plan: engine {self.engine}, XLA {'on' if self.xla else 'off'}, {searches}, "
            f"weight matmuls {matmuls}; {self.computing()}")

  def record(self):
    """The plan as JSON values: what run outputs and the export record (without the fields of
    another engine's)."""
    return {k: v for k, v in dataclasses.asdict(self).items() if v is not None}


def decide(precision, xla, d_model=None, machine=None, inference=True):
  """The plan for decoding a model `d_model` wide in `precision` (a name or "auto") with or
  without `xla` on `machine` (a mixed_precision.Machine; None: a graph served elsewhere, which
  takes none of a machine's choices and needs a precision named) -> DecodingPlan."""
  if precision == mixed_precision.AUTO:
    if machine is None:
      raise ValueError("precision auto is chosen for a machine: name one for a graph served "
                       "elsewhere")
    name, why = MEASURED["auto_precision"].value(machine, xla)
    why = f"auto: {why}"
  else:
    mixed_precision.check(precision, inference=inference)
    name, why = precision, "asked for"
  compiled, compiled_why = compiled_matmuls(name, machine, xla, d_model)
  searches, searches_why = concurrent_searches(name, machine, xla, compiled)
  return DecodingPlan(name, why, compiled, compiled_why, searches, searches_why, bool(xla))


def _cpu_without_onednn(machine):
  return (machine is not None and not machine.onednn and not machine.tpu
          and not machine.gpu_capabilities)


def compiled_matmuls(precision, machine, xla, d_model):
  """Whether a model `d_model` wide decoding in `precision` (a name, not auto) on `machine`
  (None: served elsewhere), with or without XLA for the whole search, multiplies its weights by
  XLA programs of their own (quantization.py) -> (yes, why). int8 always does. Otherwise only
  float32 without XLA on a CPU where TensorFlow runs without oneDNN, for models at least
  MEASURED["compiled_matmuls_min_width"] wide: its float32 matmul is then Eigen's, while with
  oneDNN the search without XLA comes close to the XLA-compiled one. The rest of the search
  stays TensorFlow ops, so that no batch shape compiles more than its matmuls."""
  if precision == "int8":
    return True, "int8 matmuls are XLA programs"
  if (precision == "none" and not xla and _cpu_without_onednn(machine)
      and d_model >= MEASURED["compiled_matmuls_min_width"].value):
    return True, "float32 matmuls by XLA: TensorFlow runs without oneDNN on this CPU"
  return False, ""


def concurrent_searches(precision, machine, xla, compiled):
  """How many searches a batch is split into, run at the same time (search.beams'
  `concurrent`) -> (number, why): always a number, so that search.beams' own default is never
  what our tools run. With XLA one (the compiled search takes one batch); two where weight
  matmuls are compiled on a CPU without oneDNN; else by precision."""
  if xla:
    return 1, "one search: XLA compiles the whole search"
  if compiled and _cpu_without_onednn(machine):
    return MEASURED["searches_without_onednn"].value, _SPLIT_WHY
  number = MEASURED["searches_by_precision"].value[precision]
  return number, f"{'two searches' if number > 1 else 'one search'} in {precision}"


def capabilities():
  """This machine's capabilities (mixed_precision.Machine.this, which training reads too): the
  one read of the machine under t2t_lite/decode/."""
  return mixed_precision.Machine.this()


def here(precision, xla, d_model):
  """The plan for searching on this machine, and a precision given that is slow here warned of
  (mixed_precision.slower_here) before the first line, which names the plan."""
  machine = capabilities()
  if precision not in (mixed_precision.AUTO, "none"):
    slow = mixed_precision.slower_here(precision, machine, xla)
    if slow:
      logger.warning(slow)
  return decide(precision, xla, d_model, machine)


def elsewhere(precision, xla, d_model=None):
  """The plan for a graph served elsewhere (the SavedModel export) or for the weights alone:
  none of this machine's choices (no compiled matmuls, searches by precision, no warning),
  except that "auto" names the precision fastest on this machine, as the export says."""
  if precision == mixed_precision.AUTO:
    precision, why = MEASURED["auto_precision"].value(capabilities(), xla)
    return dataclasses.replace(decide(precision, xla, d_model), precision_why=f"auto: {why}")
  return decide(precision, xla, d_model)


def engine(asked):
  """--engine's value (ENGINES) -> the engine that decodes, and why: auto is MEASURED's."""
  if asked not in ENGINES:
    raise DecodingError(f"unknown engine {asked!r}: one of {', '.join(ENGINES)}")
  if asked == "auto":
    return MEASURED["auto_engine"].value, f"auto: {MEASURED['auto_engine'].bench} decides"
  return asked, "asked for"


def litert_quantization(precision):
  """--precision -> the LiteRT export's quantization (float32, float16, int8); bf16 refused
  in one line: LiteRT's builtin kernels hold no bfloat16 weights."""
  if precision not in LITERT_QUANTIZATION:
    raise DecodingError(f"--precision={precision} with the LiteRT engine: its exports hold "
                        "float32, float16 or int8 weights; use --precision none, fp16 or int8 "
                        "(or --engine=tensorflow)")
  return LITERT_QUANTIZATION[precision]


def litert(weights, threads=None, precision="auto"):
  """The plan of a LiteRT interpreter: an exported model's `quantization` (the export's JSON),
  run by `threads` threads (None: the cores this process may use)."""
  if threads is None:
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
  why = ("the export's" if precision == "auto" else f"--precision {precision}")
  return DecodingPlan(weights, why, engine="litert", threads=int(threads or 1))
