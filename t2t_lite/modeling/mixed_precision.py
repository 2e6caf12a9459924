"""Compute precision: the one place that names the precisions and builds a model in one.

  none  float32 everywhere.
  bf16  bfloat16 matmuls and activations, float32 weights (Keras "mixed_bfloat16"): TPUs, recent
        GPUs, and CPUs with AVX-512 bf16 or AMX. Softmax, LayerNorm, the residual stream,
        logits, log-probabilities, the loss and beam scores stay float32 (attention.py,
        embedding.py, transformer.py), so rankings are stable.
  fp16  float16 the same way (GPUs); training adds dynamic loss scaling (trainer.py).
  int8  decoding only: a float32 model whose matmuls with a weight run in int8 (quantization.py:
        weights per output unit, activations per row), where the CPU has VNNI or AMX-INT8.

  auto  the fastest of these for our model on this machine (`choose`), the default of training,
        decode, export and `translate()`; the tools print what it chose and why.

A precision given that is slow on this machine (fp16 on a CPU; bf16 or int8 on a CPU without
their instructions: `slower_here`) is warned of first, naming the fast choice; not refused.

What else decoding decides from the machine (compiled weight matmuls, concurrent searches) is
the decoding plan's (t2t_lite/decode/plan.py), which reads the machine through `Machine` too.

Training (--mixed_precision) and inference (--precision of decode, export, attention and
`translate()`) take the same names. Checkpoints hold float32 weights in every precision, so a
checkpoint of any run loads into any precision; a bf16 model for inference rounds them to
bfloat16 once (`inference_model`).
"""
import contextlib
import dataclasses
import logging
import os

PRECISIONS = {"none": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}
# Inference needs no float32 master weights: a bf16 model for decoding holds its weights in
# bfloat16 themselves, so that no decoding step casts every weight again. The rounding is the
# one that cast made, and LayerNorm, softmax and logits still come out in float32: the outputs
# are the mixed policy's.
INFERENCE_POLICIES = dict(PRECISIONS, bf16="bfloat16", int8="float32")
AUTO = "auto"
CHOICES = (AUTO,) + tuple(PRECISIONS)  # what the trainer's flag accepts
INFERENCE_CHOICES = (AUTO,) + tuple(INFERENCE_POLICIES)  # what decoding's flags accept
logger = logging.getLogger(__name__)


def check(precision, error=ValueError, inference=False):
  """Raises `error` with a one-line message unless `precision` is one of PRECISIONS (with
  `inference`, of INFERENCE_POLICIES)."""
  names = INFERENCE_POLICIES if inference else PRECISIONS
  if precision not in names:
    raise error(f"unknown precision {precision!r}; expected one of {', '.join(names)}")


@contextlib.contextmanager
def building(precision, inference=False):
  """Layers created inside compute in `precision` (Keras reads its global dtype policy when a
  layer is made), with inference=True in INFERENCE_POLICIES' dtypes; the previous policy is put
  back afterwards."""
  import keras  # Here, so that the flags can read PRECISIONS without loading TensorFlow.
  check(precision, inference=inference)
  policy = keras.mixed_precision.global_policy()
  keras.mixed_precision.set_global_policy(
      (INFERENCE_POLICIES if inference else PRECISIONS)[precision])
  try:
    yield
  finally:
    keras.mixed_precision.set_global_policy(policy)


def inference_model(model, precision, compiled_matmuls=False):
  """A Transformer for decoding in `precision` with the weights of `model` (float32), built in
  INFERENCE_POLICIES' dtypes (int8: a float32 model quantized, quantization.py). Returns `model`
  itself for float32, unless `compiled_matmuls` (quantization.py: a float32 copy whose weight
  matmuls are XLA programs of their own)."""
  # Here: the flags import this module without TensorFlow.
  from t2t_lite.modeling import architectures
  if precision == "none" and not compiled_matmuls:
    return model
  with building(precision, inference=True):
    converted = architectures.build_model(model.hparams, model.vocab_size,
                                          spans=architectures.spans_of(model))
  converted.set_weights(model.get_weights())  # cast to the new weights' dtypes
  if precision == "int8" or compiled_matmuls:
    converted.compile_kernels(int8=precision == "int8")
  return converted


def of_model(model):
  """The precision a built model computes in (its dtype policy), by the names above."""
  from t2t_lite.modeling import quantization  # Here: the flags import this without TensorFlow.
  if quantization.quantized(model):
    return "int8"
  names = {policy: name for table in (PRECISIONS, INFERENCE_POLICIES)
           for name, policy in table.items() if name != "int8"}
  return names.get(model.dtype_policy.name, model.dtype_policy.name)


@dataclasses.dataclass(frozen=True)
class Machine:
  """What the choice of precision reads of a machine."""
  vendor: str = ""  # /proc/cpuinfo's vendor_id: GenuineIntel, AuthenticAMD, ...
  cpu_flags: frozenset = frozenset()
  gpu_capabilities: tuple = ()  # (major, minor) compute capability of each GPU
  tpu: bool = False
  onednn: bool = True  # whether TensorFlow's CPU kernels are oneDNN's (else Eigen's)

  @classmethod
  def this(cls, tpu=False):
    """This machine: its CPU from /proc/cpuinfo (none elsewhere: float32), its GPUs from
    TensorFlow."""
    import tensorflow as tf  # Here, so that the flags can read CHOICES without TensorFlow.
    vendor, cpu_flags = "", frozenset()
    if os.path.exists("/proc/cpuinfo"):
      with open("/proc/cpuinfo") as f:
        fields = dict(line.split(":", 1) for line in f if ":" in line)
      fields = {k.strip(): v.strip() for k, v in fields.items()}
      vendor, cpu_flags = fields.get("vendor_id", ""), frozenset(fields.get("flags", "").split())
    capabilities = tuple(
        tf.config.experimental.get_device_details(gpu).get("compute_capability", (0, 0))
        for gpu in tf.config.list_physical_devices("GPU"))
    return cls(vendor, cpu_flags, capabilities, tpu, _onednn_on())


def choose(machine, xla):
  """The fastest precision for our model on `machine` (a Machine) with or without XLA ->
  (name, why). A table of what bench/train_throughput.py and bench/decode_speed.py measured on
  each kind (training and decoding agreed on every one; docs/benchmarks.md), not a start-up
  measurement: a machine kind must get the same choice every time, while a shared VM's speed
  drifts by tens of percent and a short measurement is not a whole step; and a table costs
  nothing at start-up. Both benches print what this chose beside what was faster, so a new
  kind is checked by running them."""
  if machine.tpu:
    return "bf16", "a TPU's matrix units compute in bfloat16"
  if machine.gpu_capabilities:
    major, minor = min(machine.gpu_capabilities)
    kind = f"GPUs of compute capability {major}.{minor}"
    if major >= 8:
      return "bf16", f"{kind}: bfloat16 tensor cores"
    if major >= 7:
      return "fp16", f"{kind}: float16 tensor cores"
    return "none", f"{kind}: no tensor cores"
  if xla:
    # XLA's CPU compiler does not call oneDNN's bf16 / AMX kernels: with XLA bf16 measured
    # slower than float32 on every CPU kind (Intel with and without AMX, AMD).
    return "none", "XLA on a CPU computes bfloat16 no faster than float32"
  if "amx_bf16" in machine.cpu_flags:
    return "bf16", "this CPU has AMX bfloat16 tiles"
  if "avx512_bf16" in machine.cpu_flags and machine.vendor == "AuthenticAMD":
    return "bf16", "this AMD CPU has AVX-512 bfloat16"
  if "avx512_bf16" in machine.cpu_flags:
    # Without AMX, TensorFlow's bf16 matmul measured 0.71x float32's on Intel.
    return "none", "this CPU has AVX-512 bfloat16 but no AMX, where float32 is faster"
  return "none", "this CPU has no bfloat16 instructions"


def slower_here(precision, machine, xla=False):
  """Why `precision` (a name given, not auto) is a slow choice on `machine` -> a one-line
  warning that names this machine's fast choice (`choose`), or "" where it is not slow. From
  docs/benchmarks.md: float16 on any CPU (TensorFlow has no CPU float16 kernels), bfloat16 on
  a CPU without bfloat16 instructions (emulated), int8 on a CPU without int8 dot products
  (VNNI, AMX-INT8: no faster than float32, its weights rounded for nothing). Plain values in,
  so that every CPU kind is tested on any. A warning, not a refusal: the user may want it."""
  if machine.tpu or machine.gpu_capabilities:
    return ""
  flags = machine.cpu_flags
  slow = {
      "fp16": "far slower on a CPU than float32: TensorFlow has no fast CPU float16 kernels "
              "(training: 2,159 tokens/s against ~14,000 on a Zen 2)",
      "bf16": "slower on this CPU than float32: without bfloat16 instructions (AVX-512 bf16, "
              "AMX) it is emulated (decoding: 0.62x float32 on a Zen 3)"
              if not flags & {"avx512_bf16", "amx_bf16"} else "",
      "int8": "no faster on this CPU than float32: without int8 dot products (VNNI, "
              "AMX-INT8) it only rounds the weights (decoding: 0.98x float32 on a Zen 3)"
              if not flags & {"avx512_vnni", "avx_vnni", "amx_int8"} else ""}.get(precision)
  if not slow:
    return ""
  fast = choose(machine, xla)[0]
  return (f"precision {precision} is {slow}; this machine's fast choice is "
          f"{'none (float32)' if fast == 'none' else fast}, what auto chooses")


def _onednn_on():
  """Whether this TensorFlow runs its CPU ops with oneDNN: by default only where the CPU has
  AVX-512 (VNNI, bf16) or AMX, or with TF_ENABLE_ONEDNN_OPTS=1. No public API says it."""
  try:
    from tensorflow.python.util import _pywrap_util_port
    return bool(_pywrap_util_port.IsMklEnabled())
  except (ImportError, AttributeError):
    return True  # the behaviour of every machine measured before the check existed


def training_xla(precision, machine):
  """Whether to compile the training step in `precision` (a name, not auto) with XLA on
  `machine` when --xla is not given -> (xla, why): yes, but for bfloat16 on a CPU. XLA's CPU
  compiler does not call oneDNN's bfloat16 kernels (AMX, AVX-512 bf16), and there the bf16 step
  without XLA measured faster than any step with XLA, float32's included (docs/benchmarks.md);
  elsewhere XLA's fusions win. So on a CPU the choice of precision without XLA decides both."""
  if precision == "bf16" and not machine.gpu_capabilities and not machine.tpu:
    return False, "the default for bf16 on a CPU: XLA does not call oneDNN's bfloat16 kernels"
  return True, "the default"


def resolve(precision, xla, tpu=False):
  """`precision` as asked, or for "auto" the choice for this machine (a TPU host when `tpu`)
  -> (name, why): what training prints. A precision asked for that is slow on this machine
  (`slower_here`) gets a warning, logged before the first line, which names the precision; the
  machine is read only for these and "auto". Decoding's precision is the decoding plan's
  (decode/plan.py)."""
  if precision != AUTO:
    check(precision)
    slow = precision != "none" and slower_here(precision, Machine.this(tpu), xla)
    if slow:
      logger.warning(slow)
    return precision, "asked for"
  name, why = choose(Machine.this(tpu), xla)
  return name, f"auto: {why}"
