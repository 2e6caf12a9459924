"""hparams word_dropout (t2t_lite/data/word_dropout.py): wsj_parsing's training examples with rare
words replaced by their unknown-word class, in source and target alike, the same in every run
and after a resume; a clear refusal where a vocabulary has no classes."""
import json

import numpy as np
import pytest
import tensorflow as tf

import t2t_lite
from t2t_lite.data import word_dropout
from t2t_lite.data.problem_base import ProblemError
from t2t_lite.train import trainer


@pytest.fixture(scope="module")
def wsj(ptb_dir, tmp_path_factory):
  """(problem, data_dir) of wsj_parsing with word slots (targets that repeat source words),
  prepared once."""
  problem = t2t_lite.get_problem("wsj_parsing", target_tags="words")
  data_dir = str(tmp_path_factory.mktemp("wsj_word_dropout"))
  problem.prepare(data_dir, str(ptb_dir))
  return problem, data_dir


def batches(problem, data_dir, rate, count=30, seed=1):
  hparams = t2t_lite.get_hparams("transformer_parsing_small", f"word_dropout={rate}")
  ds = problem.dataset("train", data_dir, hparams, training=True, seed=seed)
  return [{k: v.numpy() for k, v in batch.items()} for batch in ds.take(count)]


def test_words_map_to_their_class_and_rare_words_drop_more_often(wsj):
  problem, data_dir = wsj
  tok = problem.tokenizer(data_dir)
  class_ids, counts = problem.word_classes(data_dir)
  vocab = tok.vocabulary
  assert vocab[class_ids[tok.encode("the")[0]]] == "<unk>"
  assert vocab[class_ids[tok.encode("market")[0]]] == "<unk>"
  assert vocab[class_ids[tok.encode("company")[0]]] == "<unk-y>"
  assert vocab[class_ids[tok.encode("Japanese")[0]]] == "<unk-capital>"
  assert vocab[class_ids[tok.encode("1989")[0]]] == "<unk-digit>"
  for token in (",", ".", "(NP", ")NP", "<unk-capital>", "<unk>"):  # no words: they stay
    assert class_ids[tok.encode(token)[0]] == tok.encode(token)[0], token
  assert counts[tok.encode("the")[0]] > 1000 and counts[tok.encode(",")[0]] == 0
  probabilities = word_dropout.drop_probabilities(class_ids, counts, 0.5)
  assert word_dropout.drop_probabilities([5, 5], [1, 0], 0.5)[0] == pytest.approx(0.5)
  assert probabilities[tok.encode("the")[0]] < 1e-3
  rare = tok.encode("posted")[0]
  assert probabilities[rare] == pytest.approx(1 / (1 + counts[rare]))
  assert probabilities[tok.encode("(NP")[0]] == 0 and probabilities[tok.encode(",")[0]] == 0


def test_a_dropped_word_is_its_class_in_the_source_and_its_target_slot_alike(wsj):
  problem, data_dir = wsj
  class_ids, _ = problem.word_classes(data_dir)
  dropped_in_all = 0
  for plain, dropped in zip(batches(problem, data_dir, 0.0), batches(problem, data_dir, 0.9)):
    assert plain["inputs"].shape == dropped["inputs"].shape  # the same examples, in order
    for x0, x1, y0, y1 in zip(plain["inputs"], dropped["inputs"], plain["targets"],
                              dropped["targets"]):
      gone = set(x0[x0 != x1].tolist())
      np.testing.assert_array_equal(x1[x0 != x1], class_ids[x0[x0 != x1]])
      # Each word type dropped everywhere in its example, and only those.
      assert not gone & set(x1.tolist())
      np.testing.assert_array_equal(y1, np.where(np.isin(y0, list(gone)), class_ids[y0], y0))
      dropped_in_all += len(gone)
  assert dropped_in_all > 100


def test_the_draws_repeat_with_the_seed_and_change_by_example(wsj):
  problem, data_dir = wsj
  first, again = batches(problem, data_dir, 0.5), batches(problem, data_dir, 0.5)
  for a, b in zip(first, again):
    np.testing.assert_array_equal(a["inputs"], b["inputs"])
  plain = batches(problem, data_dir, 0.0)
  changed = [(a["inputs"] != p["inputs"]).mean() for a, p in zip(first, plain)]
  assert 0.01 < np.mean(changed) < 0.15  # rate 0.5: rare words, not "the"
  # Each example draws anew: a word type dropped in one example is kept in another.
  fates = {}
  for a, p in zip(first, plain):
    for x1, x0 in zip(a["inputs"].ravel(), p["inputs"].ravel()):
      fates.setdefault(x0, set()).add(bool(x1 != x0))
  assert sum(fate == {True, False} for fate in fates.values()) > 20


def test_the_input_position_resumes_exactly_from_a_checkpoint(wsj, tmp_path):
  problem, data_dir = wsj
  hparams = t2t_lite.get_hparams("transformer_parsing_small", "word_dropout=0.9")
  make = lambda: iter(problem.dataset("train", data_dir, hparams, training=True, seed=3))
  iterator = make()
  for _ in range(3):
    next(iterator)
  path = tf.train.Checkpoint(iterator=iterator).write(str(tmp_path / "position"))
  expected = [next(iterator)["inputs"].numpy() for _ in range(3)]
  resumed = make()
  tf.train.Checkpoint(iterator=resumed).read(path).assert_consumed()
  for want in expected:
    np.testing.assert_array_equal(next(resumed)["inputs"].numpy(), want)


def test_a_vocabulary_without_counts_is_named(wsj, tmp_path):
  problem, data_dir = wsj
  old = tmp_path / "old"
  old.mkdir()
  for name in tf.io.gfile.listdir(data_dir):
    tf.io.gfile.copy(f"{data_dir}/{name}", str(old / name))
  vocab_file = next(old.glob("vocab*.json"))
  vocab = json.loads(vocab_file.read_text())
  del vocab["word_counts"]
  vocab_file.write_text(json.dumps(vocab))
  fresh = t2t_lite.get_problem("wsj_parsing", target_tags="words")
  with pytest.raises(ProblemError, match=f"{vocab_file} was written without word counts"):
    batches(fresh, str(old), 0.5, count=1)


def test_training_refuses_word_dropout_without_word_classes(tmp_path):
  problem = t2t_lite.get_problem("algorithmic_reverse")
  hparams = t2t_lite.get_hparams("transformer_tiny", "word_dropout=0.2")
  config = trainer.TrainConfig(model_dir=str(tmp_path / "model"), train_steps=1)
  with pytest.raises(ProblemError, match="word_dropout=0.2: algorithmic_reverse's vocabulary "
                                         "has no unknown-word classes"):
    trainer.train(problem, hparams, str(tmp_path / "data"), config)
  assert not (tmp_path / "model").exists() and not (tmp_path / "data").exists()
