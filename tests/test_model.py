"""The paper's Transformer: parameter counts, no information leak, encodings, training math."""
import json
import math

import keras
import numpy as np
import pytest
import tensorflow as tf

import t2t_lite
from t2t_lite.modeling.dropout import seed_states
from t2t_lite.modeling.embedding import sinusoid_positions
from t2t_lite.modeling.losses import (rdrop_loss, smoothed_cross_entropy, token_accuracy,
                                      xla_rdrop_loss, xla_smoothed_cross_entropy)
from t2t_lite.train.optimization import TransformerSchedule, learning_rate, make_optimizer
from t2t_lite.modeling.transformer import LAYER_NORM_EPSILON, LayerNorm

VOCAB = 37000  # the paper's shared EN-DE BPE vocabulary

# Table 3's parameter counts (millions) for every set that lists one.
PAPER_PARAMS = {
    "transformer_base": 65, "transformer_big": 213,
    "transformer_base_b_dk16": 58, "transformer_base_b_dk32": 60,
    "transformer_base_c_n2": 36, "transformer_base_c_n4": 50, "transformer_base_c_n8": 80,
    "transformer_base_c_d256": 28, "transformer_base_c_d1024": 168,
    "transformer_base_c_ff1024": 53, "transformer_base_c_ff4096": 90,
}


def tiny_model(vocab=40, overrides=""):
  keras.utils.set_random_seed(1)
  return t2t_lite.build_model(t2t_lite.get_hparams("transformer_tiny", overrides), vocab)


def random_ids(shape, vocab=40, seed=0):
  return np.random.default_rng(seed).integers(2, vocab, shape).astype(np.int32)


@pytest.mark.parametrize("name", sorted(PAPER_PARAMS))
def test_parameter_count_matches_table3(name):
  model = t2t_lite.build_model(t2t_lite.get_hparams(name), VOCAB)
  ours, paper = model.count_params() / 1e6, PAPER_PARAMS[name]
  tolerance = 0.05 if name in ("transformer_base", "transformer_big") else 0.08
  assert abs(ours - paper) / paper <= tolerance, f"{name}: {ours:.1f}M vs paper {paper}M"


def test_table3_rows_change_only_what_the_row_says():
  base = t2t_lite.get_hparams("transformer_base")
  h16 = t2t_lite.get_hparams("transformer_base_a_h16")
  assert (h16.num_heads, h16.key_depth, h16.value_depth) == (16, 32, 32)
  assert h16.replace(num_heads=8, d_k=0, d_v=0) == base
  dk16 = t2t_lite.get_hparams("transformer_base_b_dk16")
  assert (dk16.key_depth, dk16.value_depth) == (16, 64)
  assert t2t_lite.get_hparams("transformer_base_e_learned").position_encoding == "learned"
  big = t2t_lite.get_hparams("transformer_big")
  assert (big.d_model, big.d_ff, big.num_heads, big.dropout) == (1024, 4096, 16, 0.3)
  assert t2t_lite.get_hparams("transformer_big_enfr").dropout == 0.1
  parsing = t2t_lite.get_hparams("transformer_parsing")
  assert (parsing.num_layers, parsing.d_model, parsing.beam_size, parsing.alpha,
          parsing.extra_length) == (4, 1024, 21, 0.3, 300)


def test_logits_shape_and_dtype():
  model = tiny_model()
  logits = model({"inputs": random_ids([2, 5]), "targets": random_ids([2, 7])})
  assert logits.shape == (2, 7, 40) and logits.dtype == tf.float32


@pytest.mark.parametrize("overrides", ["", "norm_type=pre", "position_encoding=learned"])
def test_changing_later_targets_never_changes_earlier_logits(overrides):
  model = tiny_model(overrides=overrides)
  inputs, targets = random_ids([3, 6], seed=1), random_ids([3, 9], seed=2)
  before = model({"inputs": inputs, "targets": targets}).numpy()
  for k in range(9):
    changed = targets.copy()
    changed[:, k:] = random_ids([3, 9 - k], seed=10 + k)
    after = model({"inputs": inputs, "targets": changed}).numpy()
    # Position i predicts targets[i] from targets[:i]: positions <= k see none of the change.
    np.testing.assert_array_equal(after[:, :k + 1], before[:, :k + 1])
    if k < 8:
      assert np.abs(after[:, k + 1:] - before[:, k + 1:]).max() > 1e-3


def test_padding_never_changes_real_logits():
  model = tiny_model()
  inputs, targets = random_ids([3, 6], seed=3), random_ids([3, 5], seed=4)
  before = model({"inputs": inputs, "targets": targets}).numpy()
  after = model({"inputs": np.pad(inputs, [[0, 0], [0, 7]]),
                 "targets": np.pad(targets, [[0, 0], [0, 4]])}).numpy()
  np.testing.assert_allclose(after[:, :5], before, atol=2e-5)
  # A shorter sentence padded inside a batch gets the logits it gets alone.
  ragged = inputs.copy()
  ragged[0, 3:] = 0
  alone = model({"inputs": ragged[:1, :3], "targets": targets[:1]}).numpy()
  batched = model({"inputs": ragged, "targets": targets}).numpy()
  np.testing.assert_allclose(batched[:1], alone, atol=2e-5)


def test_source_matters():
  model = tiny_model()
  targets = random_ids([2, 5], seed=5)
  a = model({"inputs": random_ids([2, 6], seed=6), "targets": targets}).numpy()
  b = model({"inputs": random_ids([2, 6], seed=7), "targets": targets}).numpy()
  assert np.abs(a - b).max() > 1e-3


def test_embedding_is_shared_and_scaled():
  model = tiny_model()
  shared = [w for w in model.weights if "embeddings" in w.path]
  assert len(shared) == 1 and tuple(shared[0].shape) == (40, 64)
  ids = tf.constant([[3, 7]])
  np.testing.assert_allclose(model.embedding(ids).numpy(),
                             tf.gather(shared[0], ids).numpy() * math.sqrt(64), rtol=1e-6)


def test_token_dropout_zeroes_whole_token_embeddings_in_training_only():
  model = tiny_model(overrides="token_dropout=0.5")  # dropout 0: only the token dropout
  ids = tf.constant(random_ids([8, 32]))
  positions = sinusoid_positions(32, 64).numpy()  # a dropped token keeps its position only
  for side in ("encoder", "decoder"):
    x = model._embed(ids, side, training=True).numpy()  # [8, 32, 64]
    dropped = np.isclose(x, positions, atol=1e-6).all(axis=-1)  # [8, 32]
    assert 0.3 < dropped.mean() < 0.7
    kept = model.embedding(ids).numpy() * 2 + positions
    np.testing.assert_allclose(x[~dropped], kept[~dropped], rtol=1e-5, atol=1e-5)
    inference = model._embed(ids, side, training=False).numpy()
    np.testing.assert_allclose(inference, model.embedding(ids).numpy() + positions, atol=1e-5)
  # Without it the model has no such layer, so checkpoints from before it restore as they did.
  assert not hasattr(tiny_model(), "token_dropout")
  assert len(seed_states(model)) == len(seed_states(tiny_model())) + 1


@pytest.mark.parametrize("cache_kind", ["buffers", "growing", "growing_in_graph"])
def test_cached_decode_steps_equal_full_decode(cache_kind):
  """Both self-attention caches (static buffers for XLA, growing keys/values otherwise) give
  the logits of the full decoder, eagerly and in a tf.function loop (a growing cache's
  static length must be unknown there)."""
  model = tiny_model()
  inputs, targets = random_ids([2, 6], seed=8), random_ids([2, 5], seed=9)
  full = model({"inputs": inputs, "targets": targets}).numpy()
  encoded, mask = model.encode(inputs)
  step = model.decode_step
  if cache_kind == "growing_in_graph":
    def all_steps(encoded, mask):
      cache = model.init_cache(encoded, mask)
      steps = tf.TensorArray(tf.float32, size=5)
      previous = tf.zeros([2], tf.int32)
      for i in tf.range(5):
        logits, cache = step(previous, i, cache)
        steps = steps.write(i, logits)
        previous = tf.gather(tf.constant(targets), i, axis=1)
      return tf.transpose(steps.stack(), [1, 0, 2])
    np.testing.assert_allclose(tf.function(all_steps)(encoded, mask).numpy(), full, atol=2e-5)
    return
  cache = model.init_cache(encoded, mask, 5 if cache_kind == "buffers" else None)
  previous, steps = tf.zeros([2], tf.int32), []
  for i in range(5):
    logits, cache = step(previous, tf.constant(i), cache)
    steps.append(logits.numpy())
    previous = tf.constant(targets[:, i])
  np.testing.assert_allclose(np.stack(steps, axis=1), full, atol=2e-5)
  self_cache = cache["layers"][0]["self"]
  if cache_kind == "growing":
    assert self_cache["keys"].shape == (2, 4, 5, 16)  # [B, H, slots written, K]
  else:
    assert self_cache["key_buffer"].shape == (2, 4, 5, 16)


def test_decoder_of_its_own_depth_decodes_as_its_full_decoder():
  """decoder_layers (fairseq's --decoder-layers): 3 encoder layers and 1 decoder layer, each
  used; cached steps give the full decoder's logits; 0 (the default) means num_layers, and
  layers are still created interleaved, the variable order that runs' checkpoints keep."""
  model = tiny_model(overrides="num_layers=3,decoder_layers=1")
  assert (len(model.encoder_layers), len(model.decoder_layers)) == (3, 1)
  layers = [v.path.split("/")[1] for v in model.trainable_variables]
  assert [p for p in dict.fromkeys(layers) if p[:-1] in ("encoder_", "decoder_")] == [
      "encoder_0", "decoder_0", "encoder_1", "encoder_2"]
  three = tiny_model(overrides="num_layers=3")  # 3 + 3: two decoder layers more
  assert three.count_params() - model.count_params() == 2 * model.decoder_0.count_params()
  inputs, targets = random_ids([2, 6], seed=8), random_ids([2, 5], seed=9)
  with tf.GradientTape() as tape:
    full = model({"inputs": inputs, "targets": targets})
  grads = tape.gradient(full, model.trainable_variables)
  assert all(g is not None for g in grads)
  encoded, mask = model.encode(inputs)
  cache, previous, steps = model.init_cache(encoded, mask, 5), tf.zeros([2], tf.int32), []
  for i in range(5):
    logits, cache = model.decode_step(previous, tf.constant(i), cache)
    steps.append(logits.numpy())
    previous = tf.constant(targets[:, i])
  np.testing.assert_allclose(np.stack(steps, axis=1), full.numpy(), atol=2e-5)
  assert len(cache["layers"]) == 1
  default = tiny_model()
  assert default.hparams.decoder_depth == default.hparams.num_layers == 2
  assert [v.path for v in default.trainable_variables] == [
      v.path for v in tiny_model(overrides="decoder_layers=2").trainable_variables]


@pytest.mark.parametrize("norm_type", ["post", "pre"])
def test_bf16_inference_model_rounds_weights_once_and_decodes_as_the_mixed_model(norm_type):
  """mixed_precision.inference_model: bfloat16 weights (LayerNorm's float32), the same logits and
  beams as the mixed policy model that casts float32 weights at every use; under mixed
  precision the residual stream stays float32."""
  from t2t_lite.modeling import mixed_precision
  from t2t_lite.decode import search
  reference = tiny_model(overrides=f"norm_type={norm_type}")
  with mixed_precision.building("bf16"):
    mixed = t2t_lite.build_model(reference.hparams, 40)
  mixed.set_weights(reference.get_weights())
  inference = mixed_precision.inference_model(reference, "bf16")
  assert mixed_precision.of_model(inference) == mixed_precision.of_model(mixed) == "bf16"
  float32 = {w.path for w in inference.weights if w.dtype == "float32"}
  assert float32 and all("norm" in path for path in float32), float32
  assert mixed_precision.inference_model(reference, "none") is reference

  inputs = random_ids([3, 7], seed=4)
  features = {"inputs": inputs, "targets": random_ids([3, 5], seed=5)}
  np.testing.assert_array_equal(mixed(features).numpy(), inference(features).numpy())
  encoded, _ = mixed.encode(inputs)
  assert encoded.dtype == tf.float32  # the residual stream, not bfloat16
  settings = dict(beam_size=4, alpha=0.6, extra_length=6)
  for a, b in zip(search.beams(mixed, inputs, **settings), search.beams(inference, inputs,
                                                                         **settings)):
    np.testing.assert_array_equal(a.numpy(), b.numpy())


def test_bf16_bias_gradients_are_summed_in_float32():
  """A bias's gradient in a bf16 step is its output's gradient summed over the batch's rows in
  float32: TensorFlow's CPU gradient of tf.nn.bias_add sums bfloat16 in bfloat16, in which
  4,096 ones add up to 256."""
  from t2t_lite.modeling import mixed_precision
  from t2t_lite.modeling.attention import MultiHeadAttention
  from t2t_lite.modeling.transformer import FeedForward
  x = tf.ones([64, 64, 16], tf.bfloat16)  # 4,096 rows
  with mixed_precision.building("bf16"):  # sublayers are made when the layer is built
    attention, ffn = MultiHeadAttention(2, 8, 8, 16), FeedForward(16, 32)
    attention.build(x.shape)
    ffn.build(x.shape)
  for layer, bias in ((attention, lambda: attention.output_dense.bias),
                      (ffn, lambda: ffn.outer.bias)):
    with tf.GradientTape() as tape:
      outputs = layer(x)
      outputs = outputs[0] if isinstance(outputs, tuple) else outputs  # attention's (y, cache)
      assert outputs.dtype == tf.bfloat16
      loss = tf.reduce_sum(tf.cast(outputs, tf.float32))
    np.testing.assert_array_equal(tape.gradient(loss, bias()).numpy(), np.full([16], 4096.0))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_layer_norm_equals_the_definition_and_keras(dtype):
  """(x - mean) / sqrt(var + eps) * gamma + beta over the last axis, float32 out, as Keras'
  LayerNormalization computes it (whose weights and config it keeps); gradients too."""
  rng = np.random.default_rng(0)
  x = tf.cast(tf.constant(rng.normal(2, 3, size=[2, 3, 16]), tf.float32), dtype)
  ours = LayerNorm()
  theirs = keras.layers.LayerNormalization(epsilon=LAYER_NORM_EPSILON, dtype="float32")
  weights = [rng.normal(1, 0.5, 16), rng.normal(0, 0.5, 16)]  # gamma, beta
  for layer in (ours, theirs):
    layer.build(x.shape)
    layer.set_weights(weights)
  gamma, beta = (w.numpy() for w in ours.weights)
  x32 = tf.cast(x, tf.float32).numpy()
  expected = ((x32 - x32.mean(-1, keepdims=True))
              / np.sqrt(x32.var(-1, keepdims=True) + LAYER_NORM_EPSILON) * gamma + beta)
  with tf.GradientTape(persistent=True) as tape:
    tape.watch(x)
    # Keras' would round its output to a bfloat16 input's precision: it is given float32.
    outputs = [ours(x), theirs(tf.cast(x, tf.float32))]
    losses = [tf.reduce_sum(y * tf.range(16, dtype=tf.float32)) for y in outputs]
  assert outputs[0].dtype == tf.float32
  np.testing.assert_allclose(outputs[0].numpy(), expected, rtol=1e-5, atol=1e-5)
  np.testing.assert_allclose(outputs[0].numpy(), outputs[1].numpy(), rtol=1e-5, atol=1e-5)
  for ours_wrt, theirs_wrt in ((x, x), (ours.weights, theirs.weights)):
    ours_grad = tape.gradient(losses[0], ours_wrt)
    theirs_grad = tape.gradient(losses[1], theirs_wrt)
    for a, b in zip(tf.nest.flatten(ours_grad), tf.nest.flatten(theirs_grad)):
      np.testing.assert_allclose(tf.cast(a, tf.float32).numpy(), tf.cast(b, tf.float32).numpy(),
                                 rtol=1e-4, atol=1e-4)
  assert LayerNorm.from_config(ours.get_config()).epsilon == LAYER_NORM_EPSILON


@pytest.mark.parametrize("position", [0, 1, 17, 250])
@pytest.mark.parametrize("i", [0, 5, 127, 255])
def test_sinusoid_equals_closed_form(position, i):
  d_model = 512
  pe = sinusoid_positions(position + 1, d_model).numpy()[position]
  angle = position / 10000 ** (2 * i / d_model)
  assert pe[2 * i] == pytest.approx(math.sin(angle), abs=1e-5)
  assert pe[2 * i + 1] == pytest.approx(math.cos(angle), abs=1e-5)


@pytest.mark.parametrize("step", [1, 4000, 100000])
def test_learning_rate_equals_formula(step):
  expected = 512 ** -0.5 * min(step ** -0.5, step * 4000 ** -1.5)
  assert float(learning_rate(step, 512, 4000)) == pytest.approx(expected, rel=1e-6)
  # Keras counts iterations from 0: iteration step - 1 is the paper's step_num = step.
  assert float(TransformerSchedule(512, 4000)(step - 1)) == pytest.approx(expected, rel=1e-6)


def test_cooldown_falls_linearly_to_zero():
  paper = [float(learning_rate(step, 256, 800)) for step in (1000, 1100, 1150, 1200, 1300)]
  cooled = [float(learning_rate(step, 256, 800, cooldown_start=1000, cooldown_steps=200))
            for step in (1000, 1100, 1150, 1200, 1300)]
  assert cooled == pytest.approx([paper[0], paper[1] / 2, paper[2] / 4, 0, 0], rel=1e-6)
  hparams = t2t_lite.get_hparams("transformer_base", "cooldown_start=1000,cooldown_steps=200")
  assert float(TransformerSchedule.of(hparams)(1099)) == pytest.approx(
      float(learning_rate(1100, 512, 4000)) / 2, rel=1e-6)


def test_optimizer_is_the_papers_adam():
  optimizer = make_optimizer(t2t_lite.get_hparams("transformer_base"))
  assert (optimizer.beta_1, optimizer.beta_2, optimizer.epsilon) == (0.9, 0.98, 1e-9)


@pytest.mark.parametrize("weight_decay", [0.0, 0.1])
def test_fused_adam_takes_keras_adams_steps(weight_decay):
  # The trainer's Adam updates with TensorFlow's fused kernel; keras' Adam is the reference, for
  # dense gradients and for IndexedSlices (keras' own update), in a tf.function as in training.
  hparams = t2t_lite.get_hparams("transformer_tiny",
                                 f"weight_decay={weight_decay},learning_rate=20")
  rng = np.random.default_rng(0)
  start = [rng.normal(size=[6, 4]).astype(np.float32), rng.normal(size=[4]).astype(np.float32),
           rng.normal(size=[5, 3]).astype(np.float32)]
  reference = keras.optimizers.Adam(
      learning_rate=TransformerSchedule.of(hparams), beta_1=0.9, beta_2=0.98, epsilon=1e-9,
      weight_decay=weight_decay or None)
  reference.exclude_from_weight_decay(var_names=["bias"])  # as make_optimizer does
  results = []
  for optimizer in (make_optimizer(hparams), reference):
    variables = [keras.Variable(x, name=name) for x, name in zip(start, ("kernel", "bias", "e"))]
    optimizer.build(variables)

    @tf.function
    def step(k):
      dense = [tf.sin(v * tf.cast(k + 1, tf.float32)) for v in variables[:2]]
      rows = tf.IndexedSlices(tf.cos(variables[2][:2] * tf.cast(k, tf.float32)), [1, 3], [5, 3])
      optimizer.apply(dense + [rows], variables)

    for k in range(5):
      step(tf.constant(k))
    results.append([v.numpy() for v in variables])
  for ours, reference, first in zip(*results, start):
    np.testing.assert_allclose(ours, reference, rtol=2e-6, atol=1e-7)
    assert np.abs(ours - first).max() > 1e-3  # the steps moved every weight


def test_smoothed_loss_equals_hand_computation_and_ignores_padding():
  logits = tf.constant([[[2.0, 0.0, 1.0], [0.5, 1.5, 0.0], [9.0, -3.0, 4.0]]])  # [1, 3, 3]
  targets = tf.constant([[2, 1, 0]])  # last position is padding
  eps = 0.1
  expected = 0.0
  for row, t in ((0, 2), (1, 1)):
    log_p = logits[0, row].numpy() - np.log(np.exp(logits[0, row].numpy()).sum())
    q = np.full(3, eps / 2)
    q[t] = 1 - eps
    expected += -(q * log_p).sum()
  loss_sum, count = smoothed_cross_entropy(logits, targets, eps)
  assert float(count) == 2.0
  assert float(loss_sum) == pytest.approx(expected, rel=1e-6)
  # Unsmoothed: plain negative log-likelihood of the true tokens.
  nll, _ = smoothed_cross_entropy(logits, targets, 0.0)
  log_p0 = 1.0 - np.log(np.exp([2.0, 0.0, 1.0]).sum())
  log_p1 = 1.5 - np.log(np.exp([0.5, 1.5, 0.0]).sum())
  assert float(nll) == pytest.approx(-(log_p0 + log_p1), rel=1e-6)
  correct, count = token_accuracy(logits, targets)
  assert (float(correct), float(count)) == (1.0, 2.0)  # row 0 predicts 0 (not 2), row 1 right


@pytest.mark.parametrize("smoothing", [0.0, 0.1])
@pytest.mark.parametrize("jit", ["none", "step", "loss"])
def test_smoothed_loss_gradient_equals_autodiff_of_the_definition(smoothing, jit):
  # Autodiff of -sum(q * log_softmax) over non-padding tokens is the reference for the loss
  # without XLA, in an XLA step, and XLA-compiled alone (what a step without XLA calls).
  rng = np.random.default_rng(0)
  logits = tf.constant(rng.normal(0, 3, size=[2, 5, 7]), tf.float32)
  targets = tf.constant([[3, 1, 6, 0, 0], [2, 2, 5, 4, 1]])  # padding (0) in row 0

  def reference(logits):
    q = tf.one_hot(targets, 7, on_value=1.0 - smoothing, off_value=smoothing / 6)
    token_loss = -tf.reduce_sum(q * tf.nn.log_softmax(logits), axis=-1)
    return tf.reduce_sum(token_loss * tf.cast(targets > 0, tf.float32))

  def ours(logits):
    loss_fn = xla_smoothed_cross_entropy if jit == "loss" else smoothed_cross_entropy
    return loss_fn(logits, targets, smoothing)[0]

  def value_and_grad(fn):
    with tf.GradientTape() as tape:
      tape.watch(logits)
      value = fn(logits) * 1.7  # a non-unit upstream gradient
    return value, tape.gradient(value, logits)

  run = tf.function(value_and_grad, jit_compile=True) if jit == "step" else value_and_grad
  value, grad = run(ours)
  expected_value, expected_grad = value_and_grad(reference)
  np.testing.assert_allclose(value.numpy(), expected_value.numpy(), rtol=1e-5)
  np.testing.assert_allclose(grad.numpy(), expected_grad.numpy(), rtol=1e-5, atol=1e-6)
  assert np.all(grad.numpy()[0, 3:] == 0.0)  # padding gets no gradient
  assert np.abs(grad.numpy()).max() > 0.1


@pytest.mark.parametrize("loss_fn", [rdrop_loss, xla_rdrop_loss])
def test_rdrop_loss_equals_the_papers_loss_halved(loss_fn):
  # R-Drop's loss per token: CE(p1) + CE(p2) + alpha / 2 (KL(p1||p2) + KL(p2||p1)); ours is half
  # of it, summed over one copy's non-padding tokens.
  rng = np.random.default_rng(0)
  logits = rng.normal(0, 2, size=[4, 5, 7]).astype(np.float32)  # two copies of a [2, 5] batch
  targets = np.array([[3, 1, 6, 0, 0], [2, 2, 5, 4, 1]] * 2, np.int32)
  smoothing, alpha = 0.1, 5.0
  log_p = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  q = np.full(log_p.shape, smoothing / 6)
  np.put_along_axis(q, targets[..., None], 1 - smoothing, -1)
  ce = -(q * log_p).sum(-1)  # [4, 5]
  p1, p2 = np.exp(log_p[:2]), np.exp(log_p[2:])
  kl = (p1 * (log_p[:2] - log_p[2:])).sum(-1) + (p2 * (log_p[2:] - log_p[:2])).sum(-1)
  mask = targets[:2] > 0
  papers = ((ce[:2] + ce[2:] + alpha / 2 * kl) * mask).sum()
  loss, ce_sum = loss_fn(tf.constant(logits), tf.constant(targets), smoothing, alpha)
  assert float(loss) == pytest.approx(papers / 2, rel=1e-5)
  assert float(ce_sum) == pytest.approx(((ce[:2] + ce[2:]) * mask).sum() / 2, rel=1e-5)
  assert float(loss) > float(ce_sum) * 1.5  # the divergence term counts
  # Two identical copies: no divergence, one copy's cross entropy.
  twice = tf.constant(np.concatenate([logits[:2]] * 2))
  loss, ce_sum = loss_fn(twice, tf.constant(targets), smoothing, alpha)
  single, _ = smoothed_cross_entropy(tf.constant(logits[:2]), tf.constant(targets[:2]), smoothing)
  assert float(loss) == pytest.approx(float(single), rel=1e-5)
  assert float(ce_sum) == pytest.approx(float(single), rel=1e-5)


def test_tiny_transformer_memorises_a_copy_task():
  vocab, n, length = 20, 64, 8
  rng = np.random.default_rng(0)
  inputs = rng.integers(2, vocab, (n, length)).astype(np.int32)
  targets = np.concatenate([inputs, np.ones([n, 1], np.int32)], axis=1)  # copy + EOS
  hparams = t2t_lite.get_hparams("transformer_tiny")
  keras.utils.set_random_seed(0)
  model = t2t_lite.build_model(hparams, vocab)
  optimizer = make_optimizer(hparams)

  @tf.function(jit_compile=True)
  def train_step(features):
    with tf.GradientTape() as tape:
      logits = model(features, training=True)
      loss_sum, count = smoothed_cross_entropy(logits, features["targets"], 0.0)
      loss = loss_sum / count
    grads = tape.gradient(loss, model.trainable_variables)
    optimizer.apply_gradients(zip(grads, model.trainable_variables))
    return loss

  features = {"inputs": tf.constant(inputs), "targets": tf.constant(targets)}
  for _ in range(200):
    train_step(features)
  correct, count = token_accuracy(model(features), features["targets"])
  assert float(correct / count) > 0.99


def test_weight_decay_shrinks_every_weight_but_layer_norms_and_biases():
  hparams = t2t_lite.get_hparams("transformer_tiny", "weight_decay=0.1,learning_rate=100")
  model = t2t_lite.build_model(hparams, 20)
  optimizer = make_optimizer(hparams)
  before = {v.path: v.numpy() for v in model.trainable_variables}
  optimizer.build(model.trainable_variables)
  lr = float(optimizer.learning_rate)  # the rate of the first step
  # Zero gradients: Adam moves nothing (m = v = 0), only the decay does: w <- w (1 - lr wd).
  optimizer.apply([tf.zeros_like(v) for v in model.trainable_variables],
                  model.trainable_variables)
  kinds = set()
  for v in model.trainable_variables:
    excluded = v.name in ("gamma", "beta", "bias")
    kinds.add((v.name, excluded))
    expected = before[v.path] * (1.0 if excluded else 1 - lr * 0.1)
    np.testing.assert_allclose(v.numpy(), expected, rtol=1e-6, err_msg=v.path)
  assert {("kernel", False), ("embeddings", False), ("bias", True), ("gamma", True)} <= kinds
  assert 0 < lr < 1  # the schedule's rate at step 1, not the multiplier alone


@pytest.mark.parametrize("call, message", [
    (lambda: t2t_lite.get_hparams("transformer_bigg"), "did you mean 'transformer_big'"),
    (lambda: t2t_lite.get_problem("wmt_end"), "did you mean 'wmt_ende'"),
    (lambda: t2t_lite.get_hparams("transformer_base", "num_layer=4"),
     "unknown hparam 'num_layer'; did you mean 'num_layers'?"),
    (lambda: t2t_lite.get_hparams("transformer_base", "dropout=lots"),
     "bad value for hparam 'dropout': 'lots' is not a number"),
    (lambda: t2t_lite.get_hparams("transformer_base", "num_layers"),
     "bad override 'num_layers': expected name=value"),
    (lambda: t2t_lite.get_hparams("transformer_base", "num_heads=7"),
     "d_model=512 is not divisible by num_heads=7"),
    (lambda: t2t_lite.get_hparams("transformer_base", "decoder_layers=-1"),
     "decoder_layers must be >= 0, got -1"),
    (lambda: t2t_lite.get_hparams("transformer_base", "norm_type=sandwich"),
     "norm_type must be 'post' or 'pre'"),
])
def test_bad_input_is_a_clear_one_line_error(call, message):
  with pytest.raises((t2t_lite.HParamsError, t2t_lite.RegistryError)) as error:
    call()
  assert message in str(error.value)
  assert "\n" not in str(error.value)


def test_overrides_are_typed_and_hparams_round_trip_json(tmp_path):
  hparams = t2t_lite.get_hparams("transformer_big", "num_layers=4,dropout=0.25,beam_size=8")
  assert (hparams.num_layers, hparams.dropout, hparams.beam_size) == (4, 0.25, 8)
  assert isinstance(hparams.num_layers, int) and isinstance(hparams.dropout, float)
  path = str(tmp_path / "hparams.json")
  hparams.save(path)
  assert t2t_lite.HParams.load(path) == hparams


def test_hparams_json_of_older_runs_loads_the_renamed_field():
  values = json.loads(t2t_lite.get_hparams("transformer_parsing").to_json())
  values["extra_decode_length"] = values.pop("extra_length")  # as runs before the rename wrote
  assert t2t_lite.HParams.from_json(json.dumps(values)) == t2t_lite.get_hparams(
      "transformer_parsing")


def test_every_attention_weight_is_used():
  """MultiHeadAttention holds only weights that its matmuls read (no sublayer it never calls):
  W^Q, W^K, W^V, W^O and their biases all get gradients, and they are the only weights."""
  from t2t_lite.modeling.attention import MultiHeadAttention
  keras.utils.set_random_seed(1)
  layer = MultiHeadAttention(num_heads=2, key_depth=4, value_depth=3, output_depth=8)
  layer.build([None, None, 8])
  sublayers = [type(sub).__name__ for sub in layer._flatten_layers(include_self=False)]
  assert sorted(sublayers) == ["Dropout"] + ["Projection"] * 4
  assert {tuple(w.shape) for w in layer.query_dense.weights} == {(8, 2, 4), (2, 4)}
  x = tf.random.stateless_normal([2, 5, 8], [1, 2])
  with tf.GradientTape() as tape:
    output, _ = layer(x)
  grads = tape.gradient(output, layer.trainable_weights)
  assert len(grads) == 8 and all(g is not None for g in grads)
  # The weights are the ones used: zeroing W^V zeroes the attention's output before W^O.
  layer.value_dense.kernel.assign(tf.zeros([8, 2, 3]))
  layer.value_dense.bias.assign(tf.zeros([2, 3]))
  output, _ = layer(x)
  np.testing.assert_allclose(output.numpy(), np.broadcast_to(layer.output_dense.bias.numpy(),
                                                             output.shape), atol=1e-6)
