"""The token-bucketed pipeline: buckets, token budget, padding ratio, determinism, sharding."""
import numpy as np
import pytest
from conftest import write_records

import t2t_lite
from t2t_lite.data import pipeline

EOS = 1


def _examples(count, seed=0, max_len=40):
  """(inputs, targets) id lists with random lengths, each ending in EOS, ids unique per example."""
  rng = np.random.default_rng(seed)
  examples = []
  for i in range(count):
    source = [2 + i] * int(rng.integers(1, max_len)) + [EOS]
    target = [2 + i] * int(rng.integers(1, max_len)) + [EOS]
    examples.append((source, target))
  return examples


def _write(tmp_path, examples, num_files=1):
  paths = [str(tmp_path / f"train-{i:05d}-of-{num_files:05d}.tfrecord") for i in range(num_files)]
  for i, path in enumerate(paths):
    write_records(path, examples[i::num_files])
  return paths


def _unbatch(dataset):
  """Batches -> sorted list of (inputs, targets) tuples with padding removed."""
  rows = []
  for batch in dataset:
    for source, target in zip(batch["inputs"].numpy(), batch["targets"].numpy()):
      rows.append((tuple(source[source != 0]), tuple(target[target != 0])))
  return sorted(rows)


def _as_rows(examples):
  return sorted((tuple(s), tuple(t)) for s, t in examples)


def test_bucket_upper_bounds_follow_tensor2tensor():
  assert pipeline.bucket_upper_bounds(30) == [
      8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 22, 24, 26, 28, 30]
  bounds = pipeline.bucket_upper_bounds(256)
  assert bounds[-4:] == [196, 215, 236, 256] and len(bounds) == 42  # 196 * 1.1 = 215.6
  assert pipeline.bucket_upper_bounds(5) == [5]


def test_one_pass_keeps_every_short_example_and_drops_only_long_ones(tmp_path):
  examples = _examples(300)
  files = _write(tmp_path, examples)
  dataset = pipeline.pipeline(files, batch_tokens=200, max_length=30, training=False)
  kept = [e for e in examples if max(len(e[0]), len(e[1])) <= 30]
  assert 0 < len(kept) < 300
  assert _unbatch(dataset) == _as_rows(kept)


@pytest.mark.parametrize("static_shapes", [False, True])
def test_batches_respect_the_token_budget(tmp_path, static_shapes):
  files = _write(tmp_path, _examples(500))
  dataset = pipeline.pipeline(files, batch_tokens=256, max_length=40, training=True, seed=3,
                            static_shapes=static_shapes)
  bounds = pipeline.bucket_upper_bounds(40)
  for batch in dataset.take(50):
    batch_size, source_len = batch["inputs"].shape
    target_len = batch["targets"].shape[1]
    assert batch_size * source_len <= 256 and batch_size * target_len <= 256
    if static_shapes:  # Padded to a bucket bound, full batches only.
      assert source_len == target_len and source_len in bounds
      assert batch_size == 256 // source_len


def test_static_shapes_come_from_a_small_fixed_set(tmp_path):
  files = _write(tmp_path, _examples(500))
  dataset = pipeline.pipeline(files, batch_tokens=256, max_length=40, training=True, seed=0,
                            static_shapes=True)
  shapes = {tuple(batch["inputs"].shape) for batch in dataset.take(100)}
  allowed = {(256 // u, u) for u in pipeline.bucket_upper_bounds(40)}
  assert shapes <= allowed and len(shapes) > 3


def test_seeded_pipeline_is_deterministic(tmp_path):
  files = _write(tmp_path, _examples(400), num_files=2)

  def first_batches(seed):
    dataset = pipeline.pipeline(files, 256, 40, training=True, seed=seed, shuffle_buffer=100)
    return [batch["inputs"].numpy().tolist() for batch in dataset.take(8)]

  assert first_batches(7) == first_batches(7)
  assert first_batches(7) != first_batches(8)


@pytest.mark.parametrize("num_files", [1, 4])
def test_worker_shards_are_disjoint_and_complete(tmp_path, num_files):
  examples = _examples(200, max_len=20)
  files = _write(tmp_path, examples, num_files)
  shards = [_unbatch(pipeline.pipeline(files, 256, 40, training=False, num_shards=3, shard_index=i))
            for i in range(3)]
  assert all(shards)
  assert sorted(sum(shards, [])) == _as_rows(examples)
  with pytest.raises(ValueError, match="shard_index=3"):
    pipeline.read_records(files, num_shards=3, shard_index=3)


def test_budget_smaller_than_max_length_is_refused(tmp_path):
  files = _write(tmp_path, _examples(10))
  with pytest.raises(ValueError, match="batch_tokens=32 is smaller than max_length=64"):
    pipeline.pipeline(files, batch_tokens=32, max_length=64, training=True)


def test_multi30k_batches_are_at_least_90_percent_real_tokens(multi30k_data):
  problem = t2t_lite.get_problem("multi30k_ende")
  hparams = t2t_lite.get_hparams("transformer_base")
  dataset = problem.dataset("train", multi30k_data["multi30k_ende"], hparams, training=True,
                            batch_tokens=4096, seed=0)
  real = slots = 0
  for batch in dataset.take(150):
    source, target = batch["inputs"].numpy(), batch["targets"].numpy()
    assert source.size <= 4096 and target.size <= 4096
    for side in (source, target):
      lengths = np.count_nonzero(side, axis=1)
      assert (side[np.arange(len(side)), lengths - 1] == EOS).all()  # Every row ends in EOS.
      assert np.count_nonzero(side == EOS) == len(side)
    real += np.count_nonzero(source) + np.count_nonzero(target)
    slots += source.size + target.size
  assert real / slots >= 0.90
