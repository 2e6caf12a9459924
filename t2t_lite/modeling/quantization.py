"""Weight matmuls for decoding as XLA programs of their own: int8 decoding, and float32 where
TensorFlow's own matmul kernel is the slower one (the decoding plan: decode/plan.py).

int8: dynamic quantization, as CTranslate2's int8 and Keras' int8 layers do it. Each kernel
[K, N] is quantized once, per output column (scale = the column's largest |weight| / 127), when
the model for decoding is made (mixed_precision.inference_model); the activations [M, K] are
quantized per row at every call. Everything else (attention between positions, LayerNorm,
softmax, the residual stream, logits, beam scores) stays float32, so only the weights' products
are rounded.

Why each such matmul is its own XLA cluster (a jit_compile function), called from a search
that otherwise runs as TensorFlow ops: TensorFlow's kernel for int8 operands (BatchMatMulV3) is
Eigen's generic one, many times slower than float32's oneDNN kernel, while XLA's CPU compiler
emits int8 dot products (VNNI, AMX-INT8); and the rest of the step is faster as oneDNN ops than
compiled by XLA on a CPU (docs/benchmarks.md: bench/matmul_precisions.py, multi30k_decode.py).
Where TensorFlow runs without oneDNN (by default, CPUs without AVX-512 VNNI, bf16 or AMX), its
float32 matmul is Eigen's too, and XLA's float32 dot is the faster one: a float32 model for
decoding there multiplies its weights the same way, in float32 (`FloatKernel`).
"""
from typing import Any, NamedTuple

import tensorflow as tf

_LEVELS = 127.0  # symmetric int8: -127 .. 127, no zero point
# XLA compiles a program for every operand shape: rows (batch x length) and columns of a size
# unknown when traced (a shortlist's) are padded to multiples of these, so that a decode of
# sentences of every length compiles a few dozen matmuls, not one for every batch. Fewer rows
# than _ROWS are padded to a power of two only: a search of one sentence (4 rows) would
# otherwise multiply 128. A kernel of known size is not padded: it would be copied at every
# call for nothing.
_ROWS, _COLUMNS = 128, 256


class Int8Kernel(NamedTuple):
  """A kernel of shape [*in, *out] (e.g. attention's [D, H, K]) as `values` int8 [*in, *out]
  times `scales` float32 [*out]: one scale per output unit."""
  values: Any
  scales: Any

  def columns(self, ids):
    """Of a kernel [K, N], the columns `ids` int32 [N'] only (a vocabulary shortlist's rows of
    the pre-softmax matrix): values [K, N'], scales [N']."""
    return Int8Kernel(tf.gather(self.values, ids, axis=1), tf.gather(self.scales, ids))


class FloatKernel(NamedTuple):
  """A kernel of shape [*in, *out] multiplied in float by an XLA program of its own."""
  values: Any

  def columns(self, ids):
    """Of a kernel [K, N], the columns `ids` int32 [N'] only -> values [K, N']."""
    return FloatKernel(tf.gather(self.values, ids, axis=1))


def quantize_kernel(kernel, input_axes=1):
  """float [*in, *out] (its first `input_axes` axes meet the input) -> Int8Kernel, each output
  unit scaled by its own largest |weight|."""
  kernel = tf.convert_to_tensor(kernel, tf.float32)
  scales = tf.reduce_max(tf.abs(kernel), axis=list(range(input_axes))) / _LEVELS  # [*out]
  scales = tf.where(scales > 0.0, scales, 1.0)  # an all-zero column stays zero
  values = tf.clip_by_value(tf.round(kernel / scales), -_LEVELS, _LEVELS)
  return Int8Kernel(tf.cast(values, tf.int8), scales)


def compiled_kernel(kernel, int8, input_axes=1):
  """A kernel [*in, *out] as one `matmul` multiplies: an Int8Kernel when `int8`, else a
  FloatKernel of the same values."""
  return quantize_kernel(kernel, input_axes) if int8 else FloatKernel(kernel)


def quantized(model):
  """Whether `model` (a Transformer) decodes in int8: its pre-softmax matrix has an int8 copy."""
  compiled = getattr(getattr(model, "embedding", None), "compiled", None)
  return isinstance(compiled, Int8Kernel)


def compile_layer(layer, int8, input_axes=1):
  """Gives `layer` (anything with a float `kernel`) `layer.compiled`, its kernel as `matmul`
  multiplies it (compiled_kernel), which `linear` then uses. The float kernel stays."""
  # Set past Keras' tracking, which would wrap a FloatKernel of the layer's own variable in a
  # tracking tuple (no longer a FloatKernel); it is for decoding only, never saved.
  object.__setattr__(layer, "compiled", compiled_kernel(layer.kernel, int8, input_axes))


def linear(flat, layers):
  """flat [M, fan_in] times the kernels of `layers` joined on their last axis, plus their joined
  biases -> [M, fan_out] in flat's dtype: by `matmul` where the layers were compiled."""
  if getattr(layers[0], "compiled", None) is not None:
    kernel = _concat([layer.compiled for layer in layers])
    product = tf.cast(matmul(flat, kernel), flat.dtype)
  else:
    kernel = tf.concat([tf.cast(layer.kernel, flat.dtype) for layer in layers], axis=-1)
    product = tf.matmul(flat, tf.reshape(kernel, [flat.shape[-1], -1]))
  bias = tf.concat([tf.cast(layer.bias, flat.dtype) for layer in layers], axis=-1)
  # An Add, not tf.nn.bias_add: the same values, but BiasAdd's CPU gradient sums bfloat16 in
  # bfloat16 (4,096 ones make 256) where Add's (a reduce_sum) sums in float32.
  return product + tf.reshape(bias, [-1])


def _concat(kernels):
  """Kernels of one kind joined on their last axis (every field: an int8 kernel's output units
  keep their scales)."""
  if len(kernels) == 1:
    return kernels[0]
  return type(kernels[0])(*[tf.concat(fields, axis=-1) for fields in zip(*kernels)])


@tf.function(jit_compile=True)
def _int8_matmul(x, values, scales):
  """x float32 [M, K], values int8 [K, N], scales [N] -> float32 [M, N]."""
  x_scales = tf.reduce_max(tf.abs(x), axis=1, keepdims=True) / _LEVELS  # [M, 1]
  x_scales = tf.where(x_scales > 0.0, x_scales, 1.0)
  x8 = tf.cast(tf.round(x / x_scales), tf.int8)  # |x / x_scale| <= 127: no clipping needed
  product = tf.matmul(x8, values, output_type=tf.int32)  # [M, N]
  return tf.cast(product, tf.float32) * x_scales * scales


@tf.function(jit_compile=True)
def _float_matmul(x, values):
  """x [M, K], values [K, N] of x's dtype -> [M, N]."""
  return tf.matmul(x, values)


def matmul(x, kernel):
  """x [M, K] (any float dtype) times an Int8Kernel or a FloatKernel of K inputs -> [M, N], N
  its outputs flattened: float32 of an Int8Kernel, x's dtype of a FloatKernel."""
  values = tf.reshape(kernel.values, [x.shape[-1], -1])  # [K, N]
  rows, columns = tf.shape(x)[0], tf.shape(values)[1]
  unknown = values.shape[1] is None  # a shortlist's columns: padded, see _COLUMNS
  if unknown:
    values = tf.pad(values, [[0, 0], [0, -columns % _COLUMNS]])
  padded = [[0, _padded_rows(rows) - rows], [0, 0]]  # zero rows: zero outputs
  if isinstance(kernel, FloatKernel):
    return _float_matmul(tf.pad(x, padded), tf.cast(values, x.dtype))[:rows, :columns]  # [M, N]
  scales = tf.reshape(kernel.scales, [-1])  # [N]
  if unknown:
    scales = tf.pad(scales, [[0, -columns % _COLUMNS]], constant_values=1.0)
  x = tf.pad(tf.cast(x, tf.float32), padded)
  return _int8_matmul(x, values, scales)[:rows, :columns]  # [M, N]


def _padded_rows(rows):
  """rows int32 -> up to _ROWS: the next power of two; more: the next multiple of _ROWS."""
  powers = tf.constant([2 ** i for i in range(_ROWS.bit_length())])  # 1, 2, 4, ..., _ROWS
  smallest = tf.reduce_min(tf.where(powers >= rows, powers, _ROWS))
  return tf.where(rows <= _ROWS, smallest, rows + -rows % _ROWS)
