"""Decoding with the real Transformer: cached == full recomputation, XLA == eager, greedy, beam
quality, alpha, the API, t2t-lite-decode (with and without --xla), checkpoint averaging and the
attention pictures.

The model is transformer_tiny with random weights (fixed seeds) on algorithmic_reverse's fixed
vocabulary, so no data is needed; its outputs stop at EOS at various lengths.
"""
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

import t2t_lite
from t2t_lite.train import averaging
from t2t_lite.decode import forced_decoding, plan, search, translation
from t2t_lite.bin import attention as attention_cli
from t2t_lite.bin import avg_checkpoints as avg_cli
from t2t_lite.bin import decode as decode_cli
from t2t_lite.rundir import checkpoints, run_files
from t2t_lite.rundir.run_files import write_run_files
from test_bad_input import run_tool

PROBLEM = "algorithmic_reverse"
EOS = 1


def random_model(seed, vocab=13):
  keras.utils.set_random_seed(seed)
  return t2t_lite.build_model(t2t_lite.get_hparams("transformer_tiny"), vocab)


def random_inputs(batch, seed=0, vocab=13, max_length=9):
  """0-padded rows of 1..max_length random ids, each ending in EOS."""
  rng = np.random.default_rng(seed)
  inputs = np.zeros([batch, max_length + 1], np.int32)
  for row in inputs:
    n = rng.integers(1, max_length + 1)
    row[:n] = rng.integers(3, vocab, n)
    row[n] = EOS
  return tf.constant(inputs)


def strip(row):
  """Ids up to and including the first EOS."""
  row = list(np.asarray(row))
  return row[:row.index(EOS) + 1] if EOS in row else [t for t in row if t]


def cut_after_eos(rows):
  """[B, L] ids -> the same with 0s after each row's first EOS."""
  return np.array([strip(r) + [0] * (len(r) - len(strip(r))) for r in rows], np.int32)


def greedy_reference(model, inputs, extra_length):
  """Argmax decoding by full recomputation, one sentence and one token at a time."""
  outputs = []
  for row in inputs.numpy():
    source = row[:list(row).index(EOS) + 1][None]
    encoder_output, mask = model.encode(source)
    out = []
    for _ in range(len(source[0]) + extra_length):
      logits = model.decode(np.array([out + [0]], np.int32), encoder_output, mask)[0, -1]
      logits = logits.numpy()
      logits[0] = -np.inf  # PAD is never an output
      out.append(int(np.argmax(logits)))
      if out[-1] == EOS:
        break
    outputs.append(out)
  return outputs


@pytest.fixture(scope="module")
def decode_fn():
  """One traced beam search per (model, setting), shared by the tests."""
  cache = {}

  def decode(model, inputs, **settings):
    key = (id(model), tuple(sorted(settings.items())))
    if key not in cache:
      cache[key] = tf.function(lambda x: search.beams(model, x, **settings))
    ids, scores = cache[key](inputs)
    return ids.numpy(), scores.numpy()

  return decode


class FullRecomputation:
  """The model with no key/value cache: each decode_step runs the whole decoder over the prefix
  so far (kept in the cache, which the search reorders by beam), the reference for the cached
  decoder."""

  def __init__(self, model, length):
    self.model, self.length = model, length
    self.hparams, self.compute_dtype = model.hparams, model.compute_dtype

  def encode(self, inputs, training=False):
    return self.model.encode(inputs, training=training)

  def init_cache(self, encoder_output, inputs_mask):
    return {"encoder_output": encoder_output, "inputs_mask": inputs_mask,
            "targets": tf.zeros([tf.shape(encoder_output)[0], self.length], tf.int32)}

  def decode_step(self, ids, index, cache):
    targets = tf.where(tf.range(self.length) == index - 1, ids[:, None], cache["targets"])
    logits = self.model.decode(targets[:, :index + 1], cache["encoder_output"],
                               cache["inputs_mask"])  # [B*K, index + 1, V]
    return logits[:, index], dict(cache, targets=targets)


def test_cached_equals_full_recomputation(decode_fn):
  model, inputs = random_model(2), random_inputs(6, seed=1)
  settings = dict(beam_size=4, alpha=0.6, extra_length=6)
  cached_ids, cached_scores = decode_fn(model, inputs, **settings)
  full = FullRecomputation(model, inputs.shape[1] + 6)
  full_ids, full_scores = decode_fn(full, inputs, **settings)
  np.testing.assert_array_equal(cached_ids, full_ids)
  np.testing.assert_allclose(cached_scores, full_scores, rtol=1e-5, atol=1e-5)
  # The scores are what the model says of the outputs (teacher-forced, full pass).
  for k in range(4):
    rescored = forced_decoding.scores(model, inputs, cut_after_eos(cached_ids[:, k]), 0.6)
    np.testing.assert_allclose(cached_scores[:, k], rescored["score"].numpy(), rtol=1e-4,
                               atol=1e-4)


def test_xla_cached_equals_eager():
  model, inputs = random_model(2), random_inputs(3, seed=4)
  settings = dict(beam_size=3, alpha=0.6, extra_length=5)
  eager_ids, eager_scores = search.beams(model, inputs, **settings)
  compiled = tf.function(lambda x: search.beams(model, x, static_shapes=True, **settings),
                         jit_compile=True)
  xla_ids, xla_scores = compiled(inputs)
  np.testing.assert_array_equal(xla_ids.numpy(), eager_ids.numpy())
  np.testing.assert_allclose(xla_scores.numpy(), eager_scores.numpy(), rtol=1e-4, atol=1e-4)


@pytest.fixture(scope="module")
def split_searches():
  """{n: a search of random_model(2) whose batch is split into n parts searched at once},
  each traced once for every batch size: one known only when the graph runs (as in the
  export), with per-sentence max_lengths."""
  model = random_model(2)
  settings = dict(beam_size=3, alpha=0.6, extra_length=5)
  spec = [tf.TensorSpec([None, None], tf.int32), tf.TensorSpec([None], tf.int32)]
  return {n: tf.function(lambda x, m, n=n: search.beams(model, x, max_lengths=m, concurrent=n,
                                                         **settings), input_signature=spec)
          for n in (1, 3)}


@pytest.mark.parametrize("batch", [1, 2, 5])
def test_concurrent_searches_equal_one_search(split_searches, batch):
  """The batch split into 3 parts searched at once (a part may be empty) gives one search's
  outputs (split_searches)."""
  inputs = random_inputs(batch, seed=5)
  max_lengths = np.arange(batch, dtype=np.int32) % 4 + 3
  (one_ids, one_scores), (split_ids, split_scores) = (
      split_searches[n](inputs, max_lengths) for n in (1, 3))
  assert split_ids.shape == one_ids.shape == (batch, 3, inputs.shape[1] + 5)
  np.testing.assert_array_equal(split_ids.numpy(), one_ids.numpy())
  np.testing.assert_allclose(split_scores.numpy(), one_scores.numpy(), rtol=1e-5, atol=1e-5)
  assert (np.count_nonzero(one_ids.numpy()[:, 0], axis=1) <= max_lengths).all()


def test_beam_one_is_greedy(decode_fn):
  model, inputs = random_model(3), random_inputs(5, seed=2)
  ids, _ = decode_fn(model, inputs, beam_size=1, alpha=0.6, extra_length=6)
  assert [strip(r) for r in ids[:, 0]] == greedy_reference(model, inputs, 6)


@pytest.mark.parametrize("seed", [2, 3])
def test_beam_four_scores_at_least_as_high_as_greedy(decode_fn, seed):
  model, inputs = random_model(seed), random_inputs(16, seed=seed)
  greedy, _ = decode_fn(model, inputs, beam_size=1, alpha=0.6, extra_length=10)
  beam, beam_scores = decode_fn(model, inputs, beam_size=4, alpha=0.6, extra_length=10)
  greedy_scores = forced_decoding.scores(model, inputs, cut_after_eos(greedy[:, 0]), 0.6)
  rescored = forced_decoding.scores(model, inputs, cut_after_eos(beam[:, 0]), 0.6)
  greedy_scores, rescored = greedy_scores["score"].numpy(), rescored["score"].numpy()
  np.testing.assert_allclose(rescored, beam_scores[:, 0], atol=1e-4)
  assert rescored.mean() > greedy_scores.mean() + 0.1
  assert np.all(rescored >= greedy_scores - 1e-4)  # here even sentence by sentence


# Random models whose alpha=0 outputs end well before the maximum length (some random models
# rarely emit EOS at all: then every alpha gives maximum-length outputs and nothing is shown).
@pytest.mark.parametrize("seed", [3, 4])
def test_larger_alpha_gives_longer_outputs(decode_fn, seed):
  model, inputs = random_model(seed), random_inputs(16, seed=seed)
  lengths = {}
  for alpha in (0.0, 2.0):
    ids, _ = decode_fn(model, inputs, beam_size=4, alpha=alpha, extra_length=10)
    lengths[alpha] = np.mean([len(strip(r)) for r in ids[:, 0]])
  assert lengths[0.0] < 10, f"precondition: this model's alpha=0 outputs are long {lengths}"
  assert lengths[2.0] > lengths[0.0] + 1.0, lengths


# ------------------------------------------------------------------ model_dir, API and CLIs


def save_model_dir(path, model, steps=(1,), noise=0.0, seed=0):
  """A model_dir as the trainer writes it, with one checkpoint per step (weights + noise*i).

  The checkpoints hold the optimizer too, as the trainer's do: most model weights are then
  keyed by their path through the optimizer, not through the model.
  """
  write_run_files(str(path), model.hparams, {"problem": PROBLEM})
  optimizer = keras.optimizers.Adam()
  optimizer.build(model.trainable_variables)
  manager = tf.train.CheckpointManager(tf.train.Checkpoint(model=model, optimizer=optimizer),
                                       str(path), max_to_keep=10)
  rng = np.random.default_rng(seed)
  for step in steps:
    for weight in model.trainable_variables:
      weight.assign_add(noise * rng.normal(size=weight.shape).astype(np.float32))
    manager.save(checkpoint_number=step)
  return str(path)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
  return save_model_dir(tmp_path_factory.mktemp("model"), random_model(3), steps=(10, 20, 30),
                        noise=0.01)


SENTENCES = ["3 1 4 1 5", "", "9 2 6 5 3 5 8 9 7", "2 7"]


def test_translate_api_matches_translating_one_by_one(model_dir):
  # In float32: in bfloat16 a batch of another shape rounds some products otherwise (scores
  # moved by up to 0.017 in test_export's 1,010 sentences).
  texts, scores = t2t_lite.translate(model_dir, SENTENCES, beam_size=2, alpha=0.6,
                                     precision="none")
  assert len(texts) == len(scores) == 4
  assert texts[1] == "" and scores[1] == 0.0  # empty line -> empty output
  translator = translation.Translator.from_model_dir(model_dir, beam_size=2, alpha=0.6,
                                                     precision="none")
  for sentence, text, score in zip(SENTENCES, texts, scores):
    if sentence:
      (alone,), (alone_score,) = translator.translate([sentence], batch_size=1)
      assert (alone, alone_score) == pytest.approx((text, score), abs=1e-4)
  assert all(set(t.split()) <= set("0123456789") for t in texts)
  assert translator.beam_size == 2 and translator.extra_length == 10  # the problem's default


def test_decode_cli_keeps_order_truncates_and_scores(model_dir, tmp_path, capsys, caplog):
  long_line = " ".join(["4"] * 100)  # 101 tokens > max_length 64
  lines = SENTENCES + [long_line]
  (tmp_path / "in.txt").write_text("\n".join(lines) + "\n")
  (tmp_path / "ref.txt").write_text("\n".join(" ".join(s.split()[::-1]) for s in lines) + "\n")
  code = decode_cli.main([
      "--model_dir", model_dir, "--input_file", str(tmp_path / "in.txt"),
      "--output_file", str(tmp_path / "out.txt"), "--reference_file", str(tmp_path / "ref.txt"),
      "--beam_size", "2", "--batch_size", "2", "--precision=none", "--no_progress"])
  assert code == 0
  outputs = (tmp_path / "out.txt").read_text().split("\n")[:-1]
  # One batch against decode's three, in float32 as in
  # test_translate_api_matches_translating_one_by_one.
  expected, _ = translation.translate(model_dir, lines, beam_size=2, precision="none")
  assert outputs == expected and outputs[1] == ""
  assert "line 5: longer than 64 tokens (EOS included): truncated" in caplog.text
  report = json.loads(capsys.readouterr().err.strip().splitlines()[-1])
  accuracy = 100.0 * np.mean([o.split() == s.split()[::-1] for o, s in zip(outputs, lines)])
  assert report["accuracy"] == pytest.approx(accuracy) and report["sentences"] == 5


@pytest.fixture(scope="module")
def run_with_best(tmp_path_factory):
  """A model_dir with checkpoints 10 and 20 whose run kept a best model of other weights (as
  the trainer's --best_metric keeps one in best/, with best.json)."""
  path = save_model_dir(tmp_path_factory.mktemp("run"), random_model(3), steps=(10, 20),
                        noise=0.01)
  best_dir = os.path.join(path, run_files.BEST_DIR)
  run_files.copy_run_files(path, best_dir)
  checkpoints.save_model(random_model(4), best_dir, 10)
  run_files.write_best_record(path, {"metric": "dev_accuracy", "value": 75.0, "step": 10})
  return path


def test_decode_takes_the_runs_best_model_unless_told_otherwise(run_with_best, tmp_path):
  """Through the CLI process: the best model by default, with --xla the same outputs, the
  newest checkpoint or a path when asked; the first line says which and why."""
  (tmp_path / "in.txt").write_text("".join(line + "\n" for line in SENTENCES))

  def decode(*flags):
    code, out, err = run_tool("decode", "--model_dir", run_with_best, "--input_file",
                              tmp_path / "in.txt", "--beam_size=3", "--no_progress",
                              "--precision=none", *flags)
    assert code == 0, err
    return out.splitlines(), err.splitlines()[0]

  translated = {}

  def expected(checkpoint_path):
    if checkpoint_path not in translated:  # Each a model loaded and a search traced: once.
      translated[checkpoint_path] = translation.translate(
          run_with_best, SENTENCES, beam_size=3, checkpoint_path=checkpoint_path,
          precision="none")[0]
    return translated[checkpoint_path]

  settings = "beam 3, alpha 0, max output = input + 10"
  # Then the decoding plan, ending "precision none (asked for" and, where TensorFlow has no
  # oneDNN and the model is wide enough, the compiled matmuls.
  d_model = run_files.read_run(run_with_best).require_hparams().d_model
  how = f"{settings}; {plan.decide('none', False, d_model, plan.capabilities()).describe()}"
  best, newest = (os.path.join(run_with_best, name) for name in ("best/ckpt-10", "ckpt-20"))
  outputs, first = decode()
  assert first == (f"INFO decoding 4 lines with {best} (the run's best dev_accuracy, 75.0 at "
                   f"step 10; --checkpoint_path=newest for ckpt-20); {how}")
  assert outputs == expected(best) == expected(None)
  # --xla (fixed-size key/value buffers) answers what the default search answers.
  outputs, first = decode("--checkpoint_path=newest", "--xla")
  assert first == (f"INFO decoding 4 lines with {newest} (its newest checkpoint that reads); "
                   f"{settings}; {plan.decide('none', True, d_model).describe()}")
  assert outputs == expected(newest) != expected(best)
  path = os.path.join(run_with_best, "ckpt-10")  # A path: the API, which the tool calls.
  loaded = translation.Translator.from_model_dir(run_with_best, path).loaded
  assert loaded.which() == f"{path} (given by --checkpoint_path)"
  assert expected(path) != expected(newest)


def test_the_api_and_ensembles_take_each_runs_best_model(run_with_best, model_dir):
  best = os.path.join(run_with_best, "best", "ckpt-10")
  assert translation.Translator.from_model_dir(run_with_best).loaded.checkpoints == [best]
  ensemble = translation.Translator.from_model_dir([run_with_best, model_dir]).loaded
  assert ensemble.checkpoints == [best, os.path.join(model_dir, "ckpt-30")]
  assert ensemble.reasons[1] == "its newest checkpoint that reads; the run kept no best model"
  with pytest.raises(run_files.RunDirError, match=f"checkpoint_path 'best': {model_dir} kept no "
                                                  "best model"):
    translation.Translator.from_model_dir(model_dir, "best")


def test_sampling_under_xla_with_top_k_1_is_greedy_decoding(model_dir):
  """The sampler over XLA's fixed-size key/value buffers draws what greedy search finds, and
  scores it by its log-probability as beam 1 does."""
  greedy = translation.Translator.from_model_dir(model_dir, beam_size=1, precision="none")
  sampler = greedy.with_options(sample=True, top_k=1, jit_compile=True)
  (texts, scores), (sampled, sampled_scores) = greedy.translate(SENTENCES), sampler.translate(
      SENTENCES)
  assert sampled == texts
  np.testing.assert_allclose(sampled_scores, scores, rtol=1e-4, atol=1e-4)


def test_decode_cli_missing_checkpoint_names_the_directory(tmp_path, capsys):
  write_run_files(str(tmp_path), t2t_lite.get_hparams("transformer_tiny"), {"problem": PROBLEM})
  (tmp_path / "in.txt").write_text("1 2\n")
  code = decode_cli.main(["--model_dir", str(tmp_path), "--input_file",
                          str(tmp_path / "in.txt")])
  assert code == 2
  assert f"no checkpoint found in {tmp_path}" in capsys.readouterr().err


def test_averaged_checkpoint_is_the_mean_and_decodes(model_dir, tmp_path):
  output_dir = str(tmp_path / "avg")
  assert avg_cli.main(["--model_dir", model_dir, "--num_last", "2",
                       "--output_dir", output_dir]) == 0
  averaged = tf.train.latest_checkpoint(output_dir)
  assert averaged.endswith("ckpt-30")
  def values(checkpoint):  # {path from the model: array}
    reader = tf.train.load_checkpoint(checkpoint)
    return {path: reader.get_tensor(key)
            for path, (key, _) in averaging.model_variables(checkpoint).items()}

  first, last = (values(os.path.join(model_dir, f"ckpt-{s}")) for s in (20, 30))
  output = values(averaged)
  assert len(output) == len(random_model(3).trainable_variables) == len(first)
  assert "model/decoder_1/ffn/inner/_kernel" in output
  keys = averaging.model_variables(os.path.join(model_dir, "ckpt-30"))
  assert keys["model/decoder_1/ffn/inner/_kernel"][0].startswith("optimizer/")
  for path, value in output.items():
    mean = (first[path].astype(np.float64) + last[path]) / 2
    np.testing.assert_allclose(value, mean, rtol=1e-6, atol=1e-7)
  # The last checkpoint's weights differ from the mean: the average is not just a copy.
  assert np.abs(output["model/decoder_1/ffn/inner/_kernel"] -
                last["model/decoder_1/ffn/inner/_kernel"]).max() > 1e-3
  texts, _ = translation.translate(output_dir, ["1 2 3"], beam_size=2)
  assert texts[0] and set(texts[0].split()) <= set("0123456789")


def test_averaging_refuses_different_variables(tmp_path):
  save_model_dir(tmp_path, random_model(3), steps=(1,))
  other = t2t_lite.build_model(t2t_lite.get_hparams("transformer_tiny", "d_ff=128"), 13)
  tf.train.CheckpointManager(tf.train.Checkpoint(model=other), str(tmp_path),
                             max_to_keep=10).save(checkpoint_number=2)
  with pytest.raises(averaging.CheckpointError,
                     match=r"has shape \[64, 256\] in .*ckpt-1 but \[64, 128\] in .*ckpt-2"):
    averaging.average_last(str(tmp_path), 2, str(tmp_path / "avg"))
  with pytest.raises(averaging.CheckpointError, match="has 2 checkpoints, fewer than the 3"):
    averaging.average_last(str(tmp_path), 3, str(tmp_path / "avg"))


def test_attention_pictures(model_dir, tmp_path):
  output_dir = str(tmp_path / "pictures")
  assert attention_cli.main(["--model_dir", model_dir, "--text", "3 1 4",
                             "--target", "4 1 3", "--output_dir", output_dir]) == 0
  files = sorted(os.listdir(output_dir))
  # 3 kinds x 2 layers x 4 heads of transformer_tiny.
  assert len(files) == 24
  assert "encoder_decoder_layer1_head3.png" in files
  for name in files:
    with open(os.path.join(output_dir, name), "rb") as f:
      assert f.read(8) == b"\x89PNG\r\n\x1a\n"


# ------------------------------------------------------------------ scores


def test_bracket_f1_for_parsing_problems():
  sources = ["Ms. Haag plays ."]
  gold = "(S (NP (NNP Ms.) (NNP Haag)) (VP (VBZ plays)) (. .))"
  # Missing the NP bracket: 2 of 2 predicted brackets match, 2 of 3 gold ones are found.
  predicted = "(S NNP NNP (VP VBZ )VP . )S"
  result = t2t_lite.get_problem("wsj_parsing").score(sources, [predicted], [gold])
  assert result["bracket_precision"] == pytest.approx(100.0)
  assert result["bracket_recall"] == pytest.approx(200 / 3)
  assert result["bracket_f1"] == pytest.approx(80.0)
