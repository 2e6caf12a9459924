"""Packed batches: every example exactly once, attention never crosses examples (a packed row
gives the logits of its examples run one by one), real tokens fill the static shape, and a
packed run trains and refuses to resume unpacked."""
import numpy as np
import pytest
from conftest import write_records
import tensorflow as tf

import t2t_lite
from t2t_lite.data import packing, pipeline
from t2t_lite.modeling.architectures import build_model
from t2t_lite.rundir import run_files
from t2t_lite.train import trainer


def _examples(count, max_source, max_target, seed=0):
  rng = np.random.default_rng(seed)
  return [(rng.integers(2, 50, rng.integers(1, max_source)).tolist() + [1],
           rng.integers(2, 50, rng.integers(1, max_target)).tolist() + [1])
          for _ in range(count)]


def _dataset(examples):
  return tf.data.Dataset.from_generator(
      lambda: ({"inputs": s, "targets": t} for s, t in examples),
      output_signature={side: tf.TensorSpec([None], tf.int32) for side in packing.FEATURES})


def _unpack(row):
  """A packed row (numpy) -> [(source ids, target ids)] in segment order, checking that
  segments are 1..n, contiguous, and positions restart at 0 in each."""
  examples = []
  for segment in range(1, row["targets_segmentation"].max() + 1):
    pair = []
    for side in packing.FEATURES:
      where = np.flatnonzero(row[f"{side}_segmentation"] == segment)
      assert where.size and (np.diff(where) == 1).all(), (side, segment)
      np.testing.assert_array_equal(row[f"{side}_position"][where], np.arange(where.size))
      pair.append(row[side][where].tolist())
    examples.append(tuple(pair))
  assert row["inputs_segmentation"].max() == row["targets_segmentation"].max()
  for side in packing.FEATURES:  # padding is 0 everywhere
    padding = row[f"{side}_segmentation"] == 0
    assert not row[side][padding].any() and not row[f"{side}_position"][padding].any()
  return examples


def test_every_example_is_packed_once_within_the_row_lengths():
  examples = _examples(700, 12, 16)
  # A small chunk and few open rows exercise the chunk ends and the closing of full rows.
  rows = list(packing.pack(_dataset(examples), (24, 32), open_rows=3, chunk=50)
              .as_numpy_iterator())
  assert {row["inputs"].shape for row in rows} == {(24,)}
  assert {row["targets"].shape for row in rows} == {(32,)}
  unpacked = [pair for row in rows for pair in _unpack(row)]
  assert sorted(unpacked) == sorted(examples)
  # Within a third of the fewest rows possible, though 14 chunks each end with 3 open rows.
  fewest = max(sum(len(s) for s, _ in examples) / 24, sum(len(t) for _, t in examples) / 32)
  assert len(rows) < 1.35 * fewest


def test_a_batch_of_packed_rows_has_one_static_shape():
  # A chunk of one pass over the 300 examples: the default chunk would first draw 16,384
  # examples through the Python generator to make the one batch looked at.
  batches = packing.batch_packed(_dataset(_examples(300, 10, 12)).repeat(), 128, (24, 32),
                                 chunk=300)
  shapes = {name: tuple(value.shape) for name, value in next(iter(batches)).items()}
  assert shapes == {"inputs": (4, 24), "inputs_segmentation": (4, 24),
                    "inputs_position": (4, 24), "targets": (4, 32),
                    "targets_segmentation": (4, 32), "targets_position": (4, 32)}
  with pytest.raises(ValueError, match="batch_tokens=16 is smaller than the packed row length 32"):
    packing.batch_packed(_dataset([]), 16, (24, 32))


@pytest.mark.parametrize("overrides", ["", "position_encoding=learned", "norm_type=pre"])
def test_packed_rows_give_the_logits_of_the_examples_one_by_one(overrides):
  tf.keras.utils.set_random_seed(0)
  model = build_model(t2t_lite.get_hparams("transformer_tiny", overrides), 50)
  rows = list(packing.pack(_dataset(_examples(9, 9, 12, seed=1)), (40, 48)).as_numpy_iterator())
  assert len(rows) >= 2 and max(row["targets_segmentation"].max() for row in rows) >= 3
  batch = {name: tf.constant(np.stack([row[name] for row in rows])) for name in rows[0]}
  packed = model(batch).numpy()  # [rows, 48, V]
  compared = 0
  for r, row in enumerate(rows):
    for segment, (source, target) in enumerate(_unpack(row), start=1):
      alone = model({"inputs": tf.constant([source]), "targets": tf.constant([target])})
      np.testing.assert_allclose(packed[r][row["targets_segmentation"] == segment],
                                 alone.numpy()[0], atol=2e-5)
      compared += 1
  assert compared == 9


def test_packed_lengths_follow_the_token_ratio_of_multi30k(multi30k_data):
  problem = t2t_lite.get_problem("multi30k_ende")
  stats = problem.manifest(multi30k_data["multi30k_ende"])["splits"]["train"]
  source_tokens, target_tokens = stats["tokens"]
  assert source_tokens < target_tokens  # English has fewer subwords than German here
  lengths = problem.packed_lengths(multi30k_data["multi30k_ende"], 256)
  assert lengths[1] == 256 and stats["longest"][0] <= lengths[0] < 256
  assert lengths[0] % 8 == 0 and lengths[0] >= 256 * source_tokens / target_tokens


def test_multi30k_packed_batches_are_97_percent_real_tokens(multi30k_data):
  problem = t2t_lite.get_problem("multi30k_ende")
  hparams = t2t_lite.get_hparams("transformer_base")

  def ratio(**kwargs):
    dataset = problem.dataset("train", multi30k_data["multi30k_ende"], hparams, training=True,
                              batch_tokens=4096, seed=0, **kwargs)
    real = slots = 0
    for batch in dataset.take(60):
      for side in packing.FEATURES:
        real += int(tf.math.count_nonzero(batch[side]))
        slots += int(tf.size(batch[side]))
    return real / slots

  packed, padded = ratio(pack=True), ratio(static_shapes=True)
  assert packed >= 0.97 and padded < packed - 0.02, (packed, padded)


def test_packing_is_for_training_only(tmp_path):
  path = str(tmp_path / "train.tfrecord")
  write_records(path, _examples(5, 4, 4))
  with pytest.raises(ValueError, match="packed batches are for training only"):
    pipeline.pipeline([path], 64, 16, training=False, packed_lengths=(16, 16))


def test_a_packed_run_trains_and_resumes_only_packed(tmp_path):
  # 1,000 training examples rather than the registered 20,000: each run fills its shuffle
  # buffer with the whole split and each checkpoint keeps it, while six steps train on about 120.
  problem = t2t_lite.get_problem("algorithmic_reverse", train_size=1000)
  data_dir = str(tmp_path / "data")
  problem.prepare(data_dir)
  hparams = t2t_lite.get_hparams(
      "transformer_tiny", "num_layers=1,d_model=32,d_ff=64,num_heads=2,batch_size=256,"
      "max_length=24")
  vocab_size = problem.tokenizer(data_dir).vocab_size
  model_dir = str(tmp_path / "run")

  def run(steps, pack):
    config = trainer.TrainConfig(model_dir=model_dir, train_steps=steps, eval_steps=0,
                                 xla=False, log_every=1, seed=3, pack=pack)
    return trainer.Trainer(problem, hparams, data_dir, config, vocab_size,
                           {"problem": problem.name}, log=lambda line: None).train()

  losses = [loss for _, loss in run(4, pack=True)["losses"]]
  assert len(losses) == 4 and np.all(np.isfinite(losses))
  assert [step for step, _ in run(6, pack=True)["losses"]] == [5, 6]  # resumes its iterator
  with pytest.raises(run_files.RunDirError, match="was trained with --pack; resume it with"):
    run(8, pack=False)
