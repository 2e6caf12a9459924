"""Beam search over fake next-token functions whose answers are known exactly.

The fake "model" is a table of log-probabilities indexed by (sentence, position, token before
the previous one, previous token). The token before the previous one lives in the cache, so a
wrong reordering of the cache between beams changes the outputs and their scores.
"""
import itertools

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.decode.beam_search import NEG_INF, beam_search, length_penalty, log_sum_exp, top_k

PAD, EOS = 0, 1
LETTERS = "abehlmo"
VOCAB = ["<pad>", "<eos>"] + list(LETTERS)
ID = {c: i for i, c in enumerate(VOCAB)}


def log_softmax(x):
  x = np.asarray(x, np.float64)
  return x - np.log(np.exp(x - x.max()).sum()) - x.max()


class TableModel:
  """logits = table[sentence, index, prev2, prev1]; counts its calls in a tf.Variable."""

  def __init__(self, rule, batch, length, vocab):
    """rule(sentence, index, prev2, prev1) -> logits [vocab] (PAD is always forbidden)."""
    table = np.zeros([batch, length, vocab, vocab, vocab], np.float32)
    for b, i, p2, p1 in itertools.product(range(batch), range(length), range(vocab),
                                          range(vocab)):
      table[b, i, p2, p1] = rule(b, i, p2, p1)
    table[..., PAD] = -1e8  # below NEG_INF / 2: such outputs count as impossible
    self.table, self.batch, self.length, self.vocab = table, batch, length, vocab
    self.calls = tf.Variable(0)

  def cache(self):
    return {"sentence": tf.range(self.batch), "prev": tf.zeros([self.batch], tf.int32)}

  def __call__(self, ids, index, cache):
    self.calls.assign_add(1)
    rows = tf.stack([cache["sentence"], tf.fill(tf.shape(ids), index), cache["prev"], ids], 1)
    logits = tf.gather_nd(tf.constant(self.table), rows)  # [B*K, V]
    return logits, {"sentence": cache["sentence"], "prev": ids}

  def logprobs(self, b, i, p2, p1):
    return log_softmax(self.table[b, i, p2, p1])

  def score(self, b, seq, alpha):
    """Length-penalised log P of `seq` (up to and including its EOS), recomputed here."""
    total, p2, p1, n = 0.0, 0, 0, 0
    for i, tok in enumerate(seq):
      if tok == PAD:
        break
      total += self.logprobs(b, i, p2, p1)[tok]
      p2, p1, n = p1, tok, n + 1
      if tok == EOS:
        break
    return total / ((5.0 + n) / 6.0) ** alpha

  def greedy(self, b, max_length):
    """Plain argmax decoding, one token at a time."""
    out, p2, p1 = [], 0, 0
    for i in range(max_length):
      tok = int(np.argmax(self.logprobs(b, i, p2, p1)))
      out.append(tok)
      if tok == EOS:
        break
      p2, p1 = p1, tok
    return out


def search(model, beam_size, alpha=0.0, max_decode_length=None, **kwargs):
  seqs, scores = beam_search(
      model, model.cache(), batch_size=model.batch, beam_size=beam_size, alpha=alpha,
      eos_id=EOS, max_decode_length=max_decode_length or model.length, **kwargs)
  return seqs.numpy(), scores.numpy()


def strip(seq):
  """Tokens up to and including the first EOS (or the first PAD)."""
  out = []
  for tok in seq:
    if tok == PAD:
      break
    out.append(int(tok))
    if tok == EOS:
      break
  return out


def spell(words):
  """A trigram model that spells words[b] for sentence b, then EOS."""
  def rule(b, i, p2, p1):
    word = [ID[c] for c in words[b]] + [EOS]
    context = [0, 0] + word
    logits = np.zeros(len(VOCAB))
    for j in range(len(word)):
      if (context[j], context[j + 1]) == (p2, p1):
        logits[word[j]] = 5.0
    return logits
  return rule


def random_rule(seed, vocab):
  rng = np.random.default_rng(seed)
  table = rng.normal(scale=2.0, size=[8, 12, vocab, vocab, vocab])
  return lambda b, i, p2, p1: table[b, i, p2, p1]


def test_spells_known_words_batched():
  words = ["hello", "beam", "a"]
  model = TableModel(spell(words), batch=3, length=8, vocab=len(VOCAB))
  seqs, scores = search(model, beam_size=3, alpha=0.6)
  assert seqs.shape == (3, 3, 8) and scores.shape == (3, 3)
  for b, word in enumerate(words):
    assert "".join(VOCAB[t] for t in strip(seqs[b, 0])) == word + "<eos>"
    assert seqs[b, 0, len(word) + 1:].tolist() == [PAD] * (8 - len(word) - 1)
    assert np.all(np.diff(scores[b]) <= 0)  # best first
    for k in range(3):
      assert scores[b, k] == pytest.approx(model.score(b, seqs[b, k], 0.6), abs=1e-4)


def test_wide_beam_is_exhaustive_search():
  # 3 letters + EOS, at most 4 tokens: 121 possible outputs, all kept by a beam of 128.
  vocab, length, alpha = 5, 4, 0.6
  model = TableModel(random_rule(0, vocab), batch=2, length=length, vocab=vocab)
  seqs, scores = search(model, beam_size=128, alpha=alpha)
  for b in range(2):
    every = [list(p) + [EOS] for n in range(length) for p in itertools.product([2, 3, 4], repeat=n)]
    every += [list(p) for p in itertools.product([2, 3, 4], repeat=length)]  # cut at the limit
    assert len(every) == 121
    expected = sorted(((model.score(b, s, alpha), s) for s in every), reverse=True)
    valid = scores[b] > NEG_INF / 2
    assert valid.sum() == 121
    np.testing.assert_allclose(scores[b][valid], [s for s, _ in expected], rtol=1e-5)
    assert strip(seqs[b, 0]) == expected[0][1]


def test_a_forced_prefix_is_scored_by_the_model_and_what_may_follow_it_is_kept_out():
  # Exhaustive search (beam 128 over 121 possible outputs) forced through [2] and [3, 4], with
  # token 3 kept out of the step right after a prefix: exactly the outputs that start with the
  # prefix and do not go on with 3, scored by the model's own log-probabilities.
  vocab, length, alpha = 5, 4, 0.6
  model = TableModel(random_rule(1, vocab), batch=2, length=length, vocab=vocab)
  prefixes = [[2], [3, 4]]
  seqs, scores = search(model, beam_size=128, alpha=alpha,
                        forced_ids=tf.constant([[2, 0], [3, 4]]),
                        not_after_forced=tf.constant([False, False, False, True, False]))
  every = [list(p) + [EOS] for n in range(length) for p in itertools.product([2, 3, 4], repeat=n)]
  every += [list(p) for p in itertools.product([2, 3, 4], repeat=length)]
  for b, prefix in enumerate(prefixes):
    allowed = [s for s in every if s[:len(prefix)] == prefix and s[len(prefix):][:1] != [3]]
    expected = sorted(((model.score(b, s, alpha), s) for s in allowed), reverse=True)
    valid = scores[b] > NEG_INF / 2
    assert valid.sum() == len(allowed) > 5
    np.testing.assert_allclose(scores[b][valid], [s for s, _ in expected], rtol=1e-5)
    assert sorted(strip(q) for q in seqs[b][valid]) == sorted(allowed)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_beam_one_is_greedy(seed):
  model = TableModel(random_rule(seed, 6), batch=4, length=10, vocab=6)
  seqs, scores = search(model, beam_size=1)
  for b in range(4):
    greedy = model.greedy(b, 10)
    assert strip(seqs[b, 0]) == greedy
    assert scores[b, 0] == pytest.approx(model.score(b, greedy, 0.0), abs=1e-4)


def test_beam_escapes_greedy_trap():
  # Greedy takes "a" (p=0.5), then the best it can do is "a <eos>" with p=0.5*0.3; beam 2 also
  # keeps "b" (p=0.45), after which "<eos>" is almost certain: p(b <eos>) = 0.45*0.99.
  a, b_ = ID["a"], ID["b"]

  def rule(b, i, p2, p1):
    probs = np.full(len(VOCAB), 1e-6)
    if i == 0:
      probs[[a, b_, ID["e"]]] = [0.5, 0.45, 0.05]
    elif p1 == a:
      probs[[EOS, a, b_, ID["e"], ID["h"]]] = [0.3, 0.2, 0.2, 0.15, 0.15]
    else:
      probs[EOS] = 0.99
      probs[ID["e"]] = 0.01
    return np.log(probs)

  model = TableModel(rule, batch=1, length=6, vocab=len(VOCAB))
  greedy_seqs, greedy_scores = search(model, beam_size=1)
  beam_seqs, beam_scores = search(model, beam_size=2)
  assert strip(greedy_seqs[0, 0]) == model.greedy(0, 6) == [a, EOS]
  assert strip(beam_seqs[0, 0]) == [b_, EOS]
  assert beam_scores[0, 0] == pytest.approx(np.log(0.45 * 0.99), abs=1e-4)
  assert greedy_scores[0, 0] == pytest.approx(np.log(0.5 * 0.3), abs=1e-4)


def test_larger_alpha_prefers_longer_outputs():
  # "a <eos>" has log P = log 0.52, "b e e <eos>" log P = log 0.48: alpha 0 picks the short one;
  # alpha 1 divides by lp(2) = 7/6 vs lp(4) = 9/6 and picks the long one.
  a, b_, e = ID["a"], ID["b"], ID["e"]

  def rule(b, i, p2, p1):
    probs = np.full(len(VOCAB), 1e-7)
    if i == 0:
      probs[[a, b_]] = [0.52, 0.48]
    elif p1 == a or i == 3:
      probs[EOS] = 1.0
    else:
      probs[e] = 1.0
    return np.log(probs)

  model = TableModel(rule, batch=1, length=8, vocab=len(VOCAB))
  short, _ = search(model, beam_size=2, alpha=0.0)
  long, scores = search(model, beam_size=2, alpha=1.0)
  assert strip(short[0, 0]) == [a, EOS]
  assert strip(long[0, 0]) == [b_, e, e, EOS]
  assert scores[0, 0] == pytest.approx(np.log(0.48) / 1.5, abs=1e-4)


def test_stops_early_per_batch():
  # Beam 1: "ab" ends at step 2 and "hello" at step 5, so 6 calls of the 30 allowed.
  model = TableModel(spell(["ab", "hello"]), batch=2, length=30, vocab=len(VOCAB))
  seqs, _ = search(model, beam_size=1)
  assert int(model.calls.numpy()) == 6
  assert [strip(s) for s in seqs[:, 0]] == [[ID[c] for c in w] + [EOS] for w in ["ab", "hello"]]
  # Beam 2: at step 0 "<eos>" ties with the other deviations from "h" and has the lowest id, so
  # it is the second finished hypothesis (log P = -5.05); once "hello<eos>" is finished, the
  # best live one, "hello" + another token, is below it (alpha 0: log-probs only fall).
  model.calls.assign(0)
  seqs, scores = search(model, beam_size=2)
  assert int(model.calls.numpy()) == 6
  assert strip(seqs[1, 0]) == [ID[c] for c in "hello"] + [EOS]
  assert strip(seqs[1, 1]) == [EOS]
  assert scores[1, 1] == pytest.approx(-np.log(np.exp(5.0) + 7), abs=1e-4)


def eos_forbidden_before(position):
  """A logits mask (beam_search's logits_mask_fn) that forbids EOS before `position`."""
  def mask(ids, index, state, logits):
    eos = tf.one_hot(EOS, tf.shape(logits)[-1], on_value=NEG_INF)
    return tf.where(index < position, logits + eos, logits), state
  return mask


def test_per_sentence_max_length_and_eos_forbidden_by_a_mask():
  # A model that wants to stop immediately; EOS forbidden by the mask everywhere.
  def rule(b, i, p2, p1):
    logits = np.zeros(len(VOCAB))
    logits[EOS] = 5.0
    logits[ID["m"]] = 1.0
    return logits

  model = TableModel(rule, batch=3, length=7, vocab=len(VOCAB))
  seqs, scores = search(model, beam_size=2, max_lengths=tf.constant([3, 5, 9]),
                        logits_mask_fn=eos_forbidden_before(7))
  assert int(model.calls.numpy()) == 7  # the longest allowed, clipped to max_decode_length
  for b, limit in enumerate([3, 5, 7]):
    assert np.all(seqs[b, :, :limit] > EOS)  # no EOS, no PAD before the limit
    assert np.all(seqs[b, :, limit:] == PAD)
    assert strip(seqs[b, 0]) == [ID["m"]] * limit
  # EOS forbidden before position 2: it comes at position 2, right after the forced tokens.
  seqs, _ = search(model, beam_size=2, logits_mask_fn=eos_forbidden_before(2))
  assert [strip(s) for s in seqs[:, 0]] == [[ID["m"], ID["m"], EOS]] * 3


def test_xla_matches_eager():
  model = TableModel(random_rule(7, 6), batch=3, length=9, vocab=6)
  eager_seqs, eager_scores = search(model, beam_size=3, alpha=0.6,
                                    max_lengths=tf.constant([4, 9, 6]))

  @tf.function(jit_compile=True)
  def compiled(max_lengths):
    return beam_search(model, model.cache(), batch_size=3, beam_size=3, alpha=0.6, eos_id=EOS,
                       max_decode_length=9, max_lengths=max_lengths)

  xla_seqs, xla_scores = compiled(tf.constant([4, 9, 6]))
  np.testing.assert_array_equal(xla_seqs.numpy(), eager_seqs)
  np.testing.assert_allclose(xla_scores.numpy(), eager_scores, rtol=1e-5)
  for b in range(3):
    for k in range(3):
      assert eager_scores[b, k] == pytest.approx(model.score(b, eager_seqs[b, k], 0.6), abs=1e-4)


class RowsTableModel(TableModel):
  """The same table, for beam_search(reorder_cache=False): the cache is never reordered, so the
  token before the previous one is read from the row `rows` names (as the Transformer's
  keys/values are); reading one's own row instead would give other outputs."""

  def cache(self):
    return {"sentence": tf.range(self.batch), "written": tf.zeros([self.batch, self.length],
                                                                   tf.int32)}

  def __call__(self, ids, index, cache, rows):
    self.calls.assign_add(1)
    # Slot t holds the token at position t - 1; row n writes its slot `index`.
    written = tf.where(tf.range(self.length) == index, ids[:, None], cache["written"])
    previous_slot = tf.maximum(index - 1, 0)
    prev2 = tf.gather_nd(written, tf.stack([rows[:, previous_slot],
                                            tf.fill(tf.shape(ids), previous_slot)], 1))
    prev2 = tf.where(index > 0, prev2, 0)
    rows_ = tf.stack([cache["sentence"], tf.fill(tf.shape(ids), index), prev2, ids], 1)
    logits = tf.gather_nd(tf.constant(self.table), rows_)
    return logits, {"sentence": cache["sentence"], "written": written}


def test_unreordered_cache_read_through_rows_gives_the_same_search():
  rule = random_rule(11, 6)
  reordered = TableModel(rule, batch=3, length=9, vocab=6)
  through_rows = RowsTableModel(rule, batch=3, length=9, vocab=6)
  expected = search(reordered, beam_size=3, alpha=0.6, max_lengths=tf.constant([4, 9, 6]))
  seqs, scores = search(through_rows, beam_size=3, alpha=0.6, max_lengths=tf.constant([4, 9, 6]),
                        reorder_cache=False)
  np.testing.assert_array_equal(seqs, expected[0])
  np.testing.assert_allclose(scores, expected[1], rtol=1e-6)


def test_length_penalty_values():
  assert float(length_penalty(1, 0.6)) == pytest.approx(1.0)
  assert float(length_penalty(7, 1.0)) == pytest.approx(2.0)


def test_bad_arguments():
  model = TableModel(spell(["a"]), batch=1, length=3, vocab=len(VOCAB))
  with pytest.raises(ValueError, match="beam_size must be >= 1, got 0"):
    search(model, beam_size=0)
  with pytest.raises(ValueError, match="alpha must be >= 0"):
    search(model, beam_size=1, alpha=-1.0)


@pytest.mark.parametrize("n", [4 * 32000, 37003, 130])
def test_top_k_equals_tf_top_k_with_ties_and_dead_beams(n):
  """beam_search.top_k (through chunk maxima) gives tf.math.top_k's values and indices,
  ties ordered by index, for sizes not a multiple of the chunk and NEG_INF entries."""
  rng = np.random.default_rng(n)
  for scale in (2.0, 100.0):  # rounded to integers: many ties at 2
    x = np.round(rng.normal(size=(5, n)) * scale).astype(np.float32)
    x[:, rng.integers(0, n, 10)] = NEG_INF
    expected = tf.math.top_k(x, 8)
    # N known when traced, and not (a shortlist's size): padded to whole chunks at run time.
    unknown = tf.function(lambda x: top_k(x, 8), autograph=False,
                          input_signature=[tf.TensorSpec([None, None], tf.float32)])
    for values, indices in (top_k(tf.constant(x), 8), unknown(tf.constant(x))):
      np.testing.assert_array_equal(values.numpy(), expected.values.numpy())
      np.testing.assert_array_equal(indices.numpy(), expected.indices.numpy())


def test_log_sum_exp_equals_tf_reduce_logsumexp():
  """Peaked, flat, masked (NEG_INF) and fully masked rows, large and small logits."""
  rng = np.random.default_rng(0)
  x = rng.normal(size=(6, 32000)).astype(np.float32) * np.array([[1], [30], [1e-3], [1], [1],
                                                                   [1]], np.float32)
  x[1, 7] = 400.0  # one token takes all the mass
  x[3] += 1e4  # large logits
  x[4, ::3] = NEG_INF  # a constraint's mask
  x[5] = NEG_INF
  expected = tf.reduce_logsumexp(tf.constant(x, tf.float64), axis=-1).numpy()
  np.testing.assert_allclose(log_sum_exp(tf.constant(x)).numpy(), expected, rtol=1e-6, atol=1e-5)
