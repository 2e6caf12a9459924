"""Compute precision: the one place that names the precisions and builds a model in one.

  none  float32 everywhere.
  bf16  bfloat16 matmuls and activations, float32 weights (Keras "mixed_bfloat16"): TPUs, recent
        GPUs, and CPUs with AVX-512 bf16 or AMX. Softmax, LayerNorm, the residual stream,
        logits, log-probabilities, the loss and beam scores stay float32 (attention.py,
        embedding.py, transformer.py), so rankings are stable.
  fp16  float16 the same way (GPUs); training adds dynamic loss scaling (trainer.py).

Training (--mixed_precision) and inference (--precision of decode, export, attention and
`translate()`) take the same names. Checkpoints hold float32 weights in every precision, so a
checkpoint of any run loads into any precision; a bf16 model for inference rounds them to
bfloat16 once (`inference_model`).
"""
import contextlib

PRECISIONS = {"none": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}
# Inference needs no float32 master weights: a bf16 model for decoding holds its weights in
# bfloat16 themselves, so that no decoding step casts every weight again. The rounding is the
# one that cast made, and LayerNorm, softmax and logits still come out in float32: the outputs
# are the mixed policy's.
INFERENCE_POLICIES = dict(PRECISIONS, bf16="bfloat16")


def check(precision, error=ValueError):
  """Raises `error` with a one-line message unless `precision` is one of PRECISIONS."""
  if precision not in PRECISIONS:
    raise error(f"unknown precision {precision!r}; expected one of {', '.join(PRECISIONS)}")


@contextlib.contextmanager
def building(precision, inference=False):
  """Layers created inside compute in `precision` (Keras reads its global dtype policy when a
  layer is made), with inference=True in INFERENCE_POLICIES' dtypes; the previous policy is put
  back afterwards."""
  import keras  # Here, so that the flags can read PRECISIONS without loading TensorFlow.
  check(precision)
  policy = keras.mixed_precision.global_policy()
  keras.mixed_precision.set_global_policy(
      (INFERENCE_POLICIES if inference else PRECISIONS)[precision])
  try:
    yield
  finally:
    keras.mixed_precision.set_global_policy(policy)


def inference_model(model, precision):
  """A Transformer for decoding in `precision` with the weights of `model` (float32), built in
  INFERENCE_POLICIES' dtypes. Returns `model` itself for float32."""
  # Here: the flags import this module without TensorFlow.
  from t2t_lite.modeling.transformer import build_model
  if precision == "none":
    return model
  with building(precision, inference=True):
    converted = build_model(model.hparams, model.vocab_size)
  converted.set_weights(model.get_weights())  # cast to the new weights' dtypes
  return converted


def of_model(model):
  """The precision a built model computes in (its dtype policy), by the names above."""
  names = {policy: name for table in (PRECISIONS, INFERENCE_POLICIES)
           for name, policy in table.items()}
  return names.get(model.dtype_policy.name, model.dtype_policy.name)
