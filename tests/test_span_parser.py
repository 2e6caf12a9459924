"""The span-classifying parser (hparams architecture=span_parser) on the wsj_parsing_spans
problem, on the Penn Treebank sample: its records' targets against the trees they come from, the
model's target layout against the records, training's logits against decoding's scores, a
model that learns a few trees and decodes them back exactly, and one run through the tools as
a user makes it (t2t-lite-train with a dev decode, t2t-lite-decode, t2t-lite-export read by TF
Serving's loader), with what it refuses."""
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

import t2t_lite
from conftest import _prepared_once, file_hashes, tf1_serve
from t2t_lite.data.tokenizers import EOS_ID
from t2t_lite.decode import cky, search
from t2t_lite.modeling import losses, span_parser
from t2t_lite.parsing import treebank
from t2t_lite.problems import wsj_parsing_spans

BIN = os.path.dirname(sys.executable)
TINY = "num_layers=1,d_model=64,d_ff=128,num_heads=4,dropout=0.0,attention_dropout=0.0"


@pytest.fixture(scope="module")
def spans_data(ptb_dir, tmp_path_factory):
  """(problem, data_dir) of wsj_parsing_spans on the sample, prepared in this process: no test
  here checks what t2t-lite-datagen prints, so its process would only add a TensorFlow start."""
  return (t2t_lite.get_problem("wsj_parsing_spans"),
          _prepared_once(tmp_path_factory, "wsj_parsing_spans", ptb_dir))


def _gold_labels(problem, data_dir, pairs):
  """The classes and tag ids of each pair's tree, as best_trees and the tagging head give them:
  labels int32 [B, N + 1, N + 1], tags int32 [B, N], lengths int32 [B]."""
  spans = problem.span_vocabulary(data_dir)
  vocab = problem.read_vocab(data_dir)
  index = {label: c for c, label in enumerate(vocab["span_labels"], start=1)}
  tokenizer = problem.tokenizer(data_dir)
  width = max(len(source.split()) for source, _ in pairs)
  labels = np.zeros([len(pairs), width + 1, width + 1], np.int32)
  tags = np.zeros([len(pairs), width], np.int32)
  for row, (source, target) in enumerate(pairs):
    row_tags, row_spans = wsj_parsing_spans.labelled_spans(source, target)
    for (i, j), label in row_spans.items():
      labels[row, i, j] = index[label]
    tags[row, :len(row_tags)] = [tokenizer.encode(tag)[0] for tag in row_tags]
  lengths = np.array([len(source.split()) for source, _ in pairs], np.int32)
  return labels, tags, lengths, spans


def test_the_records_targets_written_back_as_trees_are_the_dev_trees(spans_data):
  """Every dev tree -> its span labels and tags -> cky.linearize: the same linearized tree."""
  problem, data_dir = spans_data
  pairs = problem.text_pairs("dev", data_dir)
  known = set(problem.read_vocab(data_dir)["span_labels"])
  # Dev trees whose every chain train has (a chain train never saw is no class of the model).
  pairs = [p for p in pairs if set(wsj_parsing_spans.labelled_spans(*p)[1].values()) <= known]
  assert len(pairs) > 390
  labels, tags, lengths, spans = _gold_labels(problem, data_dir, pairs)
  ids = cky.linearize(labels, tags, lengths, tf.constant(spans.opens), tf.constant(spans.closes))
  tokenizer = problem.tokenizer(data_dir)
  for row, (_, target) in enumerate(pairs):
    assert tokenizer.decode(ids[row].numpy().tolist()) == target


def test_the_models_target_layout_reads_the_records_as_they_were_written(spans_data):
  problem, data_dir = spans_data
  source, target = problem.text_pairs("dev", data_dir)[3]
  tags, spans = wsj_parsing_spans.labelled_spans(source, target)
  written = problem.record_target(source, target).split()
  n = len(tags)
  assert len(written) == n * (n + 3) // 2
  i, j, is_tag = (x.numpy() for x in span_parser.target_layout(n + 1, len(written) + 3))
  for p, token in enumerate(written):
    expected = tags[j[p] - 1] if is_tag[p] else (
        wsj_parsing_spans.label_token(spans[(i[p], j[p])]) if (i[p], j[p]) in spans
        else wsj_parsing_spans.NO_SPAN)
    assert token == expected, p
  assert not is_tag[len(written):].any()  # EOS and padding


def test_training_and_decoding_score_every_span_and_word_alike(spans_data):
  """The logits training reads at each target position (the model's call: span differences
  as a matmul, tags placed by position) are, for its span (i, j) or word, the scores decoding
  reads (span_scores: every span's difference at once, each word's tag)."""
  problem, data_dir = spans_data
  pairs = problem.text_pairs("dev", data_dir)[:5]
  tokenizer = problem.tokenizer(data_dir)
  spans = problem.span_vocabulary(data_dir)
  model = t2t_lite.build_model(t2t_lite.get_hparams("transformer_parsing_spans", TINY),
                               tokenizer.vocab_size, spans=spans)
  pad = lambda rows: tf.ragged.constant(rows).to_tensor()
  inputs = pad([tokenizer.encode(s, add_eos=True) for s, _ in pairs])
  targets = pad([tokenizer.encode(problem.record_target(s, t), add_eos=True) for s, t in pairs])
  logits = model({"inputs": inputs, "targets": targets}).numpy()  # [B, P, V]
  log_probs, tags = (x.numpy() for x in model.span_scores(inputs))
  i, j, is_tag = (x.numpy() for x in span_parser.target_layout(inputs.shape[1], logits.shape[1]))
  labels, tag_ids = np.array(spans.labels), np.array(spans.tags)
  for row, (source, _) in enumerate(pairs):
    n = len(source.split())
    scored = np.arange(n * (n + 3) // 2)  # this sentence's positions, before its EOS
    span, tag = scored[~is_tag[scored]], scored[is_tag[scored]]
    assert len(span) == n * (n + 1) // 2 and len(tag) == n
    np.testing.assert_allclose(tf.nn.log_softmax(logits[row, span][:, labels]),
                               log_probs[row, i[span], j[span]], atol=1e-4)
    best_tags = tag_ids[logits[row, tag][:, tag_ids].argmax(-1)]
    assert best_tags.tolist() == tags[row, j[tag] - 1].tolist()
    assert logits[row, n * (n + 3) // 2].argmax() == EOS_ID


def test_a_span_parser_learns_trees_and_decodes_them_back(spans_data):
  """Trained on 6 trees until it knows them (an XLA-compiled step), the model's decoding
  (search.beams, the path of t2t-lite-decode, the dev decode and the export; and under XLA)
  writes those trees exactly."""
  problem, data_dir = spans_data
  pairs = [p for p in problem.text_pairs("dev", data_dir) if len(p[0].split()) <= 12][:6]
  tokenizer = problem.tokenizer(data_dir)
  hparams = t2t_lite.get_hparams("transformer_parsing_spans", TINY)
  tf.keras.utils.set_random_seed(0)  # the same start on every machine
  model = t2t_lite.build_model(hparams, tokenizer.vocab_size,
                               spans=problem.span_vocabulary(data_dir))
  pad = lambda rows: tf.ragged.constant(rows).to_tensor()
  inputs = pad([tokenizer.encode(s, add_eos=True) for s, _ in pairs])
  targets = pad([tokenizer.encode(problem.record_target(s, t), add_eos=True) for s, t in pairs])
  optimizer = tf.keras.optimizers.Adam(3e-3)

  @tf.function(jit_compile=True)  # the step compiles as a TPU's (static shapes)
  def step():
    with tf.GradientTape() as tape:
      logits = model({"inputs": inputs, "targets": targets}, training=True)
      loss, count = losses.smoothed_cross_entropy(logits, targets, 0.0)
      loss /= count
    optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables),
                                  model.trainable_variables))
    return loss

  # By step 150 the loss is below 2% of its start and decoding writes all 6 trees; by 200 it
  # has levelled off near 1.2% (seeds 0-2 alike).
  history = [float(step()) for _ in range(200)]
  assert history[-1] < 0.02 * history[0]
  ids, scores = search.beams(model, inputs, beam_size=4, alpha=0.6, extra_length=50)
  assert ids.shape[1] == 1 and scores.shape == [len(pairs), 1]
  assert [tokenizer.decode(row[0].numpy().tolist()) for row in ids] == [t for _, t in pairs]
  # As a TPU or --xla decodes: static shapes, one XLA program.
  xla = tf.function(lambda x: search.beams(model, x, beam_size=1, alpha=0.0, extra_length=50,
                                           static_shapes=True), jit_compile=True)
  assert [tokenizer.decode(row[0].numpy().tolist()) for row in xla(inputs)[0]] == [
      t for _, t in pairs]
  for row in ids.numpy():  # ends in EOS, then padding
    tokens = row[0].tolist()
    assert tokens[tokens.index(EOS_ID) + 1:] == [0] * (len(tokens) - tokens.index(EOS_ID) - 1)
  # The decoding setting bracket_offset, added to every span's log-odds: a large one labels
  # every node of the binary tree CKY picks (2n - 1 of n words), a large negative one the root
  # alone (at most one label's K brackets).
  opens = lambda offset: [
      sum(token.startswith("(") for token in tokenizer.decode(row[0].numpy().tolist()).split())
      for row in search.beams(model, inputs, beam_size=1, alpha=0.0, extra_length=50,
                              bracket_offset=offset)[0]]
  words, most, fewest = [len(s.split()) for s, _ in pairs], opens(1000.0), opens(-1000.0)
  assert all(n_opens >= 2 * n - 1 for n_opens, n in zip(most, words))
  chain = len(problem.span_vocabulary(data_dir).opens[0])
  assert all(1 <= few <= chain and few < many for few, many in zip(fewest, most))


def _tool(name, *flags):
  return subprocess.run([os.path.join(BIN, name), *flags], capture_output=True, text=True)


# The steps of `trained`. What the tests check of its run holds for any weights (CKY's trees
# span every word of their sentence, and a bracket offset of 1000 outweighs every score), so a
# run of two steps shows it as well as a longer one.
TRAIN_STEPS = 2


@pytest.fixture(scope="module")
def trained(spans_data, tmp_path_factory):
  """A t2t-lite-train run of a small span parser, its dev F1 decoded at its evaluation."""
  _, data_dir = spans_data
  model_dir = str(tmp_path_factory.mktemp("spans") / "model")
  run = _tool("t2t-lite-train", "--problem=wsj_parsing_spans", f"--data_dir={data_dir}",
              f"--model_dir={model_dir}", "--hparams=transformer_parsing_spans",
              f"--hparams_overrides={TINY},batch_size=6000,max_length=2048",
              f"--train_steps={TRAIN_STEPS}", f"--eval_every={TRAIN_STEPS}", "--eval_steps=2",
              "--eval_decode_examples=40", "--noxla", "--log_every=1")
  assert run.returncode == 0, run.stderr[-3000:]
  return model_dir, run


def test_the_tools_train_decode_and_export_a_span_parser_as_trees(spans_data, trained,
                                                                   tmp_path):
  problem, data_dir = spans_data
  model_dir, run = trained
  evals = [line for line in run.stdout.splitlines()
           if line.startswith(f"eval at step {TRAIN_STEPS}:")]
  assert evals and "dev_bracket_rejected 0.0000" in evals[-1], run.stdout[-2000:]
  pairs = problem.text_pairs("test", data_dir)[:20]
  sources = tmp_path / "sources.txt"
  sources.write_text("".join(s + "\n" for s, _ in pairs))
  out = tmp_path / "trees.txt"
  # With a bracket offset that labels every node of the binary tree CKY picks (2n - 1 of n
  # words), decode and export alike.
  offset = "--bracket_offset=1000"
  decode = _tool("t2t-lite-decode", f"--model_dir={model_dir}", f"--input_file={sources}",
                 f"--output_file={out}", offset)
  assert decode.returncode == 0, decode.stderr[-3000:]
  trees = out.read_text().splitlines()
  assert len(trees) == len(pairs)
  for (source, _), tree in zip(pairs, trees):  # a tree over the sentence's own words
    n = len(source.split())
    assert treebank.parse_tree(tree).words() == source.split()
    assert tree.count("(") - n >= 2 * n - 1, tree  # labels beside the words' tags
  export_dir = tmp_path / "export"
  export = _tool("t2t-lite-export", f"--model_dir={model_dir}", f"--export_dir={export_dir}",
                 offset)
  assert export.returncode == 0, export.stderr[-3000:]
  version = max(export_dir.iterdir())
  served = tf1_serve(str(version), "serving_default", [s for s, _ in pairs])
  assert served["outputs"] == trees


def _assert_one_line(run, tool, message):
  """Exit status 2 and one line of error (TensorFlow's own start-up lines aside)."""
  assert run.returncode == 2 and "Traceback" not in run.stderr, run.stderr[-2000:]
  last = run.stderr.strip().splitlines()[-1]
  assert last.startswith(f"{tool}: error: ") and message in last, run.stderr[-2000:]


def test_what_a_span_parser_cannot_do_is_refused_in_one_line(spans_data, trained, tmp_path):
  problem, data_dir = spans_data
  model_dir, _ = trained
  sources = tmp_path / "sources.txt"
  sources.write_text("Ms. Haag plays Elianti .\n")
  before = file_hashes(model_dir)
  for flags, message in [
      (["--n_best=2", "--beam_size=2"], "n_best > 1 with a span parser"),
      ([f"--model_dir={model_dir}"], "an ensemble decodes Transformers")]:
    run = _tool("t2t-lite-decode", f"--model_dir={model_dir}", f"--input_file={sources}",
                *flags)
    _assert_one_line(run, "t2t-lite-decode", message)
  run = _tool("t2t-lite-attention", f"--model_dir={model_dir}", "--text=Ms. Haag plays Elianti .",
              f"--output_dir={tmp_path / 'pictures'}")
  _assert_one_line(run, "t2t-lite-attention", "attention pictures are of an encoder-decoder")
  assert not (tmp_path / "pictures").exists()
  # The problem's span targets with the translating Transformer (and the other way round, the
  # same check in trainer._model_tables).
  for flags, message in [
      (["--problem=wsj_parsing_spans", "--hparams=transformer_parsing_small"],
       "targets are span labels: train it with hparams architecture=span_parser")]:
    run = _tool("t2t-lite-train", *flags, f"--data_dir={data_dir}",
                f"--model_dir={tmp_path / 'refused'}", "--train_steps=1")
    _assert_one_line(run, "t2t-lite-train", message)
    assert not (tmp_path / "refused").exists()
  assert file_hashes(model_dir) == before
