"""The vocabulary shortlist (t2t_lite/decode/shortlist.py): the table built from training pairs,
each batch's vocabulary and its exact fallback, the search over it, and the tools that use it
(t2t-lite-decode and the export, each run as a user runs it)."""
import json
import os
import re

import numpy as np
import pytest
import tensorflow as tf
from conftest import file_hashes, tf1_serve_all, write_records
from test_bad_input import assert_one_line, run_tool

import t2t_lite
from t2t_lite.decode import shortlist, translation
from t2t_lite.rundir import run_files

WORDS = "a man rides horse the dog runs in park woman with red hat over bridge".split()
LINES = ["a man rides the horse", "the dog runs in the park", "woman with red hat",
         "over the bridge", "a dog"]
SETTINGS = dict(beam_size=4, alpha=0.6, extra_length=8, precision="none")


def test_table_ranks_each_source_tokens_targets_by_how_often_they_cooccur():
  pairs = [([5, 6, 1], [7, 8, 1]), ([5, 1], [7, 9, 1]), ([5, 6, 1], [7, 9, 10, 1]),
           ([6, 1], [8, 1])]
  table = shortlist.build(pairs, vocab_size=12, frequent=1, per_source=2)
  # Target counts: 7 three times (the one frequent token), 8 and 9 twice, 10 once.
  assert table.frequent.numpy().tolist() == [0, 1, 7]
  candidates = table.candidates.numpy()
  assert candidates[5].tolist() == [9, 8]  # c(5, 9) = 2 > c(5, 8) = c(5, 10) = 1, then by id
  assert candidates[6].tolist() == [8, 9]  # c(6, 8) = 2, c(6, 9) = 1
  assert candidates[7].tolist() == [0, 0]  # never a source token
  assert table.known.numpy().nonzero()[0].tolist() == [0, 1, 5, 6]
  assert table.pairs == 4
  again = shortlist.Shortlist.from_bytes(table.to_bytes())
  assert (again.candidates.numpy() == candidates).all() and again.pairs == 4


def test_batch_vocabulary_is_the_union_in_id_order_and_everything_for_an_unknown_token():
  table = shortlist.build([([5, 6, 1], [7, 8, 1]), ([5, 1], [9, 1]), ([6, 1], [10, 1])],
                          vocab_size=12, frequent=0, per_source=3)
  vocabulary = table.batch_vocabulary(tf.constant([[5, 1, 0], [6, 1, 0]]))
  assert vocabulary.numpy().tolist() == [0, 1, 7, 8, 9, 10]
  assert table.batch_vocabulary(tf.constant([[5, 1]])).numpy().tolist() == [0, 1, 7, 8, 9]
  # Token 3 never occurred in a source: the whole vocabulary, the exact fallback.
  assert table.batch_vocabulary(tf.constant([[5, 3, 1]])).numpy().tolist() == list(range(12))


@pytest.fixture(scope="module")
def model_dir(make_random_model_dir):
  """A random transformer_tiny run whose data_dir holds training pairs of its vocabulary."""
  model_dir = make_random_model_dir("shortlist", WORDS)
  data_dir = os.path.join(os.path.dirname(model_dir), "data")  # where its vocabulary came from
  run_file = os.path.join(model_dir, run_files.RUN_FILE)
  info = json.load(open(run_file))
  with open(run_file, "w") as f:
    json.dump(dict(info, data_dir=data_dir), f)
  tokenizer = t2t_lite.get_problem("multi30k_ende").tokenizer(model_dir)
  rng = np.random.default_rng(0)
  pairs = []
  for _ in range(300):  # Target words: the source's words shifted by one in WORDS.
    words = rng.choice(WORDS, rng.integers(2, 6)).tolist()
    shifted = [WORDS[(WORDS.index(w) + 1) % len(WORDS)] for w in words]
    pairs.append((tokenizer.encode(" ".join(words), add_eos=True),
                  tokenizer.encode(" ".join(shifted), add_eos=True)))
  write_records(os.path.join(data_dir, "train-00000-of-00001.tfrecord"), pairs)
  return model_dir


def _translator(model_dir, **settings):
  return translation.Translator.from_model_dir(model_dir, **dict(SETTINGS, **settings))


@pytest.fixture(scope="module")
def full(model_dir):
  """The Translator of model_dir without a shortlist, whose searches the tests share."""
  return _translator(model_dir)


def test_a_shortlist_of_every_token_decodes_exactly_as_the_whole_vocabulary(model_dir, full):
  vocab_size = full.model.vocab_size
  pairs = [(list(range(2, vocab_size)), list(range(2, vocab_size)))]
  everything = shortlist.build(pairs, vocab_size, frequent=0, per_source=vocab_size)
  listed = _translator(model_dir, shortlist=True, vocabulary_shortlist=everything)
  texts, scores = full.translate(LINES)
  assert listed.translate(LINES) == (texts, pytest.approx(scores, abs=1e-4))


def test_outputs_keep_to_the_batch_vocabulary_unless_a_source_token_is_unknown(model_dir, full):
  vocab_size = full.model.vocab_size
  narrow = shortlist.build([([5, 6, 1], [7, 8, 1])], vocab_size, frequent=0, per_source=2)
  listed = _translator(model_dir, shortlist=True, vocabulary_shortlist=narrow)
  inputs = tf.constant([[5, 6, 1], [6, 1, 0]])
  outputs = listed.decode_ids(inputs)["outputs"].numpy()  # [B, 1, L]
  assert set(outputs.ravel()) <= {0, 1, 7, 8} and (outputs > 1).any()
  # An unknown source token (9): the batch decodes over the whole vocabulary, as without one.
  unknown = tf.constant([[5, 9, 1], [6, 1, 0]])
  whole = full.decode_ids(unknown)
  assert (listed.decode_ids(unknown)["outputs"].numpy() == whole["outputs"].numpy()).all()


def test_decode_builds_the_table_once_into_the_run_and_the_export_answers_alike(model_dir,
                                                                               tmp_path):
  (tmp_path / "in.txt").write_text("".join(line + "\n" for line in LINES))
  flags = ["--model_dir", model_dir, "--input_file", tmp_path / "in.txt", "--beam_size=4",
           "--alpha=0.6", "--extra_length=8", "--precision=none", "--no_progress"]
  code, _, err = run_tool("decode", *flags, "--shortlist", "--output_file", tmp_path / "a")
  assert code == 0, err
  table_file = os.path.join(model_dir, run_files.SHORTLIST_FILE)
  assert "built a vocabulary shortlist from 300 training pairs" in err
  assert os.path.exists(table_file)
  built = open(table_file, "rb").read()
  decoded = (tmp_path / "a").read_text().splitlines()
  # The run's own table keeps these outputs to each line's vocabulary: they are its outputs.
  assert decoded == _translator(model_dir, shortlist=True).translate(LINES)[0]

  # A target prefix and phrases through the shortlist ('source<TAB>prefix<TAB>phrase...'): the
  # forced words join each batch's vocabulary (composition.py: they compose), so every output
  # starts with its prefix and contains its phrases. "bridge" follows no source word of these
  # lines in training (the target words are the source's shifted by one): only forcing brings it.
  sources, prefixes, phrases = LINES[:3] + [""], ["a dog", "", "bridge", ""], [
      ["bridge"], ["red hat"], [], []]
  (tmp_path / "forced.txt").write_text("".join(
      "\t".join([source, prefix] + row) + "\n" for source, prefix, row in
      zip(sources, prefixes, phrases)))
  code, forced, err = run_tool("decode", *flags[:2], "--input_file", tmp_path / "forced.txt",
                               *flags[4:], "--shortlist", "--target_prefix", "--constraints")
  assert code == 0, err
  forced = forced.splitlines()
  assert len(forced) == 4 and forced[3] == ""
  # As whole words: no letter or digit may go on a prefix's or phrase's last word (punctuation
  # may: the model's weights are random).
  whole = lambda words: rf"{re.escape(words)}(?!\w)"
  for output, prefix, row in zip(forced, prefixes, phrases):
    assert not prefix or re.match(whole(prefix), output), (output, prefix)
    assert all(re.search("(^| )" + whole(p), output) for p in row), (output, row)

  # The next tool to want it, the export (its own process, as decode's, through the same
  # loading), reads the table from the run and does not build it again.
  code, out, err = run_tool("export", "--model_dir", model_dir, "--export_dir",
                            tmp_path / "export", "--beam_size=4", "--alpha=0.6",
                            "--extra_length=8", "--precision=none", "--shortlist",
                            "--target_prefix", "--constraints")
  assert code == 0 and "built" not in err, err
  assert open(table_file, "rb").read() == built
  path = out.strip()
  settings = json.load(open(os.path.join(path, "assets.extra", "t2t_lite_export.json")))
  assert settings["shortlist"] is True
  # TF Serving's loader, one process: each request as decode read its lines, as one batch (the
  # same batch vocabulary).
  plain, both = tf1_serve_all(path, [
      ("serving_default", {"inputs": LINES}),
      ("translate_with_prefix_and_constraints", {"inputs": sources, "prefixes": prefixes,
                                                 "constraints": [row[:1] or [""] for row in
                                                                 phrases]})])
  assert plain["outputs"] == decoded and both["outputs"] == forced


@pytest.mark.parametrize("flag, message", [
    ("--xla", "shortlist with --xla: a batch's shortlist has its own size"),
    ("--sample", "shortlist with sample: sampling draws from the whole vocabulary")])
def test_shortlist_is_refused_where_it_does_not_apply(model_dir, tmp_path, flag, message):
  (tmp_path / "in.txt").write_text("a man\n")
  before = file_hashes(model_dir)
  code, out, err = run_tool("decode", "--model_dir", model_dir, "--input_file",
                            tmp_path / "in.txt", "--output_file", tmp_path / "out", "--shortlist",
                            flag)
  assert code == 2 and out == ""
  assert_one_line(err, "t2t-lite-decode", message)
  assert file_hashes(model_dir) == before and not (tmp_path / "out").exists()


def test_a_run_without_training_data_is_refused_in_one_line(make_random_model_dir, tmp_path):
  model_dir = make_random_model_dir("shortlist_no_data", WORDS)
  (tmp_path / "in.txt").write_text("a man\n")
  before = file_hashes(model_dir)
  code, out, err = run_tool("decode", "--model_dir", model_dir, "--input_file",
                            tmp_path / "in.txt", "--output_file", tmp_path / "out", "--shortlist")
  assert code == 2 and out == ""
  assert_one_line(err, "t2t-lite-decode", f"{model_dir} has no shortlist.npz and no training "
                  "data to build one from: its run.json names no data_dir")
  assert file_hashes(model_dir) == before and not (tmp_path / "out").exists()
