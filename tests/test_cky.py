"""The span parser's CKY (t2t_lite/decode/cky.py) against an exhaustive search over every binary
tree of short sentences, row by row in padded batches, and compiled by XLA."""
import numpy as np
import tensorflow as tf

from t2t_lite.decode import cky


def _binary_trees(i, j):
  """Every full binary bracketing of fenceposts i..j, as lists of its spans."""
  if j - i == 1:
    yield [(i, j)]
    return
  for k in range(i + 1, j):
    for left in _binary_trees(i, k):
      for right in _binary_trees(k, j):
        yield [(i, j)] + left + right


def _exhaustive(log_probs, n):
  """-> (the best objective, {span: label} of the best tree's labelled nodes), by trying all."""
  score = log_probs[..., 1:].max(-1) - log_probs[..., 0]
  value, tree = max((sum(score[s] if s == (0, n) else max(score[s], 0.0) for s in t), t)
                    for t in _binary_trees(0, n))
  return value, {s: int(log_probs[s][1:].argmax()) + 1 for s in tree
                 if s == (0, n) or score[s] > 0}


def _random_log_probs(rng, n, classes=4):
  x = rng.normal(size=(n + 1, n + 1, classes)) * 2.0
  x[..., 0] += 1.0  # some spans above "no constituent", some below
  return (x - np.log(np.exp(x).sum(-1, keepdims=True))).astype(np.float32)


def _labelled(labels, n):
  return {(i, j): int(labels[i, j]) for i in range(n + 1) for j in range(n + 1) if labels[i, j]}


def test_cky_finds_the_best_tree_of_an_exhaustive_search():
  rng = np.random.default_rng(0)
  for n in range(1, 8):
    for _ in range(4):
      log_probs = _random_log_probs(rng, n)
      value, labelled = _exhaustive(log_probs, n)
      labels, scores = cky.best_trees(log_probs[None], [n])
      assert abs(float(scores[0]) - value) < 1e-4, n
      assert _labelled(labels[0].numpy(), n) == labelled, n


def test_a_padded_batch_parses_each_row_as_alone_also_under_xla():
  rng = np.random.default_rng(1)
  lengths = [3, 0, 7, 1, 5]  # 0: a padding row
  width = max(lengths) + 1
  batch = np.zeros([len(lengths), width, width, 4], np.float32)
  alone = []
  for row, n in enumerate(lengths):
    log_probs = _random_log_probs(rng, n)
    batch[row, :n + 1, :n + 1] = log_probs
    alone.append(cky.best_trees(log_probs[None], [n]))
  labels, scores = cky.best_trees(batch, lengths)
  for row, n in enumerate(lengths):
    if n == 0:
      assert not labels[row].numpy().any() and float(scores[row]) == 0.0
      continue
    assert np.array_equal(labels[row, :n + 1, :n + 1], alone[row][0][0])
    assert abs(float(scores[row]) - float(alone[row][1][0])) < 1e-5
  opens = tf.constant([[0, 0], [10, 0], [11, 12], [13, 0]])
  closes = tf.constant([[0, 0], [20, 0], [22, 21], [23, 0]])
  tags = np.tile(np.arange(30, 30 + width - 1, dtype=np.int32), (len(lengths), 1))
  lengths = tf.constant(lengths)
  ids = cky.linearize(labels, tags, lengths, opens, closes)
  compiled = tf.function(lambda b, n: cky.linearize(cky.best_trees(b, n)[0], tags, n, opens,
                                                    closes, max_length=80), jit_compile=True)
  ids_xla = compiled(batch, lengths).numpy()
  assert np.array_equal(ids_xla[:, :ids.shape[1]], ids.numpy())
  assert not ids_xla[:, ids.shape[1]:].any()


def test_linearize_writes_brackets_chains_and_tags_in_tree_order():
  """"(S (NP NNP NNP )NP (VP VBZ (NP NNP )NP )VP . )S" and an "S+VP" chain, token by token."""
  vocab = ["<pad>", "<eos>", "(S", "(NP", "(VP", ")S", ")NP", ")VP", "NNP", "VBZ", "."]
  ids = {token: k for k, token in enumerate(vocab)}
  # Classes: 1 NP, 2 VP, 3 S, 4 S+VP.
  opens = tf.constant([[0, 0], [ids["(NP"], 0], [ids["(VP"], 0], [ids["(S"], 0],
                       [ids["(S"], ids["(VP"]]])
  closes = tf.constant([[0, 0], [ids[")NP"], 0], [ids[")VP"], 0], [ids[")S"], 0],
                        [ids[")VP"], ids[")S"]]])
  labels = np.zeros([2, 6, 6], np.int32)
  labels[0, 0, 5], labels[0, 0, 2], labels[0, 2, 4], labels[0, 3, 4] = 3, 1, 2, 1
  labels[1, 0, 2], labels[1, 0, 1] = 4, 1  # "(S (VP (NP NNP )NP VBZ )VP )S"
  tags = np.array([[ids[t] for t in ("NNP", "NNP", "VBZ", "NNP", ".")],
                   [ids["NNP"], ids["VBZ"], 0, 0, 0]], np.int32)
  out = cky.linearize(labels, tags, [5, 2], opens, closes).numpy()
  text = [" ".join(vocab[k] for k in row[:list(row).index(1)]) for row in out]
  assert text == ["(S (NP NNP NNP )NP (VP VBZ (NP NNP )NP )VP . )S",
                  "(S (VP (NP NNP )NP VBZ )VP )S"]
  assert list(out[1][8:]) == [1] + [0] * (out.shape[1] - 9)  # EOS, then padding
  cut = cky.linearize(labels, tags, [5, 2], opens, closes, max_length=6).numpy()
  assert cut.shape == (2, 6) and list(cut[0]) == list(out[0][:5]) + [1]  # cut, then EOS


def test_a_larger_offset_never_labels_fewer_spans():
  rng = np.random.default_rng(2)
  log_probs = _random_log_probs(rng, 12)
  counts = [int(tf.math.count_nonzero(cky.best_trees(log_probs[None], [12], offset)[0]))
            for offset in (0.0, 0.5, 1.0, 2.0, 100.0)]
  assert counts == sorted(counts) and counts[-1] == 2 * 12 - 1  # every node of a binary tree
