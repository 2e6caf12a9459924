"""What decoding gives beside the 1-best: n-best lists, samples, scores of given outputs,
ensembles and word alignments, through the one pipeline that decode, translate() and the
export share.

The models are transformer_tiny with random weights on algorithmic_reverse's word vocabulary
(no data needed), except where a model must have learned: scores of outputs that end in EOS
alignments, target prefixes and lexical constraints, from a model trained to reverse
(conftest's reversing_model: trained once, shared by the test files and kept between runs).
"""
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

import t2t_lite
from t2t_lite.bin import decode as decode_cli
from t2t_lite.bin import score as score_cli
from t2t_lite.decode import ensemble, export, sampling, translation
from t2t_lite.decode.beam_search import NEG_INF, length_penalty
from t2t_lite.rundir.run_files import write_run_files

from conftest import tf1_serve, tf1_serve_all

LINES = ["3 9 4", "1 2 3 4 5 6", "7 7 0 8", "5", "2 2 2 2 2 2 2 2"]


def _model(seed):
  keras.utils.set_random_seed(seed)
  return t2t_lite.build_model(t2t_lite.get_hparams("transformer_tiny"), 13)


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
  """Two algorithmic_reverse run directories of random weights (seeds 1 and 2)."""
  dirs = []
  for seed in (1, 2):
    model_dir = str(tmp_path_factory.mktemp(f"seed{seed}"))
    write_run_files(model_dir, t2t_lite.get_hparams("transformer_tiny"),
                    {"problem": "algorithmic_reverse"})
    tf.train.Checkpoint(model=_model(seed)).save(f"{model_dir}/ckpt")
    dirs.append(model_dir)
  return dirs


_TRANSLATORS = {}  # repr((model_dir, settings)) -> Translator


def _translator(model_dir, fresh=False, **settings):
  """The Translator of model_dir with `settings`: one for each in this module, so that the
  searches it traced for one test serve the next test that decodes alike (fresh: a new one)."""
  # float32: the outputs are checked against float32 arithmetic done by hand.
  settings = dict(dict(beam_size=4, alpha=0.6, extra_length=6, precision="none"), **settings)
  key = repr((model_dir, sorted(settings.items())))
  if fresh or key not in _TRANSLATORS:
    _TRANSLATORS[key] = translation.Translator.from_model_dir(model_dir, **settings)
  return _TRANSLATORS[key]


# ------------------------------------------------------------------------------ n-best
def test_n_best_lists_start_with_the_best_and_never_score_higher_down(model_dirs):
  best, best_scores = _translator(model_dirs[0]).translate(LINES)
  lists, scores = _translator(model_dirs[0], n_best=4).translate(LINES)
  for line, outputs, line_scores, one, one_score in zip(LINES, lists, scores, best,
                                                          best_scores):
    kept = [(o, s) for o, s in zip(outputs, line_scores) if s > NEG_INF / 2]
    assert kept[0] == (one, pytest.approx(one_score, abs=1e-5)), line
    assert all(a >= b for (_, a), (_, b) in zip(kept, kept[1:])), line
    assert len({o for o, _ in kept}) == len(kept) == 4, line


def test_n_best_larger_than_the_beam_is_refused(model_dirs, tmp_path, capsys):
  (tmp_path / "in.txt").write_text("3 9 4\n")
  code = decode_cli.main(["--model_dir", model_dirs[0], "--beam_size=2", "--n_best=3",
                          "--input_file", str(tmp_path / "in.txt"), "--no_progress"])
  assert code == 2
  assert capsys.readouterr().err == (
      "t2t-lite-decode: error: n_best=3 is more than beam_size=2: a beam search keeps "
      "beam_size outputs; raise --beam_size\n")


def test_a_bracket_offset_for_a_transformer_is_refused(model_dirs, tmp_path, capsys):
  """bracket_offset is a span parser's setting: a Transformer's decode refuses it, writing
  nothing."""
  (tmp_path / "in.txt").write_text("3 9 4\n")
  code = decode_cli.main(["--model_dir", model_dirs[0], "--bracket_offset=1",
                          "--input_file", str(tmp_path / "in.txt"), "--output_file",
                          str(tmp_path / "out.txt"), "--no_progress"])
  assert code == 2
  assert capsys.readouterr().err == (
      "t2t-lite-decode: error: bracket_offset=1.0 with an encoder-decoder model: it is a span "
      "parser's (architecture=span_parser) setting\n")
  assert not (tmp_path / "out.txt").exists()


def test_decode_writes_moses_n_best_lines_and_the_export_answers_them(model_dirs, tmp_path,
                                                                      capsys):
  (tmp_path / "in.txt").write_text("".join(line + "\n" for line in LINES))
  code = decode_cli.main(["--model_dir", model_dirs[0], "--beam_size=4", "--n_best=3",
                          "--extra_length=6", "--input_file", str(tmp_path / "in.txt"),
                          "--output_file", str(tmp_path / "out.txt"), "--no_progress"])
  assert code == 0, capsys.readouterr().err
  rows = [line.split(" ||| ") for line in (tmp_path / "out.txt").read_text().splitlines()]
  assert [int(i) for i, _, _ in rows] == [i for i in range(len(LINES)) for _ in range(3)]
  path = export.export_model_dir(model_dirs[0], str(tmp_path / "export"), beam_size=4,
                                 n_best=3, extra_length=6)
  served = tf1_serve(path, "translate_n_best", LINES)  # TF Serving's loader
  for i, (_, output, score) in enumerate(rows):
    line, rank = divmod(i, 3)
    assert served["outputs"][line][rank] == output
    assert served["scores"][line][rank] == pytest.approx(float(score), abs=1e-5)


# ------------------------------------------------------------------------------ sampling
def _greedy(translator, line, max_length):
  """Greedy decoding by hand: the full model run on the prefix, its argmax appended (PAD is
  never an output), until EOS."""
  tok, model = translator.tokenizer, translator.model
  source, output = tf.constant([tok.encode(line, add_eos=True)]), []
  while len(output) < max_length and (not output or output[-1] != 1):
    logits = model({"inputs": source, "targets": tf.constant([output + [0]])})[0, -1].numpy()
    logits[0] = NEG_INF
    output.append(int(np.argmax(logits)))
  return tok.decode([t for t in output if t != 1])


def test_sampling_at_a_low_temperature_is_greedy(model_dirs):
  translator = _translator(model_dirs[0], sample=True, temperature=1e-6, seed=3)
  sampled, _ = translator.translate(LINES)
  assert sampled == [_greedy(translator, line, len(line.split()) + 1 + 6) for line in LINES]


def test_the_same_seed_gives_the_same_samples_and_another_seed_others(model_dirs):
  runs = [_translator(model_dirs[0], fresh=True, sample=True, n_best=4, seed=seed)
          .translate(LINES)[0] for seed in (5, 5, 6)]
  assert runs[0] == runs[1] and runs[0] != runs[2]


class _OneStep:
  """A stand-in for a Transformer with one decoding step of fixed logits (then EOS)."""

  def __init__(self, logits):
    self.logits = tf.constant(logits, tf.float32)
    self.hparams = t2t_lite.get_hparams("transformer_tiny")
    self.vocab_size = len(logits)

  def encode(self, inputs, training=False):
    return tf.zeros([tf.shape(inputs)[0], 1]), tf.ones([tf.shape(inputs)[0], 1], tf.bool)

  def init_cache(self, encoder_output, mask):
    return {"rows": tf.zeros([tf.shape(encoder_output)[0]])}

  def decode_step(self, ids, index, cache):
    return tf.tile(self.logits[None], [tf.shape(ids)[0], 1]), cache


def test_sampled_frequencies_match_the_softmax_and_top_k_keeps_to_the_k_likeliest():
  logits = np.array([-9.0, -9.0, 1.0, 0.5, 0.0, -0.5, -1.0, 2.0], np.float32)
  model, inputs = _OneStep(logits), tf.ones([1, 1], tf.int32)
  draw = lambda **kw: sampling.sample(model, inputs, num_samples=10000, temperature=1.0,
                                      seed=11, extra_length=1, max_lengths=[1], **kw)[0][0, :, 0]
  tokens = draw(top_k=0, top_p=1.0).numpy()
  probs = tf.nn.softmax(np.where(np.arange(8) == 0, NEG_INF, logits)).numpy()  # no PAD
  counts = np.bincount(tokens, minlength=8)
  expected = probs * 10000
  kept = expected > 5  # the cells a chi-square test can take
  assert counts[~kept].sum() <= 5
  expected = expected[kept] * counts[kept].sum() / expected[kept].sum()
  chi2 = float(((counts[kept] - expected) ** 2 / expected).sum())
  p_value = float(tf.math.igammac((kept.sum() - 1) / 2, chi2 / 2))  # chi-square's survival
  assert p_value > 0.001, (counts, expected)
  top3 = draw(top_k=3, top_p=1.0).numpy()
  assert set(np.unique(top3)) == {7, 2, 3}  # the three likeliest
  nucleus = draw(top_k=0, top_p=0.7).numpy()  # token 7 holds 0.54, with token 2 0.74
  assert set(np.unique(nucleus)) == {7, 2}


# ------------------------------------------------------------------------------ scoring
def test_a_score_is_the_sum_of_log_softmax_and_the_beam_score_of_beam_outputs(reversing_model):
  # A trained model: its outputs end in EOS (a random model's run to the length limit, where
  # the beam scores them without the EOS that scoring a text adds).
  translator = _translator(reversing_model, beam_size=4, alpha=0.6)
  outputs, beam_scores = translator.translate(LINES)
  scored = translator.score(LINES, outputs)
  model, tok = translator.model, translator.tokenizer
  for line, output, logprob in zip(LINES, outputs, scored["logprob"]):
    source = tf.constant([tok.encode(line, add_eos=True)])
    target = tok.encode(output, add_eos=True)
    logits = model({"inputs": source, "targets": tf.constant([target])})[0].numpy()
    logits[:, 0] = NEG_INF  # PAD is never an output
    by_hand = sum(tf.nn.log_softmax(logits[t])[token] for t, token in enumerate(target))
    assert logprob == pytest.approx(float(by_hand), abs=1e-4), line
  assert scored["tokens"] == [len(tok.encode(o, add_eos=True)) for o in outputs]
  assert scored["score"] == pytest.approx(beam_scores, abs=1e-4)
  assert scored["score"] == pytest.approx(
      [l / float(length_penalty(t, 0.6)) for l, t in zip(scored["logprob"], scored["tokens"])])


# ------------------------------------------------------------------------------ target prefixes
REVERSIBLE = ["3 9 4 7", "1 2 3 4 5 6", "7 7 0 8", "5 6 1", "2 0 2 0 8 1 6"]


def test_a_target_prefix_starts_every_output_and_is_scored_as_part_of_it(reversing_model):
  translator = _translator(reversing_model, beam_size=4, alpha=0.6, n_best=4)
  best = [outputs[0] for outputs in translator.translate(REVERSIBLE)[0]]
  # The 1-best's own first k words as the prefix: the 1-best again.
  for k in (1, 2):
    prefixes = [" ".join(output.split()[:k]) for output in best]
    lists, _ = translator.translate(REVERSIBLE, prefixes=prefixes)
    assert [outputs[0] for outputs in lists] == best, k
  # A prefix the model would not choose: every output starts with it, and each score is the
  # forced-decoding score of the whole output, prefix included.
  prefixes = ["9 9", "0", "", "4 4 4", "8"]
  lists, scores = translator.translate(REVERSIBLE, prefixes=prefixes)
  for prefix, outputs, line_scores in zip(prefixes, lists, scores):
    assert all(o.split()[:len(prefix.split())] == prefix.split() for o in outputs), prefix
    assert len(set(outputs)) == 4 and line_scores == sorted(line_scores, reverse=True)
  firsts = [outputs[0] for outputs in lists]
  assert firsts[2] == best[2]  # no prefix
  assert translator.score(REVERSIBLE, firsts)["score"] == pytest.approx(
      [line_scores[0] for line_scores in scores], abs=1e-4)


def test_target_prefixes_with_sampling_are_refused_before_anything_is_written(
    model_dirs, tmp_path, capsys):
  (tmp_path / "in.txt").write_text("3 9 4\t4\n")
  out = tmp_path / "out.txt"
  code = decode_cli.main(["--model_dir", model_dirs[0], "--sample", "--target_prefix",
                          "--input_file", str(tmp_path / "in.txt"), "--output_file", str(out)])
  assert code == 2 and not out.exists()
  assert capsys.readouterr().err.splitlines()[-1] == (
      "t2t-lite-decode: error: target prefixes with sampling: target prefixes are forced in the "
      "beam search over the whole vocabulary")


# -------------------------------------------------------------------------- lexical constraints
def _has_words(output, phrase):
  return f" {phrase} " in f" {output} "


def test_constrained_outputs_contain_their_phrases_and_are_scored_by_the_model(reversing_model):
  translator = _translator(reversing_model, beam_size=4, alpha=0.6, n_best=4)
  plain, plain_scores = translator.translate(REVERSIBLE)
  assert translator.translate(REVERSIBLE, constraints=[[]] * 5) == (plain, plain_scores)
  phrases = [["9 9"], ["0", "4 4"], [], ["8"], ["3 3", "5"]]
  lists, scores = translator.translate(REVERSIBLE, constraints=phrases)
  for row, outputs, best in zip(phrases, lists, plain):
    assert all(_has_words(outputs[0], p) for p in row), (row, outputs)
    assert all(not _has_words(best[0], p) for p in row)  # each phrase changed the output
  firsts = [outputs[0] for outputs in lists]
  assert firsts[2] == plain[2][0]  # no phrases
  assert translator.score(REVERSIBLE, firsts)["score"] == pytest.approx(
      [line_scores[0] for line_scores in scores], abs=1e-4)


def _decode_process(model_dir, tmp_path, lines, *flags):
  """What t2t-lite-decode, run as a process with `flags`, prints for `lines`."""
  import subprocess
  import sys
  (tmp_path / "in.txt").write_text("".join(line + "\n" for line in lines))
  settings = ["--beam_size=4", "--alpha=0.6", "--extra_length=6", "--precision=none"]
  run = subprocess.run([sys.executable, "-m", "t2t_lite.bin.decode", "--model_dir", model_dir,
                        *settings, *flags, "--input_file", str(tmp_path / "in.txt"),
                        "--no_progress"], capture_output=True, text=True, timeout=300)
  assert run.returncode == 0, run.stderr
  return run.stdout.splitlines()


def test_decode_and_the_export_answer_prefixes_and_constraints_alike(reversing_model, tmp_path):
  sources = REVERSIBLE[:4] + [""]
  prefixes = ["9 9", "7", "", "6", ""]
  phrases = [["9 9"], ["0", "4"], [], ["6"], []]
  translator = _translator(reversing_model)
  by_prefix = _decode_process(reversing_model, tmp_path, [
      f"{source}\t{prefix}" if prefix else source for source, prefix in zip(sources, prefixes)],
      "--target_prefix")
  assert by_prefix == translator.translate(sources, prefixes=prefixes)[0]
  assert [p.split()[:len(x.split())] for p, x in zip(by_prefix, prefixes)] == [
      x.split() for x in prefixes] and by_prefix[4] == ""
  by_phrases = _decode_process(reversing_model, tmp_path, [
      "\t".join([source] + row) for source, row in zip(sources, phrases)], "--constraints")
  assert by_phrases == translator.translate(sources, constraints=phrases)[0]
  assert all(_has_words(o, p) for o, row in zip(by_phrases, phrases) for p in row)
  assert by_phrases[4] == "" and by_phrases != by_prefix
  # Both: 'source<TAB>prefix<TAB>phrase...' (composition.py: the processors compose).
  both_prefixes = ["9", "", "8", "6", ""]
  by_both = _decode_process(reversing_model, tmp_path, [
      "\t".join([source, prefix] + row) for source, prefix, row in
      zip(sources, both_prefixes, phrases)], "--target_prefix", "--constraints")
  assert by_both == translator.translate(sources, prefixes=both_prefixes, constraints=phrases)[0]
  assert all(o.split()[:len(x.split())] == x.split() and all(_has_words(o, p) for p in row)
             for o, x, row in zip(by_both, both_prefixes, phrases))
  assert by_both[4] == "" and by_both not in (by_prefix, by_phrases)
  path = export.export_model_dir(reversing_model, str(tmp_path / "export"), beam_size=4,
                                 alpha=0.6, extra_length=6, precision="none", with_prefix=True,
                                 with_constraints=True)
  padded = [row + [""] * (2 - len(row)) for row in phrases]
  # TF Serving's loader, one process for the four requests: the last one is refused.
  prefixed, constrained, both, refused = tf1_serve_all(path, [
      ("translate_with_prefix", dict(inputs=sources, prefixes=prefixes)),
      ("translate_with_constraints", dict(inputs=sources, constraints=padded)),
      ("translate_with_prefix_and_constraints", dict(inputs=sources, prefixes=both_prefixes,
                                                     constraints=padded)),
      ("translate_with_constraints", dict(inputs=["3 9 4"], constraints=[["4 x"]]))])
  assert prefixed["outputs"] == by_prefix and constrained["outputs"] == by_phrases
  assert both["outputs"] == by_both
  assert refused["error"][0] == "InvalidArgumentError", refused
  assert "a constraint has a word that is not in the vocabulary" in refused["error"][1], refused


@pytest.mark.parametrize("flags, line, message", [
    ([], "3 9 4\t4 x", "line 2: a constraint (4 x) has a word that is not in the model's "
     "vocabulary"),
    (["--extra_length=2"], "3\t1 2\t3 4", "line 2: its constraints are 4 tokens, more than its "
     "output may have (3: its source's tokens + extra_length 2, and EOS)"),
    (["--sample"], "3\t1", "lexical constraints with sampling: lexical constraints are forced "
     "in the beam search over the whole vocabulary"),
    # With --target_prefix the field after the source is the prefix: x is a prefix's word.
    (["--target_prefix"], "3\tx\t1", "line 2: a target prefix (x) has a word that is not in "
     "the model's vocabulary")])
def test_constraints_that_cannot_be_met_are_refused_before_anything_is_written(
    model_dirs, tmp_path, capsys, flags, line, message):
  (tmp_path / "in.txt").write_text(f"5 6\t5\n{line}\n")
  out = tmp_path / "out.txt"
  code = decode_cli.main(["--model_dir", model_dirs[0], "--constraints", *flags,
                          "--input_file", str(tmp_path / "in.txt"), "--output_file", str(out)])
  assert code == 2 and not out.exists()
  assert capsys.readouterr().err.splitlines()[-1] == f"t2t-lite-decode: error: {message}"


def test_score_tool_writes_a_line_a_pair_and_the_perplexity(model_dirs, tmp_path, capsys):
  (tmp_path / "src").write_text("3 9 4\n1 2\n")
  (tmp_path / "tgt").write_text("4 9 3\n2 1\n")
  code = score_cli.main(["--model_dir", model_dirs[0], "--source_file", str(tmp_path / "src"),
                         "--target_file", str(tmp_path / "tgt"), "--output_file",
                         str(tmp_path / "out")])
  err = capsys.readouterr().err
  assert code == 0, err
  rows = [line.split("\t") for line in (tmp_path / "out").read_text().splitlines()]
  assert [int(tokens) for _, tokens, _ in rows] == [4, 3]
  summary = json.loads(err.splitlines()[-1])
  assert summary["tokens"] == 7 and summary["perplexity"] == pytest.approx(
      np.exp(-sum(float(l) for l, _, _ in rows) / 7), rel=1e-5)


def test_score_tool_reranks_decode_n_best_lines_with_their_beam_scores(reversing_model,
                                                                       tmp_path, capsys):
  """Scoring decode's own n-best list with the same model and alpha gives back each
  hypothesis' beam score as a fourth field; a line that is not an n-best line is refused. In
  float32: in bfloat16 the search's steps and the scoring's one pass round otherwise."""
  (tmp_path / "in.txt").write_text("".join(line + "\n" for line in LINES))
  settings = ["--model_dir", reversing_model, "--beam_size=4", "--alpha=0.6", "--precision=none"]
  assert decode_cli.main([*settings, "--n_best=2", "--input_file", str(tmp_path / "in.txt"),
                          "--output_file", str(tmp_path / "nbest"), "--no_progress"]) == 0
  assert score_cli.main(["--model_dir", reversing_model, "--alpha=0.6", "--precision=none",
                         "--source_file", str(tmp_path / "in.txt"), "--nbest_file",
                         str(tmp_path / "nbest"), "--output_file", str(tmp_path / "scored")]) == 0
  rows = [line.split(" ||| ") for line in (tmp_path / "scored").read_text().splitlines()]
  assert len(rows) == 2 * len(LINES)
  for i, output, beam_score, score in rows:
    assert float(score) == pytest.approx(float(beam_score), abs=1e-4), (i, output)
  (tmp_path / "bad").write_text("0 ||| 4 9 3 ||| -1.0\n7 ||| 1 ||| -1.0\n")
  capsys.readouterr()
  code = score_cli.main(["--model_dir", reversing_model, "--source_file",
                         str(tmp_path / "in.txt"), "--nbest_file", str(tmp_path / "bad")])
  assert code == 2 and capsys.readouterr().err == (
      f"t2t-lite-score: error: {tmp_path / 'bad'}:2: not an n-best line 'i ||| output ||| ...' "
      f"with i < 5, the lines of {tmp_path / 'in.txt'}\n")


# ------------------------------------------------------------------------------ ensembles
def test_a_model_ensembled_with_itself_decodes_as_alone(model_dirs):
  alone = _translator(model_dirs[0], n_best=2).translate(LINES)
  twice = _translator([model_dirs[0], model_dirs[0]], n_best=2).translate(LINES)
  assert twice[0] == alone[0]
  np.testing.assert_allclose(twice[1], alone[1], atol=1e-4)
  pair = _translator(model_dirs, n_best=2).translate(LINES)  # two models: another answer
  assert pair[0] != alone[0]


def test_an_ensemble_of_two_problems_or_vocabularies_is_refused_in_one_line(
    model_dirs, make_random_model_dir, tmp_path, capsys):
  (tmp_path / "in.txt").write_text("3 9 4\n")
  other = str(tmp_path / "copy")
  write_run_files(other, t2t_lite.get_hparams("transformer_tiny"),
                  {"problem": "algorithmic_copy"})
  tf.train.Checkpoint(model=_model(3)).save(f"{other}/ckpt")
  english = make_random_model_dir("english", "a man rides horse the dog runs".split())
  german = make_random_model_dir("german", "ein mann reitet pferd der hund".split())
  for first, second, message in [
      (model_dirs[0], other, f"{other} is a algorithmic_copy model, {model_dirs[0]} a "
                             "algorithmic_reverse one: an ensemble needs one problem"),
      (english, german, f"the vocabulary of {german} differs from {english}'s (sha256 ")]:
    code = decode_cli.main(["--model_dir", first, "--model_dir", second, "--input_file",
                            str(tmp_path / "in.txt"), "--no_progress"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"t2t-lite-decode: error: {message}"), err
    assert err.count("\n") == 1


def test_ensemble_log_probabilities_are_the_mean_of_the_members_probabilities():
  members = [_model(1), _model(2)]
  both = ensemble.Ensemble(members)
  features = {"inputs": tf.constant([[3, 4, 1]]), "targets": tf.constant([[4, 3, 1]])}
  mean = sum(tf.nn.softmax(m(features)) for m in members) / 2
  np.testing.assert_allclose(tf.exp(both(features)).numpy(), mean.numpy(), rtol=1e-5)


# ------------------------------------------------------------------------------ alignments
def test_alignments_of_a_reversing_model_link_word_i_to_word_n_minus_1_minus_i(reversing_model):
  rng = np.random.default_rng(0)
  lines = [" ".join(map(str, rng.integers(0, 10, rng.integers(3, 10)))) for _ in range(100)]
  translator = _translator(reversing_model, beam_size=1, with_alignments=True)
  results = translator.decode_lines(lines)
  links = reversed_links = 0
  for line, pairs in zip(lines, results["alignments"][:, 0]):
    n = len(line.split())
    for pair in pairs.split():
      s, t = map(int, pair.split("-"))
      links += 1
      reversed_links += s == n - 1 - t
  assert links >= 300 and reversed_links >= 0.9 * links


def test_decode_writes_alignments_after_the_output(model_dirs, tmp_path, capsys):
  (tmp_path / "in.txt").write_text("3 9 4\n\n")
  code = decode_cli.main(["--model_dir", model_dirs[0], "--with_alignments", "--input_file",
                          str(tmp_path / "in.txt"), "--no_progress"])
  out = capsys.readouterr().out.splitlines()
  assert code == 0 and len(out) == 2 and out[1] == " ||| "
  output, pairs = out[0].split(" ||| ")
  assert all(0 <= int(p.split("-")[0]) < 3 and 0 <= int(p.split("-")[1]) < len(output.split())
             for p in pairs.split())
