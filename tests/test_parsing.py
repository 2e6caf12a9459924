"""Tree reading, linearization, repair and EVALB scoring (t2t_lite/parsing.py), and wsj_parsing."""
import random

import pytest

from t2t_lite import parsing

SENTENCE = "The dog barked ."
GOLD = "(S (NP (DT The) (NN dog)) (VP (VBD barked)) (. .))"


@pytest.fixture(scope="module")
def ptb_trees(ptb_dir):
  """Every tree of the PTB sample, normalised, in file order."""
  trees = []
  for path in sorted(ptb_dir.glob("*.mrg")):
    trees += parsing.parse_trees(path.read_text(), str(path))
  return trees


# --- Reading and normalisation --------------------------------------------------------------------

def test_normalisation_removes_empty_elements_function_tags_and_wrapper():
  raw = """( (S
      (NP-SBJ-1 (NNP John) )
      (VP (VBD tried)
        (S (NP-SBJ (-NONE- *-1) )
          (VP (TO to) (VP (VB leave) (PP-LOC=2 (IN at) (NP (-LRB- -LRB-) (CD 5) (-RRB- -RRB-) )))))
        (ADVP|PRT (RB back) ))
      (. .) ))"""
  assert parsing.normalize_tree(raw) == (
      "(S (NP (NNP John)) (VP (VBD tried) (S (VP (TO to) (VP (VB leave) (PP (IN at) "
      "(NP (-LRB- -LRB-) (CD 5) (-RRB- -RRB-)))))) (ADVP (RB back))) (. .))")
  # TOP / ROOT wrappers go too; a wrapper around several constituents becomes TOP.
  assert parsing.normalize_tree("(ROOT (TOP (NP (NN dog))))") == "(NP (NN dog))"
  assert parsing.normalize_tree("( (NP (NN dog)) (VP (VBD barked)) )") == (
      "(TOP (NP (NN dog)) (VP (VBD barked)))")


def test_ptb_sample_reads_every_tree(ptb_trees):
  trees = ptb_trees
  assert len(trees) == 3669  # Top-level brackets in wsj_0001.mrg .. wsj_0199.mrg.
  assert str(trees[0]) == (
      "(S (NP (NP (NNP Pierre) (NNP Vinken)) (, ,) (ADJP (NP (CD 61) (NNS years)) (JJ old)) (, ,))"
      " (VP (MD will) (VP (VB join) (NP (DT the) (NN board)) (PP (IN as) (NP (DT a)"
      " (JJ nonexecutive) (NN director))) (NP (NNP Nov.) (CD 29)))) (. .))")
  labels = {event[1] for tree in trees for event in parsing._events(tree) if event[0] == "open"}
  assert not any("-" in label or "=" in label or "|" in label for label in labels)
  tags = {event[1] for tree in trees for event in parsing._events(tree) if event[0] == "leaf"}
  assert "-NONE-" not in tags and {"-LRB-", "-RRB-", ",", "``"} <= tags


@pytest.mark.parametrize("text, line, message", [
    ("( (S (NN a)) )\n( (S (NN b)) ))\n", 2, "unmatched ')'"),
    ("( (S (NN a)) )\n\n( (S (NN b)\n (VB c) )\n", 3, "not closed by the end of the file"),
    ("( (S (NN a)) )\n( (S\n  (NN a b)) )\n", 3, "holds a word beside other content"),
    ("( (S (NN a)) )\n( (S (NP (NN a) word)) )\n", 2, "holds a word beside other content"),
    ("( (S (NN a)) )\n( (S ()) )\n", 2, "empty bracket"),
    ("( (S (NN a)) )\nstray ( (S (NN a)) )\n", 2, "text 'stray' outside any tree"),
    ("\n( (S (NP-SBJ (-NONE- *T*-1))) )\n", 2, "only empty elements"),
    ("( ( a) )\n", 1, "has no POS tag"),
])
def test_malformed_tree_names_file_and_line(text, line, message):
  with pytest.raises(parsing.TreeError) as error:
    parsing.parse_trees(text, "wsj_0042.mrg")
  assert str(error.value).startswith(f"wsj_0042.mrg:{line}: ")
  assert message in str(error.value)
  assert "\n" not in str(error.value)


# --- Linearization and exact round trip -----------------------------------------------------------

def test_linearization_of_a_small_tree():
  source, target = parsing.tree_to_example(
      "( (S (NP-SBJ (DT The) (NN dog)) (VP (VBD barked)) (. .)) )")
  assert source == SENTENCE
  assert target == "(S (NP DT NN )NP (VP VBD )VP . )S"
  assert parsing.example_to_tree(source, target) == GOLD


def test_every_ptb_sample_tree_round_trips_exactly(ptb_trees):
  for tree in ptb_trees:
    normalised = str(tree)
    source, target = parsing.tree_to_example(normalised)
    assert source == " ".join(tree.words())
    assert parsing.example_to_tree(source, target) == normalised
    assert parsing.normalize_tree(normalised) == normalised  # Normalisation is idempotent.


# --- Repair ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("target, expected", [
    # Well formed, and with wrong closing labels: the opening label wins.
    ("(S (NP DT NN )NP (VP VBD )VP . )S", GOLD),
    ("(S (NP DT NN )VP (VP VBD )NP . )X", GOLD),
    ("(S (NP DT NN ) (VP VBD ) . )", GOLD),
    # Unbalanced: missing closes are added; extra closes are dropped.
    ("(S (NP DT NN )NP (VP VBD . ", "(S (NP (DT The) (NN dog)) (VP (VBD barked) (. .)))"),
    ("(S (NP DT NN )NP )S )S )S VBD .",
     "(S (S (NP (DT The) (NN dog))) (VBD barked) (. .))"),
    # Too many word slots: the extra ones, and the constituents left empty, are dropped.
    ("(S (NP DT NN NN NN )NP (VP VBD )VP . )S",
     "(S (NP (DT The) (NN dog) (NN barked) (NN .)))"),
    # Too few word slots: the remaining words hang, tagged XX, at the end of the root.
    ("(S (NP DT )NP )S", "(S (NP (DT The)) (XX dog) (XX barked) (XX .))"),
    ("(S (NP DT NN )NP (VP VBD )VP", "(S (NP (DT The) (NN dog)) (VP (VBD barked)) (XX .))"),
    # Garbage and empty output.
    ("( ( ) ) )S foo", "(S (foo The) (XX dog) (XX barked) (XX .))"),
    ("(NP )NP (VP (PP )PP )VP", "(S (XX The) (XX dog) (XX barked) (XX .))"),
    ("", "(S (XX The) (XX dog) (XX barked) (XX .))"),
    # GAFL-style XX slots.
    ("(S (NP XX XX )NP (VP XX )VP XX )S",
     "(S (NP (XX The) (XX dog)) (VP (XX barked)) (XX .))"),
])
def test_repair_gives_a_well_formed_tree_over_the_source_words(target, expected):
  repaired = parsing.example_to_tree(SENTENCE, target)
  assert repaired == expected
  assert parsing.tree_to_example(repaired)[0] == SENTENCE


def test_repair_of_random_outputs_is_well_formed_and_keeps_the_words():
  rng = random.Random(0)
  pieces = ["(S", "(NP", "(VP", "(PP", ")S", ")NP", ")VP", ")", "(", "NN", "DT", "XX", ".",
            "(NP-SBJ-1", "-NONE-", "(-NONE-", "(NP)NP", "NN)", "((", "))S", "(=", "(TOP", "(ROOT"]
  words = "a b c d e f g".split()
  for trial in range(500):
    source = " ".join(words[:rng.randint(1, len(words))])
    target = " ".join(rng.choice(pieces) for _ in range(rng.randint(0, 30)))
    repaired = parsing.example_to_tree(source, target)
    assert parsing.normalize_tree(repaired) == repaired, (source, target)
    assert parsing.tree_to_example(repaired)[0] == source, (source, target)
    assert parsing.example_to_tree(*parsing.tree_to_example(repaired)) == repaired


def test_repair_normalises_labels_and_never_loses_a_word():
  assert parsing.example_to_tree(SENTENCE, "(ROOT (S (NP-SBJ DT -NONE- )NP(VP VBD)VP . )S)") == (
      "(S (NP (DT The) (XX dog)) (VP (VBD barked)) (. .))")


def test_repair_rejects_a_source_it_cannot_hold():
  with pytest.raises(ValueError, match="source sentence has no words"):
    parsing.example_to_tree("  ", "(S NN )S")
  with pytest.raises(ValueError, match="word '\\(' holds a bracket; write '\\(' as -LRB-"):
    parsing.example_to_tree("a ( b", "(S NN NN NN )S")


# --- EVALB scoring --------------------------------------------------------------------------------

def test_gold_against_gold_scores_100(ptb_trees):
  trees = [str(tree) for tree in ptb_trees]
  assert parsing.bracket_f1(trees, trees) == {"precision": 100.0, "recall": 100.0, "f1": 100.0}


def test_punctuation_is_ignored():
  # The final '.' moves inside the VP: without deleting punctuation the VP span would differ.
  predicted = "(S (NP (DT The) (NN dog)) (VP (VBD barked) (. .)))"
  assert parsing.bracket_counts(GOLD, predicted) == (3, 3, 3)
  # A constituent over punctuation only spans no word once it is deleted: not a bracket.
  predicted = "(S (NP (DT The) (NN dog)) (VP (VBD barked)) (PRN (. .)))"
  assert parsing.bracket_counts(GOLD, predicted) == (3, 3, 3)
  # Which words are punctuation is read off the gold tags.
  predicted = "(S (NP (DT The) (NN dog)) (VP (VBD barked) (NN .)))"
  assert parsing.bracket_counts(GOLD, predicted) == (3, 3, 3)


def test_unary_chains_count_as_a_multiset():
  gold = "(S (S (VP (VB Go))) (. .))"  # S[0,1] twice and VP[0,1].
  predicted = "(S (VP (VB Go)) (. .))"  # S[0,1] once and VP[0,1].
  assert parsing.bracket_counts(gold, predicted) == (2, 3, 2)
  scores = parsing.bracket_f1([gold], [predicted])
  assert scores["precision"] == 100.0
  assert scores["recall"] == pytest.approx(200 / 3)
  assert scores["f1"] == pytest.approx(80.0)
  assert parsing.bracket_f1([predicted], [gold])["precision"] == pytest.approx(200 / 3)


MISSING_GOLD = ("(S (NP (DT The) (JJ old) (NN dog)) (VP (VBD saw) (NP (NP (DT the) (NN cat)) "
                "(PP (IN in) (NP (DT the) (NN yard))))) (. .))")
# Misses NP[4,9] "the cat in the yard": 6 of the 7 gold brackets, nothing extra.
MISSING_PREDICTED = ("(S (NP (DT The) (JJ old) (NN dog)) (VP (VBD saw) (NP (DT the) (NN cat)) "
                     "(PP (IN in) (NP (DT the) (NN yard)))) (. .))")


def test_a_missing_bracket_lowers_recall_only():
  assert parsing.bracket_counts(MISSING_GOLD, MISSING_PREDICTED) == (6, 7, 6)
  scores = parsing.bracket_f1([MISSING_GOLD], [MISSING_PREDICTED])
  assert scores["precision"] == 100.0
  assert scores["recall"] == pytest.approx(600 / 7)  # 85.714...
  assert scores["f1"] == pytest.approx(1200 / 13)  # 2PR/(P+R) = 92.307...


def test_corpus_scores_are_micro_averaged():
  scores = parsing.bracket_f1([MISSING_GOLD, "(S (S (VP (VB Go))) (. .))"],
                              [MISSING_PREDICTED, "(S (VP (VB Go)) (. .))"])
  # matched 6 + 2, gold 7 + 3, predicted 6 + 2 (a macro average would give recall 76.19).
  assert scores["precision"] == 100.0
  assert scores["recall"] == pytest.approx(80.0)
  assert scores["f1"] == pytest.approx(800 / 9)


def test_advp_and_prt_are_the_same_label():
  gold = "(S (NP (PRP He)) (VP (VBD gave) (PRT (RP up))) (. .))"
  assert parsing.bracket_counts(gold, gold.replace("(PRT", "(ADVP")) == (4, 4, 4)
  assert parsing.bracket_counts(gold, gold.replace("(PRT", "(NP")) == (3, 4, 4)
  assert parsing.bracket_f1([gold], [gold.replace("(PRT", "(NP")])["f1"] == pytest.approx(75.0)


def test_root_wrapper_and_function_tags_are_ignored():
  plain = "(S (NP (PRP He)) (VP (VBD left)) (. .))"
  for gold in ("( (S (NP-SBJ (PRP He)) (VP (VBD left)) (. .)) )",
               "(TOP (S (NP (PRP He)) (VP (VBD left)) (. .)))",
               "(ROOT (S (NP (PRP He)) (VP (VBD left)) (. .)))"):
    assert parsing.bracket_counts(gold, plain) == (3, 3, 3)
  # A TOP over several constituents is no bracket either.
  assert parsing.bracket_counts("( (NP (PRP He)) (VP (VBD left)) (. .) )", plain) == (2, 2, 3)


def test_scorer_rejects_different_words_and_lengths():
  with pytest.raises(ValueError, match="sentence 1: the trees hold different words"):
    parsing.bracket_f1([GOLD, GOLD], [GOLD, GOLD.replace("dog", "cat")])
  with pytest.raises(ValueError, match="1 gold trees but 2 predicted trees"):
    parsing.bracket_f1([GOLD], [GOLD, GOLD])
  with pytest.raises(parsing.TreeError, match="<predicted tree 0>:1: unmatched"):
    parsing.bracket_f1([GOLD], [GOLD + ")"])


# --- The wsj_parsing problem ----------------------------------------------------------------------

def test_wsj_parsing_is_registered_with_the_papers_settings():
  import t2t_lite
  problem = t2t_lite.get_problem("wsj_parsing")
  assert (problem.metric, problem.vocab_size) == ("bracket_f1", 16000)
  from t2t_lite.decoding import DecodeSettings
  assert DecodeSettings.resolve(problem) == DecodeSettings(beam_size=21, alpha=0.3, extra_length=300)
  assert problem.tree_to_example(GOLD) == (SENTENCE, "(S (NP DT NN )NP (VP VBD )VP . )S")
  assert problem.example_to_tree(SENTENCE, "(S (NP DT NN") == (
      "(S (NP (DT The) (NN dog)) (XX barked) (XX .))")
  assert problem.bracket_f1([GOLD], [GOLD])["f1"] == 100.0


def test_standard_wsj_split_by_section():
  from t2t_lite.problems.wsj_parsing import split_files
  paths = [f"/tb/{s:02d}/wsj_{s:02d}{i:02d}.mrg" for s in range(25) for i in (0, 1)]
  splits = split_files(paths)
  assert splits["dev"] == ["/tb/22/wsj_2200.mrg", "/tb/22/wsj_2201.mrg"]
  assert splits["test"] == ["/tb/23/wsj_2300.mrg", "/tb/23/wsj_2301.mrg"]
  assert len(splits["train"]) == 40 and splits["train"][0] == "/tb/02/wsj_0200.mrg"
  assert splits["train"][-1] == "/tb/21/wsj_2101.mrg"


def test_fallback_split_is_80_10_10_by_file(ptb_dir):
  from t2t_lite.problems.wsj_parsing import find_mrg_files, split_files
  splits = split_files(find_mrg_files(str(ptb_dir)))
  names = {split: [path.rsplit("/", 1)[1] for path in paths] for split, paths in splits.items()}
  assert [len(names[s]) for s in ("train", "dev", "test")] == [144, 18, 17]
  assert names["dev"][:2] == ["wsj_0009.mrg", "wsj_0019.mrg"]
  assert names["test"][:2] == ["wsj_0010.mrg", "wsj_0020.mrg"]
  assert sorted(sum(names.values(), [])) == sorted(p.name for p in ptb_dir.glob("*.mrg"))


def test_missing_or_malformed_raw_data_is_reported(tmp_path):
  from t2t_lite.problems.wsj_parsing import WsjParsing
  from t2t_lite.problem import ProblemError
  problem = WsjParsing(vocab_size=300)
  with pytest.raises(ProblemError, match=r"raw_dir .*nowhere does not exist; the WSJ Penn Tree"):
    list(problem.raw_pairs("train", str(tmp_path / "nowhere")))
  with pytest.raises(ProblemError, match="no .mrg files under raw_dir"):
    list(problem.raw_pairs("train", str(tmp_path)))
  for i in range(10):
    (tmp_path / f"wsj_00{i:02d}.mrg").write_text("( (S (NP (NN a)) (VP (VB b))) )\n")
  (tmp_path / "wsj_0003.mrg").write_text("( (S (NP (NN a)) (VP (VB b))) )\n( (S (NN c) \n")
  with pytest.raises(ProblemError, match=r"wsj_0003.mrg:2: tree starting here is not closed"):
    list(problem.raw_pairs("train", str(tmp_path)))


def test_wsj_parsing_prepares_and_batches_the_ptb_sample(ptb_dir, tmp_path):
  import t2t_lite
  from t2t_lite.problems.wsj_parsing import WsjParsing
  problem = WsjParsing(vocab_size=1000)
  stats = problem.prepare(str(tmp_path), str(ptb_dir))
  assert {split: stats[split]["examples"] for split in stats} == {
      "train": 2925, "dev": 406, "test": 338}  # 3669 trees, none dropped.
  assert all(stats[split]["empty"] == 0 for split in stats)
  tok = problem.tokenizer(str(tmp_path))
  pairs = problem.text_pairs("test", str(tmp_path))
  assert len(pairs) == 338
  for source, target in pairs:
    assert tok.decode(tok.encode(source)) == source
    assert tok.decode(tok.encode(target)) == target
  gold = [problem.example_to_tree(s, t) for s, t in pairs]
  assert problem.score([s for s, _ in pairs], [t for _, t in pairs],
                       [t for _, t in pairs])["bracket_f1"] == 100.0
  # An empty prediction is repaired into a flat S over the words: one bracket per sentence,
  # which matches exactly when the gold root is an S.
  flat = problem.score([s for s, _ in pairs], [""] * len(pairs), [t for _, t in pairs])
  s_roots = sum(target.startswith("(S ") for _, target in pairs)
  assert flat["bracket_precision"] == pytest.approx(100 * s_roots / len(pairs))
  assert flat["bracket_recall"] < 10.0
  assert gold[0] == problem.example_to_tree(*problem.tree_to_example(gold[0]))

  hparams = t2t_lite.get_hparams("transformer_tiny").replace(max_length=1024)
  batches = list(problem.dataset("test", str(tmp_path), hparams, training=False,
                                 batch_tokens=4096))
  assert sum(int(b["targets"].shape[0]) for b in batches) == 338
  for batch in batches:
    assert batch["inputs"].dtype.name == "int32" and batch["targets"].dtype.name == "int32"
    lengths = (batch["targets"].numpy() != 0).sum(axis=1)
    assert all(row[n - 1] == 1 for row, n in zip(batch["targets"].numpy(), lengths))
    assert batch["targets"].shape[0] * batch["targets"].shape[1] <= 4096
