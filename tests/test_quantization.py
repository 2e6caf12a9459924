"""int8 decoding (t2t_lite/modeling/quantization.py, --precision=int8): kernels quantized per
output unit, the int8 matmul against the integer arithmetic done by hand, an int8 model beside
its float32 one, and the tools that take it (decode through its process; the export refuses)."""
import numpy as np
import pytest
import tensorflow as tf
from conftest import file_hashes
from test_bad_input import assert_one_line, finish, run_tool, start_tool
from test_model import random_ids, tiny_model

from t2t_lite.decode import plan, search, translation
from t2t_lite.modeling import mixed_precision, quantization

WORDS = "a man rides horse the dog runs in park woman with red hat over bridge".split()
LINES = ["a man rides the horse", "the dog runs in the park", "woman with red hat"]


def test_kernels_quantize_per_output_unit_and_the_matmul_is_the_integer_product():
  rng = np.random.default_rng(0)
  kernel = rng.normal(0, 0.1, size=[16, 3, 4]).astype(np.float32)  # attention's [D, H, K]
  kernel[:, 1, 2] = 0.0  # an all-zero output unit
  q = quantization.quantize_kernel(kernel)
  values, scales = q.values.numpy(), q.scales.numpy()
  assert values.dtype == np.int8 and values.shape == (16, 3, 4) and scales.shape == (3, 4)
  assert (values[:, 1, 2] == 0).all()
  largest = np.abs(values).max(axis=0)  # each unit's largest weight is +-127
  assert (np.delete(largest.ravel(), 6) == 127).all()
  assert np.abs(values * scales - kernel).max() <= scales.max() / 2 + 1e-7

  x = rng.normal(0, 1, size=[5, 16]).astype(np.float32)
  x[3] = 0.0  # an all-zero row
  got = quantization.matmul(x, q).numpy()  # [5, 12]
  # By hand: each row scaled by its largest |x| / 127 and rounded, an exact integer product.
  x_scales = np.abs(x).max(axis=1, keepdims=True) / 127
  x_scales[x_scales == 0] = 1
  x8 = np.round(x / x_scales).astype(np.int64)
  expected = (x8 @ values.reshape(16, 12).astype(np.int64)) * x_scales * scales.reshape(12)
  np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
  assert (got[3] == 0).all()
  # Close to the float32 product: rounding both operands costs under 2% of its scale here.
  exact = x @ kernel.reshape(16, 12)
  assert np.abs(got - exact).max() < 0.02 * np.abs(exact).max()


@pytest.mark.parametrize("norm_type", ["post", "pre"])
def test_int8_model_keeps_the_float32_weights_and_decodes_close_to_them(norm_type):
  reference = tiny_model(overrides=f"norm_type={norm_type}")
  int8 = mixed_precision.inference_model(reference, "int8")
  assert mixed_precision.of_model(int8) == "int8" and mixed_precision.of_model(reference) == "none"
  assert reference.embedding.compiled is None  # the caller's model is not changed
  for a, b in zip(int8.get_weights(), reference.get_weights()):  # the float32 weights, as read
    np.testing.assert_array_equal(a, b)

  features = {"inputs": random_ids([3, 7], seed=4), "targets": random_ids([3, 5], seed=5)}
  exact, rounded = reference(features).numpy(), int8(features).numpy()  # [B, T, V]
  assert rounded.dtype == np.float32
  assert np.abs(rounded - exact).max() < 0.05 * np.abs(exact).max()
  assert (rounded.argmax(-1) == exact.argmax(-1)).mean() >= 0.9

  # A shortlist's rows of the int8 pre-softmax matrix give the full logits' columns.
  _assert_shortlist_gives_the_full_logits_columns(int8, features["inputs"])

  settings = dict(beam_size=4, alpha=0.6, extra_length=6)
  beams, scores = search.beams(int8, features["inputs"], **settings)
  assert beams.shape[:2] == (3, 4) and np.isfinite(scores.numpy()).all()


def _assert_shortlist_gives_the_full_logits_columns(model, inputs):
  """A first decoding step over the shortlist [0, 1, 5, 9, 30] gives those columns of the full
  step's logits."""
  encoded, mask = model.encode(inputs)
  cache = model.init_cache(encoded, mask)
  ids = tf.constant([0, 1, 5, 9, 30], tf.int32)
  start = tf.zeros([len(inputs)], tf.int32)
  full, _ = model.decode_step(start, 0, cache)
  listed, _ = model.decode_step(start, 0, cache, output_rows=model.output_rows(ids))
  np.testing.assert_allclose(listed.numpy(), tf.gather(full, ids, axis=1).numpy(), rtol=1e-6)


def test_float32_model_with_compiled_matmuls_computes_what_the_plain_one_does():
  """What decoding runs where TensorFlow has no oneDNN (plan.compiled_matmuls): the
  weight matmuls as XLA programs of their own, in float32; the product is the same up to the
  order of the additions."""
  reference = tiny_model()
  compiled = mixed_precision.inference_model(reference, "none", compiled_matmuls=True)
  assert isinstance(compiled.embedding.compiled, quantization.FloatKernel)
  assert not quantization.quantized(compiled)
  assert mixed_precision.of_model(compiled) == "none" and compiled is not reference
  assert reference.embedding.compiled is None  # the caller's model is not changed
  for a, b in zip(compiled.get_weights(), reference.get_weights()):
    np.testing.assert_array_equal(a, b)
  # Rows (3 x 7 and 3 x 5) that are not a multiple of the padding's 128.
  features = {"inputs": random_ids([3, 7], seed=4), "targets": random_ids([3, 5], seed=5)}
  np.testing.assert_allclose(compiled(features).numpy(), reference(features).numpy(),
                             rtol=1e-5, atol=1e-5)

  # A shortlist's columns (5: padded to 256 inside) give the full logits' columns.
  _assert_shortlist_gives_the_full_logits_columns(compiled, features["inputs"])

  settings = dict(beam_size=4, alpha=0.6, extra_length=6)
  ours, ours_scores = search.beams(compiled, features["inputs"], **settings)
  plain, plain_scores = search.beams(reference, features["inputs"], **settings)
  np.testing.assert_array_equal(ours.numpy(), plain.numpy())
  np.testing.assert_allclose(ours_scores.numpy(), plain_scores.numpy(), rtol=1e-5)


def test_decode_decodes_in_int8_as_translate_and_the_export_refuses_it(make_random_model_dir,
                                                                       tmp_path):
  model_dir = make_random_model_dir("int8", WORDS)
  (tmp_path / "in.txt").write_text("".join(line + "\n" for line in LINES))
  settings = ["--beam_size=4", "--alpha=0.6", "--extra_length=6", "--no_progress"]
  decode = start_tool("decode", "--model_dir", model_dir, "--input_file", tmp_path / "in.txt",
                      "--output_file", tmp_path / "out", "--precision=int8", *settings)
  translator = translation.Translator.from_model_dir(model_dir, beam_size=4, alpha=0.6,
                                                     extra_length=6, precision="int8")
  expected = translator.translate(LINES)[0]  # While the process decodes.
  code, _, err = finish(decode)
  assert code == 0, err
  # Where TensorFlow runs without oneDNN, also: each batch searched as two halves at once.
  assert plan.decide("int8", False, 64, plan.capabilities()).computing() in err
  assert (tmp_path / "out").read_text().splitlines() == expected

  before = file_hashes(model_dir)
  code, out, err = run_tool("export", "--model_dir", model_dir, "--export_dir",
                            tmp_path / "export", "--precision=int8")
  assert code == 2 and out == ""
  assert_one_line(err, "t2t-lite-export", "--precision=int8",
                  "TF Serving runs only with --xla_cpu_compilation_enabled")
  assert file_hashes(model_dir) == before and not (tmp_path / "export").exists()
  # The trainer computes in training precisions only.
  code, _, err = run_tool("train", "--problem=algorithmic_reverse", "--model_dir",
                          tmp_path / "run", "--mixed_precision=int8")
  assert code == 2 and "invalid choice: 'int8'" in err and not (tmp_path / "run").exists()
