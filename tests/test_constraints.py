"""Lexical constraints in the beam search (dynamic beam allocation), over test_beam_search's
fake next-token tables, whose every output and score is known. The Translator, the CLI and the
export are tested with a trained model in test_outputs.py."""
import itertools

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.decode import lexical
from t2t_lite.decode.beam_search import NEG_INF, beam_search

from test_beam_search import EOS, TableModel, random_rule, search, strip


def phrases(rows):
  """[[phrase ids, ...] a sentence] -> lexical.Constraints."""
  return lexical.from_phrases(tf.ragged.constant(rows, dtype=tf.int32, ragged_rank=2))


def contains(seq, phrase):
  return any(seq[i:i + len(phrase)] == phrase for i in range(len(seq)))


def test_phrases_become_tokens_with_their_phrase_numbers():
  c = phrases([[[2], [3, 4]], [], [[5, 5, 5]]])
  assert c.ids.numpy().tolist() == [[2, 3, 4, 0], [0, 0, 0, 0], [5, 5, 5, 0]]
  assert c.phrase.numpy().tolist() == [[0, 1, 1, -1], [-1, -1, -1, -1], [0, 0, 0, -1]]


def test_a_phrase_is_met_in_order_and_left_half_way_is_unmet_again():
  c = phrases([[[3, 4], [2]]])
  state = lexical.initial_state(c, 1)
  met = []
  for token in [3, 3, 2, 3, 4]:  # 3 starts [3 4]; 3 breaks it and starts it again; 2 breaks
    state = lexical.advance(c, state, tf.constant([token]))  # it and meets [2]; 3 4.
    met.append(state.met.numpy()[0, :3].tolist())
  assert met == [[True, False, False], [True, False, False], [False, False, True],
                 [True, False, True], [True, True, True]]


def test_a_wide_beam_finds_exactly_the_outputs_that_contain_the_phrases():
  # Exhaustive search (beam 128 over every output of 3 letters and EOS, at most 4 tokens):
  # the outputs that end in EOS are exactly those containing every phrase, and those cut at
  # the maximum length are all there, those without every phrase ranked last; each scored by
  # the model's own log-probabilities.
  vocab, length, alpha = 5, 4, 0.6
  model = TableModel(random_rule(1, vocab), batch=2, length=length, vocab=vocab)
  rows = [[[2], [3, 4]], [[3, 2]]]
  seqs, scores = search(model, beam_size=128, alpha=alpha, constraints=phrases(rows))
  ending = [list(p) + [EOS] for n in range(length) for p in itertools.product([2, 3, 4], repeat=n)]
  cut = [list(p) for p in itertools.product([2, 3, 4], repeat=length)]
  for b, row in enumerate(rows):
    allowed = [s for s in ending if all(contains(s, p) for p in row)] + cut
    assert len(allowed) > len(cut)
    expected = sorted(((all(contains(s, p) for p in row), model.score(b, s, alpha), s)
                       for s in allowed), reverse=True)
    valid = scores[b] > NEG_INF / 2
    assert valid.sum() == len(allowed)
    assert sorted(strip(q) for q in seqs[b][valid]) == sorted(allowed)
    np.testing.assert_allclose(scores[b][valid], [s for _, s, _ in expected], rtol=1e-5)


@pytest.mark.parametrize("beam_size", [1, 2, 4])
def test_the_outputs_of_a_small_beam_contain_their_phrases(beam_size):
  # The 1-best and every output that ends in EOS (the n-best can hold outputs cut at the
  # maximum length, as this random model rarely ends, and those may lack a phrase).
  model = TableModel(random_rule(3, 6), batch=4, length=10, vocab=6)
  rows = [[[2, 3]], [[5], [4]], [], [[3, 3, 3]]]
  plain, plain_scores = search(model, beam_size=beam_size, alpha=0.6)
  seqs, scores = search(model, beam_size=beam_size, alpha=0.6, constraints=phrases(rows))
  for b, row in enumerate(rows):
    for k in range(beam_size):
      out = strip(seqs[b, k])
      if k == 0 or out[-1] == EOS:
        assert all(contains(out, p) for p in row), (b, k, out)
      if beam_size > 1:  # beam 1 ranks by log-probability (alpha 0)
        assert scores[b, k] == pytest.approx(model.score(b, seqs[b, k], 0.6), abs=1e-4)
  assert not all(contains(strip(plain[0, 0]), p) for p in rows[0])  # the constraint mattered
  np.testing.assert_array_equal(seqs[2], plain[2])  # no phrases: the plain search's outputs
  np.testing.assert_allclose(scores[2], plain_scores[2], rtol=1e-6)


@pytest.mark.parametrize("beam_size", [1, 2, 4])
def test_a_phrase_the_model_finds_unlikely_is_met_even_by_a_beam_of_one(beam_size):
  # 3 after 3 is e^-15 less likely than anything else: the phrase [3, 3] is only met when
  # its second token is offered though no other hypothesis would keep it (its bank's first).
  def rule(b, i, p2, p1):
    logits = np.zeros(6)
    logits[2], logits[EOS] = 3.0, (2.0 if i > 3 else -5.0)
    if p1 == 3:
      logits[3] = -15.0
    return logits
  model = TableModel(rule, batch=1, length=10, vocab=6)
  seqs, scores = search(model, beam_size=beam_size, alpha=0.6, constraints=phrases([[[3, 3]]]))
  assert contains(strip(seqs[0, 0]), [3, 3])
  plain, _ = search(model, beam_size=beam_size, alpha=0.6)
  assert not contains(strip(plain[0, 0]), [3, 3])


@pytest.mark.parametrize("beam_size", [1, 4])
def test_no_phrases_search_exactly_as_without_constraints(beam_size):
  model = TableModel(random_rule(5, 6), batch=4, length=10, vocab=6)
  plain = search(model, beam_size=beam_size, alpha=0.6)
  none = search(model, beam_size=beam_size, alpha=0.6, constraints=phrases([[]] * 4))
  np.testing.assert_array_equal(none[0], plain[0])
  np.testing.assert_array_equal(none[1], plain[1])


def test_no_piece_goes_on_a_phrase_s_last_word():
  # Token 4 is kept out right after a completed phrase (as a piece that would go on its last
  # word): the model's favourite continuation of [2, 3] is 4, which must not follow it.
  def rule(b, i, p2, p1):
    logits = np.zeros(6)
    logits[{0: 2, 2: 3, 3: 4}.get(p1, EOS)] = 6.0
    return logits
  model = TableModel(rule, batch=1, length=6, vocab=6)
  c = phrases([[[2, 3]]])
  free, _ = search(model, beam_size=2, constraints=c)
  kept, _ = search(model, beam_size=2, constraints=c,
                   not_after_forced=tf.constant([False] * 4 + [True, False]))
  assert strip(free[0, 0]) == [2, 3, 4, EOS]
  assert strip(kept[0, 0])[:2] == [2, 3] and strip(kept[0, 0])[2] != 4


def test_xla_compiled_search_with_phrases_matches_eager():
  model = TableModel(random_rule(4, 6), batch=3, length=8, vocab=6)
  c = phrases([[[2, 3]], [[5], [4, 4]], []])
  eager = search(model, beam_size=3, alpha=0.6, constraints=c)
  compiled = tf.function(lambda: beam_search(
      model, model.cache(), batch_size=model.batch, beam_size=3, alpha=0.6, eos_id=EOS,
      max_decode_length=model.length, constraints=c), jit_compile=True, autograph=False)()
  np.testing.assert_array_equal(compiled[0].numpy(), eager[0])
  np.testing.assert_allclose(compiled[1].numpy(), eager[1], rtol=1e-5)
