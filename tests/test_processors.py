"""What composes in decoding (decode/composition.py's table, read by check_request) and the
combinations that the search's processors (decode/processors.py) now compose: a target prefix
with lexical constraints, and the shortlist with a prefix or constraints."""
import itertools
import re

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.data.tokenizers import EOS_ID
from t2t_lite.decode import composition, lexical, search, shortlist, translation
from t2t_lite.decode.beam_search import NEG_INF
from t2t_lite.decode.decode_settings import ONE_TREE, DecodingError, check_request

from test_beam_search import EOS, TableModel, random_rule, strip
from test_beam_search import search as table_search
from test_constraints import contains, phrases

# How check_request is asked for each feature of the table.
REQUEST = {composition.TARGET_PREFIXES: {"forcing": [composition.TARGET_PREFIXES]},
           composition.CONSTRAINTS: {"forcing": [composition.CONSTRAINTS]},
           composition.SAMPLING: {"sample": True}, composition.SHORTLIST: {"shortlist": True},
           composition.XLA: {"jit_compile": True},
           composition.OUTPUT_CONSTRAINT: {"output_constraint": True},
           composition.LITERT: {"engine": "litert"},
           composition.ALIGNMENTS: {"with_alignments": True},
           composition.SPAN_PARSER: {"span_parser": True},
           composition.ENSEMBLE: {"ensemble": True}}
# A span parser's own refusals, not the table's: it decodes one tree by CKY (ONE_TREE).
ONE_TREE_PAIRS = {frozenset((composition.SPAN_PARSER, other)) for other in (
    composition.SAMPLING, composition.SHORTLIST, composition.ALIGNMENTS,
    composition.TARGET_PREFIXES, composition.CONSTRAINTS)}


def _request(first, second):
  request = {}
  for feature in (first, second):
    for key, value in REQUEST[feature].items():
      request[key] = request.get(key, []) + value if key == "forcing" else value
  return request


def test_every_pair_in_the_table_is_refused_with_its_message_and_every_other_pair_composes():
  excluded = {frozenset((e.first, e.second)): e.message for e in composition.EXCLUDED}
  assert set(itertools.chain(*excluded)) <= set(REQUEST)
  for first, second in itertools.combinations(REQUEST, 2):
    message = excluded.get(frozenset((first, second)))
    if frozenset((first, second)) in ONE_TREE_PAIRS:
      with pytest.raises(DecodingError, match=re.escape(ONE_TREE)):
        check_request(**_request(first, second))
    elif message is None:
      check_request(**_request(first, second))  # composes
    else:
      with pytest.raises(DecodingError) as refused:
        check_request(**_request(first, second))
      assert str(refused.value) == message and "\n" not in message
  assert frozenset((composition.TARGET_PREFIXES, composition.CONSTRAINTS)) not in excluded


def test_a_prefix_with_phrases_finds_the_best_output_that_starts_with_one_and_has_the_other():
  # Exhaustive search (beam 128 over every output of 3 letters, at most 4 tokens) forced
  # through a prefix and constrained to a phrase: the best is the best of the outputs that
  # start with the prefix and contain the phrase, scored by the model's own log-probabilities;
  # every output found starts with the prefix.
  vocab, length, alpha = 5, 4, 0.6
  model = TableModel(random_rule(3, vocab), batch=2, length=length, vocab=vocab)
  prefixes, rows = [[2], [3, 4]], [[[4, 4]], [[2]]]
  seqs, scores = table_search(model, beam_size=128, alpha=alpha,
                              forced_ids=tf.constant([[2, 0], [3, 4]]), constraints=phrases(rows))
  every = [list(p) + [EOS] for n in range(length) for p in itertools.product([2, 3, 4], repeat=n)]
  every += [list(p) for p in itertools.product([2, 3, 4], repeat=length)]
  for b, (prefix, row) in enumerate(zip(prefixes, rows)):
    allowed = [s for s in every if s[:len(prefix)] == prefix and contains(s, row[0])]
    best_score, best = max((model.score(b, s, alpha), s) for s in allowed)
    assert strip(seqs[b, 0]) == best
    assert scores[b, 0] == pytest.approx(best_score, abs=1e-4)
    valid = scores[b] > NEG_INF / 2
    assert all(strip(s)[:len(prefix)] == prefix for s in seqs[b][valid])


REVERSIBLE = ["3 9 4 7", "1 2 3 4 5 6", "7 7 0 8", "5 6 1", "2 0 2 0 8 1 6"]


@pytest.fixture(scope="module")
def translator(reversing_model):
  return translation.Translator.from_model_dir(reversing_model, beam_size=4, alpha=0.6,
                                               extra_length=6, precision="none", n_best=4)


def _has_words(output, phrase):
  return f" {phrase} " in f" {output} "


def test_a_translator_s_outputs_start_with_the_prefix_and_contain_the_phrases(translator):
  prefixes = ["9 9", "0", "", "4 4 4", "8"]
  rows = [["5"], ["4 4"], ["8"], [], ["3 3"]]
  lists, scores = translator.translate(REVERSIBLE, prefixes=prefixes, constraints=rows)
  for prefix, row, outputs in zip(prefixes, rows, lists):
    assert all(o.split()[:len(prefix.split())] == prefix.split() for o in outputs), prefix
    assert all(_has_words(outputs[0], p) for p in row), (row, outputs)
  firsts = [outputs[0] for outputs in lists]
  assert translator.score(REVERSIBLE, firsts)["score"] == pytest.approx(
      [line_scores[0] for line_scores in scores], abs=1e-4)
  # Either alone is as without the other.
  assert translator.translate(REVERSIBLE, prefixes=prefixes, constraints=[[]] * 5) == (
      translator.translate(REVERSIBLE, prefixes=prefixes))
  assert translator.translate(REVERSIBLE, prefixes=[""] * 5, constraints=rows) == (
      translator.translate(REVERSIBLE, constraints=rows))


def _beams(translator, lines, **forcing):
  """search.beams over `lines` (ids with EOS) -> (ids, scores) as numpy."""
  inputs = tf.ragged.constant([translator.tokenizer.encode(line, add_eos=True)
                               for line in lines], dtype=tf.int32).to_tensor(0)  # [B, S]
  ids, scores = search.beams(translator.model, inputs, beam_size=4, alpha=0.6, extra_length=6,
                             **forcing)
  return ids.numpy(), scores.numpy()


def _forcing(translator):
  """A prefix and phrases of the lines (the model's own tokens) -> beams' keywords."""
  prefix = tf.ragged.constant([translator.tokenizer.encode(p) for p in
                               ["9 9", "0", "8", "4", "8"]], dtype=tf.int32).to_tensor(0)
  tokens = tf.ragged.constant([[translator.tokenizer.encode(p) for p in row] for row in
                               [["5"], ["4 4"], [], ["3"], ["3 3"]]], dtype=tf.int32,
                              ragged_rank=2)
  return {"prefix": prefix, "phrases": lexical.from_phrases(tokens)}


def test_the_shortlist_with_a_prefix_and_phrases_searches_as_the_whole_vocabulary(translator):
  # A shortlist of every token: the same outputs and scores as without one.
  vocab_size = translator.model.vocab_size
  every = list(range(2, vocab_size))
  everything = shortlist.build([(every, every)], vocab_size, frequent=0, per_source=vocab_size)
  for forcing in ({"prefix": _forcing(translator)["prefix"]}, _forcing(translator)):
    whole = _beams(translator, REVERSIBLE, **forcing)
    listed = _beams(translator, REVERSIBLE, shortlist=everything, **forcing)
    np.testing.assert_array_equal(listed[0], whole[0])
    np.testing.assert_allclose(listed[1], whole[1], atol=1e-4)


def test_a_shortlist_without_the_forced_tokens_gets_them(translator):
  # Each source token's only candidate is itself: the prefix's and phrases' other tokens are
  # added to the batch's vocabulary, and the outputs start with the prefix, contain the phrases.
  vocab_size = translator.model.vocab_size
  every = list(range(2, vocab_size))
  own = shortlist.build([([t, EOS_ID], [t, EOS_ID]) for t in every], vocab_size, frequent=0,
                        per_source=1)
  forcing = _forcing(translator)
  ids, scores = _beams(translator, REVERSIBLE, shortlist=own, **forcing)
  prefix, tokens = forcing["prefix"].numpy(), forcing["phrases"].ids.numpy()
  for b in range(len(REVERSIBLE)):
    best = [int(t) for t in ids[b, 0]]
    forced = [int(t) for t in prefix[b] if t]
    assert best[:len(forced)] == forced
    assert all(int(t) in best for t in tokens[b] if t)
    assert scores[b, 0] > NEG_INF / 2
