"""hparams source_pointer (t2t_lite/modeling/pointer.py): the decoder reads the encoder output of
the next source word to place; the same vectors in training, packed rows, cached decoding steps
and beam search, and a clear refusal for a problem whose outputs place no words."""
import keras
import numpy as np
import pytest
import tensorflow as tf

import t2t_lite
from t2t_lite.data import packing
from t2t_lite.decode import beam_search
from t2t_lite.train import trainer

VOCAB = 40
SLOTS = list(range(20, 40))  # ids 20..39 place a word; 2..19 are "brackets"


def pointer_model(overrides=""):
  keras.utils.set_random_seed(1)
  hparams = t2t_lite.get_hparams("transformer_tiny", "source_pointer=true," + overrides)
  return t2t_lite.build_model(hparams, VOCAB, source_slots=SLOTS)


def test_the_word_index_counts_the_slots_before_each_position():
  model = pointer_model()
  pointer = model.source_pointer
  decoder_inputs = tf.constant([[0, 3, 25, 4, 21, 22, 5], [0, 30, 31, 2, 32, 0, 0]])
  np.testing.assert_array_equal(pointer.word_index(decoder_inputs).numpy(),
                                [[0, 0, 1, 1, 2, 3, 3], [0, 1, 2, 2, 3, 3, 3]])
  # Packed: two examples in one row, the second's first input is 0 and its count restarts.
  packed = tf.constant([[0, 25, 4, 21, 0, 3, 30, 31]])
  positions = tf.constant([[0, 1, 2, 3, 0, 1, 2, 3]])
  np.testing.assert_array_equal(pointer.word_index(packed, positions).numpy(),
                                [[0, 1, 1, 2, 0, 0, 1, 2]])
  # The slots are the checkpoint's, float 0/1 (averaging keeps them).
  assert pointer.slots.numpy()[SLOTS].tolist() == [1.0] * len(SLOTS)
  assert pointer.slots.numpy()[:20].sum() == 0 and not pointer.slots.trainable


def test_the_pointer_is_the_projected_encoder_output_of_the_word_it_points_at():
  model = pointer_model()
  pointer = model.source_pointer
  encoded = tf.random.stateless_normal([1, 4, 64], seed=[1, 2])
  vectors = pointer(encoded, tf.constant([[0, 1, 1, 3, 4]])).numpy()  # index 4: past the end
  projected = pointer.projection(encoded).numpy()[0]
  np.testing.assert_allclose(vectors[0, :4], projected[[0, 1, 1, 3]], atol=1e-5)
  np.testing.assert_array_equal(vectors[0, 4], 0.0)
  # And the decoder reads it: without it (a zero projection) the logits are others.
  inputs, targets = tf.constant([[7, 8, 9, 1]]), tf.constant([[3, 25, 4, 21, 1]])
  with_pointer = model({"inputs": inputs, "targets": targets}).numpy()
  pointer.projection.kernel.assign(tf.zeros_like(pointer.projection.kernel))
  without = model({"inputs": inputs, "targets": targets}).numpy()
  assert np.abs(with_pointer - without).max() > 1e-3


@pytest.mark.parametrize("cache_kind", ["buffers", "growing"])
def test_cached_decode_steps_equal_the_full_decode(cache_kind):
  model = pointer_model()
  rng = np.random.default_rng(3)
  inputs = rng.integers(2, VOCAB, [2, 6]).astype(np.int32)
  targets = rng.integers(2, VOCAB, [2, 7]).astype(np.int32)  # brackets and slots mixed
  full = model({"inputs": inputs, "targets": targets}).numpy()
  encoded, mask = model.encode(inputs)
  cache = model.init_cache(encoded, mask, 7 if cache_kind == "buffers" else None)
  previous, steps = tf.zeros([2], tf.int32), []
  for i in range(7):
    logits, cache = model.decode_step(previous, tf.constant(i), cache)
    steps.append(logits.numpy())
    previous = tf.constant(targets[:, i])
  np.testing.assert_allclose(np.stack(steps, axis=1), full, atol=2e-5)
  placed = np.isin(targets, SLOTS).sum(axis=1)
  np.testing.assert_array_equal(cache["words_placed"].numpy(), placed)


def test_packed_rows_give_the_logits_of_the_examples_one_by_one():
  model = pointer_model()
  rng = np.random.default_rng(4)
  examples = [(rng.integers(2, VOCAB, rng.integers(3, 8)).tolist() + [1],
               rng.integers(2, VOCAB, rng.integers(3, 10)).tolist() + [1]) for _ in range(6)]
  dataset = tf.data.Dataset.from_generator(
      lambda: iter({"inputs": s, "targets": t} for s, t in examples),
      output_signature={"inputs": tf.TensorSpec([None], tf.int64),
                        "targets": tf.TensorSpec([None], tf.int64)})
  rows = list(packing.pack(dataset, (32, 40)).as_numpy_iterator())
  batch = {name: tf.constant(np.stack([row[name] for row in rows])) for name in rows[0]}
  assert batch["targets_segmentation"].numpy().max() >= 3
  packed = model(batch).numpy()
  compared = 0
  for r, row in enumerate(rows):
    for segment in range(1, row["targets_segmentation"].max() + 1):
      source = row["inputs"][row["inputs_segmentation"] == segment]
      target = row["targets"][row["targets_segmentation"] == segment]
      alone = model({"inputs": tf.constant([source]), "targets": tf.constant([target])})
      np.testing.assert_allclose(packed[r][row["targets_segmentation"] == segment],
                                 alone.numpy()[0], atol=2e-5)
      compared += 1
  assert compared == len(examples)


def test_beam_search_with_static_buffers_keeps_each_hypothesis_count():
  """Without cache reordering (XLA's static buffers) the words-placed counter still follows
  its hypothesis: the beams and scores equal those of the reordering search."""
  model = pointer_model()
  kernel = model.source_pointer.projection.kernel  # a pointer that decides the beams
  kernel.assign(tf.random.stateless_normal(kernel.shape, seed=[5, 6]))
  inputs = tf.constant([[7, 8, 9, 10, 11, 12, 1], [11, 12, 13, 1, 0, 0, 0]])
  encoded, mask = model.encode(inputs)
  results = []
  for reorder in (True, False):
    cache = model.init_cache(encoded, mask, None if reorder else 12)
    if reorder:
      def fn(ids, index, cache):
        return model.decode_step(ids, index, cache)
    else:
      def fn(ids, index, cache, rows):
        return model.decode_step(ids, index, cache, cache_rows=rows)
    seqs, scores = beam_search.beam_search(fn, cache, batch_size=2, beam_size=3, alpha=0.6,
                                           eos_id=1, max_decode_length=12,
                                           reorder_cache=reorder)
    results.append((seqs.numpy(), scores.numpy()))
  np.testing.assert_array_equal(results[0][0], results[1][0])
  np.testing.assert_allclose(results[0][1], results[1][1], atol=1e-4)


def test_training_refuses_the_pointer_for_a_problem_without_slots(tmp_path):
  problem = t2t_lite.get_problem("algorithmic_reverse")
  hparams = t2t_lite.get_hparams("transformer_tiny", "source_pointer=true")
  config = trainer.TrainConfig(model_dir=str(tmp_path / "model"), train_steps=1)
  with pytest.raises(trainer.TrainerError,
                     match="source_pointer=True: the outputs of algorithmic_reverse do not"):
    trainer.train(problem, hparams, str(tmp_path / "data"), config)
  assert not (tmp_path / "model").exists() and not (tmp_path / "data").exists()
