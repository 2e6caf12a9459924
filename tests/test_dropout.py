"""Hash-based dropout: the right rate and scale, independent masks, same mask with and without
XLA, a function of the seed only."""
import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.modeling.dropout import Dropout, keep_mask

SHAPE = [64, 32, 512]


def mask(rate, seed, xla=False):
  fn = tf.function(lambda s: keep_mask(tf.constant(SHAPE), rate, s), jit_compile=xla)
  return fn(tf.constant(seed, tf.int64)).numpy()


@pytest.mark.parametrize("rate", [0.1, 0.3, 0.5])
def test_keep_fraction_matches_rate(rate):
  kept = mask(rate, [7, 3]).mean()
  # 1M Bernoulli draws: the standard deviation of the mean is < 5e-4.
  assert abs(kept - (1 - rate)) < 3e-3


def test_masks_of_different_seeds_are_independent():
  # [7, 1024]: the trainer's next micro-batch (counters advance by 1024 per micro-batch).
  a, b, c, d = mask(0.5, [7, 0]), mask(0.5, [7, 1]), mask(0.5, [8, 0]), mask(0.5, [7, 1024])
  for x, y in [(a, b), (a, c), (b, c), (a, d), (b, d)]:
    # Independent fair coins agree half the time.
    assert abs((x == y).mean() - 0.5) < 3e-3
  # No structure along any axis: every position's keep rate is near 0.5 across the rest.
  for axis in range(3):
    other = tuple(i for i in range(3) if i != axis)
    assert np.abs(a.mean(axis=other) - 0.5).max() < 0.05


def test_same_seed_same_mask_with_and_without_xla():
  np.testing.assert_array_equal(mask(0.1, [5, 2048]), mask(0.1, [5, 2048]))
  np.testing.assert_array_equal(mask(0.1, [5, 2048]), mask(0.1, [5, 2048], xla=True))


def test_layer_scales_kept_units_and_is_identity_in_inference():
  layer = Dropout(0.25, seed=3)
  x = tf.ones(SHAPE)
  np.testing.assert_array_equal(layer(x, training=False).numpy(), x.numpy())
  y = layer(x, training=True).numpy()
  assert set(np.unique(y)) == {0.0, np.float32(1 / 0.75)}
  assert abs(y.mean() - 1.0) < 5e-3
  # Each call draws a fresh mask; the gradient is the mask times the scale.
  with tf.GradientTape() as tape:
    tape.watch(x)
    z = layer(x, training=True)
  grad = tape.gradient(z, x).numpy()
  np.testing.assert_array_equal(grad, z.numpy())
  assert (grad != y).any()


def test_whole_vectors_drops_each_last_axis_vector_whole():
  layer = Dropout(0.5, seed=3, whole_vectors=True)
  y = layer(tf.ones(SHAPE), training=True).numpy()  # [64, 32, 512]
  zero, kept = (y == 0).all(axis=-1), (y == 2).all(axis=-1)  # [64, 32]
  assert (zero | kept).all()
  assert abs(zero.mean() - 0.5) < 0.05  # 2,048 vectors
  np.testing.assert_array_equal(layer(tf.ones(SHAPE), training=False).numpy(), 1.0)


def test_bad_rate_is_refused():
  with pytest.raises(ValueError, match="dropout rate must be in"):
    Dropout(1.0)
