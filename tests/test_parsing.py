"""Tree reading, linearization, repair and EVALB scoring (t2t_lite/parsing/treebank.py), and wsj_parsing."""
import random

import pytest

from t2t_lite.parsing import evalb
from t2t_lite.parsing import treebank


def normalize_tree(tree_str):
  """The documented normalisation of one bracketed tree string, as a one-line string."""
  return treebank.tree_to_string(treebank.parse_tree(tree_str))

SENTENCE = "The dog barked ."
GOLD = "(S (NP (DT The) (NN dog)) (VP (VBD barked)) (. .))"


@pytest.fixture(scope="module")
def ptb_trees(ptb_dir):
  """Every tree of the PTB sample, normalised, in file order."""
  trees = []
  for path in sorted(ptb_dir.glob("*.mrg")):
    trees += treebank.parse_trees(path.read_text(), str(path))
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
  assert normalize_tree(raw) == (
      "(S (NP (NNP John)) (VP (VBD tried) (S (VP (TO to) (VP (VB leave) (PP (IN at) "
      "(NP (-LRB- -LRB-) (CD 5) (-RRB- -RRB-)))))) (ADVP (RB back))) (. .))")
  # TOP / ROOT wrappers go too; a wrapper around several constituents becomes TOP.
  assert normalize_tree("(ROOT (TOP (NP (NN dog))))") == "(NP (NN dog))"
  assert normalize_tree("( (NP (NN dog)) (VP (VBD barked)) )") == (
      "(TOP (NP (NN dog)) (VP (VBD barked)))")


def test_ptb_sample_reads_every_tree(ptb_trees):
  trees = ptb_trees
  assert len(trees) == 3669  # Top-level brackets in wsj_0001.mrg .. wsj_0199.mrg.
  assert str(trees[0]) == (
      "(S (NP (NP (NNP Pierre) (NNP Vinken)) (, ,) (ADJP (NP (CD 61) (NNS years)) (JJ old)) (, ,))"
      " (VP (MD will) (VP (VB join) (NP (DT the) (NN board)) (PP (IN as) (NP (DT a)"
      " (JJ nonexecutive) (NN director))) (NP (NNP Nov.) (CD 29)))) (. .))")
  labels = {event[1] for tree in trees for event in treebank._events(tree) if event[0] == "open"}
  assert not any("-" in label or "=" in label or "|" in label for label in labels)
  tags = {event[1] for tree in trees for event in treebank._events(tree) if event[0] == "leaf"}
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
  with pytest.raises(treebank.TreeError) as error:
    treebank.parse_trees(text, "wsj_0042.mrg")
  assert str(error.value).startswith(f"wsj_0042.mrg:{line}: ")
  assert message in str(error.value)
  assert "\n" not in str(error.value)


# --- Linearization and exact round trip -----------------------------------------------------------

def test_linearization_of_a_small_tree():
  source, target = treebank.tree_to_example(
      "( (S (NP-SBJ (DT The) (NN dog)) (VP (VBD barked)) (. .)) )")
  assert source == SENTENCE
  assert target == "(S (NP DT NN )NP (VP VBD )VP . )S"
  assert treebank.example_to_tree(source, target) == GOLD


def test_every_ptb_sample_tree_round_trips_exactly(ptb_trees):
  for tree in ptb_trees:
    normalised = str(tree)
    source, target = treebank.tree_to_example(normalised)
    assert source == " ".join(tree.words())
    assert treebank.example_to_tree(source, target, repair_punctuation=False) == normalised
    assert normalize_tree(normalised) == normalised  # Normalisation is idempotent.
    # The repair keeps the treebank's punctuation tags: no gold tree changes but one tag ("Wa"
    # tagged "," once in wsj_0037) of the sample's 94,000 words.
    repaired = treebank.example_to_tree(source, target)
    if repaired != normalised:
      assert repaired == normalised.replace("(, Wa)", "(XX Wa)")


# --- Repair ---------------------------------------------------------------------------------------

def test_word_slots_hold_the_words_and_read_back_as_xx_tags(ptb_trees):
  """target_tags="words": each slot but punctuation is its word; as a tree, an XX tag."""
  from t2t_lite.problems.wsj_parsing import WsjParsing
  problem = WsjParsing(target_tags="words")
  source, target = treebank.tree_to_example(GOLD, tags="words")
  assert target == "(S (NP The dog )NP (VP barked )VP . )S"
  assert treebank.slots_to_tags(target + " )S(NP x") == "(S (NP XX XX )NP (VP XX )VP . )S )S(NP XX"
  assert problem.example_to_tree(source, target) == (
      "(S (NP (XX The) (XX dog)) (VP (XX barked)) (. .))")
  for tree in ptb_trees:
    source, target = treebank.tree_to_example(str(tree), tags="words")
    punctuation = treebank.tree_to_example(str(tree), tags="punctuation")
    assert treebank.slots_to_tags(target) == punctuation[1]
    slots = [t for t in target.split() if not t.startswith(("(", ")"))]
    assert all(slot == word or slot in treebank.EVALB_DELETE_LABELS
               for word, slot in zip(source.split(), slots))
    assert len(slots) == len(source.split())
    rebuilt = problem.example_to_tree(source, target, repair_punctuation=False)
    assert rebuilt == treebank.example_to_tree(*punctuation, repair_punctuation=False)


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
     "(S (NP (DT The) (NN dog) (NN barked) (. .)))"),
    # Too few word slots: the remaining words hang, tagged XX, at the end of the root.
    ("(S (NP DT )NP )S", "(S (NP (DT The)) (XX dog) (XX barked) (. .))"),
    ("(S (NP DT NN )NP (VP VBD )VP", "(S (NP (DT The) (NN dog)) (VP (VBD barked)) (. .))"),
    # Garbage and empty output.
    ("( ( ) ) )S foo", "(S (foo The) (XX dog) (XX barked) (. .))"),
    ("(NP )NP (VP (PP )PP )VP", "(S (XX The) (XX dog) (XX barked) (. .))"),
    ("", "(S (XX The) (XX dog) (XX barked) (. .))"),
    # GAFL-style XX slots.
    ("(S (NP XX XX )NP (VP XX )VP XX )S",
     "(S (NP (XX The) (XX dog)) (VP (XX barked)) (. .))"),
])
def test_repair_gives_a_well_formed_tree_over_the_source_words(target, expected):
  repaired = treebank.example_to_tree(SENTENCE, target)
  assert repaired == expected
  assert treebank.tree_to_example(repaired)[0] == SENTENCE


def test_repair_of_random_outputs_is_well_formed_and_keeps_the_words():
  rng = random.Random(0)
  pieces = ["(S", "(NP", "(VP", "(PP", ")S", ")NP", ")VP", ")", "(", "NN", "DT", "XX", ".",
            "(NP-SBJ-1", "-NONE-", "(-NONE-", "(NP)NP", "NN)", "((", "))S", "(=", "(TOP", "(ROOT"]
  words = "a b c d e f g".split()
  for trial in range(500):
    source = " ".join(words[:rng.randint(1, len(words))])
    target = " ".join(rng.choice(pieces) for _ in range(rng.randint(0, 30)))
    repaired = treebank.example_to_tree(source, target)
    assert normalize_tree(repaired) == repaired, (source, target)
    assert treebank.tree_to_example(repaired)[0] == source, (source, target)
    assert treebank.example_to_tree(*treebank.tree_to_example(repaired)) == repaired


def test_repair_keeps_punctuation_words_under_punctuation_tags():
  source = "` Ms. Haag ' s guests ' plays , he said --"
  target = "(S NN NN NN NN NN NN NN NN NN NN NN )S"  # every word tagged NN
  assert treebank.example_to_tree(source, target) == (
      "(S (`` `) (NN Ms.) (NN Haag) ('' ') (NN s) (NN guests) (POS ') (NN plays) (, ,) "
      "(NN he) (NN said) (: --))")
  # And no other word under a punctuation tag; words without a slot get theirs too.
  assert treebank.example_to_tree("a b , c", "(S , . )S") == "(S (XX a) (XX b) (, ,) (XX c))"


def test_repair_normalises_labels_and_never_loses_a_word():
  assert treebank.example_to_tree(SENTENCE, "(ROOT (S (NP-SBJ DT -NONE- )NP(VP VBD)VP . )S)") == (
      "(S (NP (DT The) (XX dog)) (VP (VBD barked)) (. .))")


def test_repair_rejects_a_source_it_cannot_hold():
  with pytest.raises(ValueError, match="source sentence has no words"):
    treebank.example_to_tree("  ", "(S NN )S")
  with pytest.raises(ValueError, match="word '\\(' holds a bracket; write '\\(' as -LRB-"):
    treebank.example_to_tree("a ( b", "(S NN NN NN )S")


# --- EVALB scoring (t2t_lite/parsing/evalb.py), hand-worked against evalb.c's rules ---------------------

def counts(gold, predicted):
  """(matched, gold, test) brackets of one sentence, and its evalb status."""
  s = evalb.score_sentence(evalb.read(gold), evalb.read(predicted))
  return s.matched, s.gold, s.test, s.status


def test_gold_against_gold_scores_100(ptb_trees):
  trees = [str(tree) for tree in ptb_trees]
  scores = treebank.bracket_f1(trees, trees)
  assert (scores["precision"], scores["recall"], scores["f1"], scores["exact_match"]) == (
      100.0, 100.0, 100.0, 100.0)
  assert (scores["scored"], scores["skipped"], scores["rejected"]) == (3669, 0, 0)


def test_punctuation_is_deleted_by_each_trees_own_tags():
  # The final '.' moves inside the VP: without deleting punctuation the VP span would differ.
  assert counts(GOLD, "(S (NP (DT The) (NN dog)) (VP (VBD barked) (. .)))") == (3, 3, 3, 0)
  # A constituent over punctuation only spans no word once it is deleted: not a bracket.
  assert counts(GOLD, "(S (NP (DT The) (NN dog)) (VP (VBD barked)) (PRN (. .)))") == (
      3, 3, 3, 0)
  # '.' tagged NN is kept in the prediction, deleted in the gold tree: 3 words against 4,
  # evalb's "Length unmatch (3|4)": the sentence is rejected, not scored.
  sentence = evalb.score_sentence(
      evalb.read(GOLD), evalb.read("(S (NP (DT The) (NN dog)) (VP (VBD barked) (NN .)))"))
  assert (sentence.status, sentence.reason) == (evalb.ERROR, "Length unmatch (3|4)")


def test_a_sentence_with_other_words_is_skipped_and_counted_while_the_rest_is_scored():
  other = GOLD.replace("dog", "cat")
  scores = treebank.bracket_f1([GOLD, MISSING_GOLD, GOLD], [other, MISSING_PREDICTED, GOLD])
  # Sentence 1 is rejected ("Words unmatch (dog|cat)"); sentences 2 and 3: 6 + 3 matched of
  # 7 + 3 gold and 6 + 3 test brackets.
  assert (scores["sentences"], scores["scored"], scores["skipped"], scores["rejected"]) == (
      3, 2, 1, 1)
  assert (scores["matched"], scores["gold_brackets"], scores["test_brackets"]) == (9, 10, 9)
  assert scores["recall"] == pytest.approx(90.0)
  assert scores["exact_match"] == pytest.approx(50.0)
  sentences = evalb.evaluate([GOLD], [other])
  assert sentences[0].reason == "Words unmatch (dog|cat)"
  # A prediction with no word left (only punctuation) is evalb's "skip" (status 2).
  assert evalb.evaluate([GOLD], ["(S (. .))"])[0].status == evalb.SKIP


def test_unary_chains_count_as_a_multiset():
  gold = "(S (S (VP (VB Go))) (. .))"  # S[0,1] twice and VP[0,1].
  predicted = "(S (VP (VB Go)) (. .))"  # S[0,1] once and VP[0,1].
  assert counts(gold, predicted) == (2, 3, 2, 0)
  scores = treebank.bracket_f1([gold], [predicted])
  assert scores["precision"] == 100.0
  assert scores["recall"] == pytest.approx(200 / 3)
  assert scores["f1"] == pytest.approx(80.0)
  assert treebank.bracket_f1([predicted], [gold])["precision"] == pytest.approx(200 / 3)


MISSING_GOLD = ("(S (NP (DT The) (JJ old) (NN dog)) (VP (VBD saw) (NP (NP (DT the) (NN cat)) "
                "(PP (IN in) (NP (DT the) (NN yard))))) (. .))")
# Misses NP[4,9] "the cat in the yard": 6 of the 7 gold brackets, nothing extra.
MISSING_PREDICTED = ("(S (NP (DT The) (JJ old) (NN dog)) (VP (VBD saw) (NP (DT the) (NN cat)) "
                     "(PP (IN in) (NP (DT the) (NN yard)))) (. .))")


def test_a_missing_bracket_lowers_recall_only():
  assert counts(MISSING_GOLD, MISSING_PREDICTED) == (6, 7, 6, 0)
  scores = treebank.bracket_f1([MISSING_GOLD], [MISSING_PREDICTED])
  assert scores["precision"] == 100.0
  assert scores["recall"] == pytest.approx(600 / 7)  # 85.714...
  assert scores["f1"] == pytest.approx(1200 / 13)  # 2PR/(P+R) = 92.307...


def test_corpus_scores_are_micro_averaged():
  scores = treebank.bracket_f1([MISSING_GOLD, "(S (S (VP (VB Go))) (. .))"],
                              [MISSING_PREDICTED, "(S (VP (VB Go)) (. .))"])
  # matched 6 + 2, gold 7 + 3, predicted 6 + 2 (a macro average would give recall 76.19).
  assert scores["precision"] == 100.0
  assert scores["recall"] == pytest.approx(80.0)
  assert scores["f1"] == pytest.approx(800 / 9)


def test_advp_and_prt_are_the_same_label_but_advp_bar_prt_is_a_label_of_its_own():
  gold = "(S (NP (PRP He)) (VP (VBD gave) (PRT (RP up))) (. .))"
  assert counts(gold, gold.replace("(PRT", "(ADVP")) == (4, 4, 4, 0)
  assert counts(gold, gold.replace("(PRT", "(NP")) == (3, 4, 4, 0)
  assert treebank.bracket_f1([gold], [gold.replace("(PRT", "(NP")])["f1"] == pytest.approx(75.0)
  # evalb cuts labels at '-' and '=' only: ADVP|PRT matches neither ADVP nor PRT.
  back = "(S (NP (PRP He)) (VP (VBD came) (ADVP (RB back))) (. .))"
  assert counts(back, back.replace("(ADVP", "(ADVP|PRT")) == (3, 4, 4, 0)
  assert counts(back.replace("(ADVP", "(ADVP|PRT"), back.replace("(ADVP", "(ADVP|PRT")) == (
      4, 4, 4, 0)
  assert counts(back.replace("(ADVP", "(ADVP-DIR=2"), back) == (4, 4, 4, 0)


def test_wrappers_count_as_evalb_counts_them():
  plain = "(S (NP (PRP He)) (VP (VBD left)) (. .))"
  # The treebank's empty-labelled wrapper and ROOT are brackets over the sentence (a free match
  # when both trees have it); TOP is a DELETE_LABEL; function tags are cut.
  assert counts("( (S (NP-SBJ (PRP He)) (VP (VBD left)) (. .)) )", plain) == (3, 4, 3, 0)
  assert counts("(ROOT (S (NP (PRP He)) (VP (VBD left)) (. .)))", plain) == (3, 4, 3, 0)
  assert counts("(TOP (S (NP (PRP He)) (VP (VBD left)) (. .)))", plain) == (3, 3, 3, 0)
  assert counts(f"( {plain} )", f"( {plain} )") == (4, 4, 4, 0)
  # The empty wrapper over several constituents is one bracket "" over the two words.
  assert counts("( (NP (PRP He)) (VP (VBD left)) (. .) )", plain) == (2, 3, 3, 0)


def test_evalb_report_has_evalbs_layout():
  sentences = evalb.evaluate([MISSING_GOLD, GOLD], [MISSING_PREDICTED, GOLD.replace("dog", "cat")])
  lines = evalb.report(sentences).splitlines()
  assert lines[0].startswith("  Sent.                        Matched  Bracket")
  assert lines[3] == (
      "   1   10    0   85.71 100.00     6      7    6      0      9     9   100.00")
  assert lines[4] == "   2    4    1    0.00   0.00     0      0    0      0      0     0     0.00"
  assert "Number of Error sentence  =      1" in lines
  assert "Bracketing FMeasure       =  92.31" in lines


def test_malformed_or_missing_trees_are_one_line_errors():
  with pytest.raises(treebank.TreeError, match="^pred.txt:2: unbalanced tree: 1 bracket"):
    treebank.bracket_f1([GOLD, GOLD], [GOLD, GOLD[:-1]], "gold.txt", "pred.txt")
  with pytest.raises(treebank.TreeError, match="^pred.txt:1: unbalanced tree: '\\)'"):
    treebank.bracket_f1([GOLD], [GOLD + ")"], "gold.txt", "pred.txt")
  with pytest.raises(treebank.TreeError,
                     match="pred.txt has 1 trees but gold.txt has 2: tree 2 of gold.txt"):
    treebank.bracket_f1([GOLD, GOLD], [GOLD], "gold.txt", "pred.txt")


# --- The wsj_parsing problem ----------------------------------------------------------------------

def test_wsj_parsing_is_registered_with_the_papers_settings():
  import t2t_lite
  problem = t2t_lite.get_problem("wsj_parsing")
  assert (problem.metric, problem.vocab_type, problem.target_tags) == (
      "bracket_f1", "words", "all")
  from t2t_lite.decode.translation import DecodeSettings
  assert DecodeSettings.resolve(problem) == DecodeSettings(beam_size=21, alpha=0.3,
                                                           extra_length=300)
  assert treebank.tree_to_example(GOLD, tags=problem.target_tags) == (SENTENCE, "(S (NP DT NN )NP (VP VBD )VP . )S")
  assert problem.example_to_tree(SENTENCE, "(S (NP DT NN") == (
      "(S (NP (DT The) (NN dog)) (XX barked) (. .))")
  word_slots = t2t_lite.get_problem("wsj_parsing", target_tags="words")
  assert treebank.tree_to_example(GOLD, tags=word_slots.target_tags) == (
      SENTENCE, "(S (NP The dog )NP (VP barked )VP . )S")
  assert word_slots.example_to_tree(SENTENCE, "(S (NP The dog") == (
      "(S (NP (XX The) (XX dog)) (XX barked) (. .))")
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
  from t2t_lite.data.problem_base import ProblemError
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
  (tmp_path / "wsj_0003.mrg").write_text("\n")
  with pytest.raises(ProblemError, match=r"wsj_0003.mrg:1: the file holds no trees"):
    WsjParsing().raw_pairs("train", str(tmp_path)).__next__()


def test_evalb_command_line_errors_name_the_file_and_line(tmp_path):
  import subprocess
  import sys
  gold, test = tmp_path / "gold.mrg", tmp_path / "test.txt"
  gold.write_text(f"( {GOLD} )\n( {GOLD}\n)\n")
  test.write_text(f"( {GOLD} )\n")

  def run(*args):
    return subprocess.run([sys.executable, "-m", "t2t_lite.parsing.evalb", *map(str, args)],
                          capture_output=True, text=True)

  result = run(gold, test)  # fewer predictions than gold trees
  assert result.returncode == 2 and result.stderr.count("\n") == 1
  assert f"{test} has 1 trees but {gold} has 2: tree 2 of {gold} has no partner" in result.stderr
  (tmp_path / "bad.mrg").write_text(f"( {GOLD} )\n( {GOLD}\n")
  result = run(tmp_path / "bad.mrg", test)
  assert result.returncode == 2 and "bad.mrg:2: unbalanced tree" in result.stderr
  (tmp_path / "empty.mrg").write_text("")
  assert "empty.mrg:1: the file holds no trees" in run(tmp_path / "empty.mrg", test).stderr
  test.write_text(f"( {GOLD} )\n\n")  # an empty prediction line: skipped and counted
  result = run(gold, test, "--report", tmp_path / "report.txt")
  assert result.returncode == 0
  assert '"scored": 1, "skipped": 1, "rejected": 0' in result.stdout
  assert "Number of Skip  sentence  =      1" in (tmp_path / "report.txt").read_text()


@pytest.fixture(scope="module")
def wsj_data(ptb_dir, tmp_path_factory):
  """(problem, data_dir) of wsj_parsing with every POS tag in the targets, prepared once."""
  from t2t_lite.problems.wsj_parsing import WsjParsing
  problem = WsjParsing(target_tags="all")
  data_dir = str(tmp_path_factory.mktemp("wsj_parsing"))
  return problem, data_dir, problem.prepare(data_dir, str(ptb_dir))


def test_wsj_parsing_prepares_a_word_vocabulary_of_the_ptb_sample(wsj_data):
  problem, data_dir, stats = wsj_data
  assert {split: stats[split]["examples"] for split in stats} == {
      "train": 2925, "dev": 406, "test": 338}  # 3669 trees, none dropped.
  assert all(stats[split]["empty"] == 0 for split in stats)
  tok = problem.tokenizer(data_dir)
  vocab = problem.read_vocab(data_dir)
  # 3 reserved + 207 target symbols + 4,576 words seen twice or more + 14 unknown-word classes
  assert tok.vocab_size == 4800
  assert vocab["punctuation_words"]["'"] == ["''", "POS"] and vocab["punctuation_words"][","] == [","]
  pairs = problem.text_pairs("test", data_dir)
  assert len(pairs) == 338
  for source, target in pairs:
    assert len(tok.encode(source)) == len(source.split())  # one id per word
    assert tok.decode(tok.encode(target)) == target or "<unk" in tok.decode(tok.encode(target))


def test_unknown_words_get_their_shape_class_in_python_and_in_graph():
  from t2t_lite.problems.wsj_parsing import ParsingTokenizer, UNKNOWN_WORD_CLASSES
  tok = ParsingTokenizer(["(S", "dog", "the"], UNKNOWN_WORD_CLASSES)
  text = ("the dog 1990 well-known Foo Analysts running jumped quickly dangerous requirement "
          "dealer cheapest privatize dogs tiny zzz")
  assert tok.decode(tok.encode(text)) == (
      "the dog <unk-digit> <unk-hyphen> <unk-capital> <unk-capital-s> <unk-ing> <unk-ed> "
      "<unk-ly> <unk-adjective> <unk-noun> <unk-er> <unk-est> <unk-verb> <unk-s> <unk-y> <unk>")
  assert tok.tokenize([text, "dog"], add_eos=True).to_list() == [
      tok.encode(text, add_eos=True), tok.encode("dog", add_eos=True)]


def _constraint_rejections(constraint, tok, pairs):
  """Gold targets fed through the constraint: the pairs where it forbids a gold token."""
  import numpy as np
  import tensorflow as tf
  sources = [tok.encode(s, add_eos=True) for s, _ in pairs]
  targets = [tok.encode(t, add_eos=True) for _, t in pairs]
  inputs = np.zeros([len(pairs), max(map(len, sources))], np.int32)
  outputs = np.zeros([len(pairs), max(map(len, targets))], np.int32)
  for i, (source, target) in enumerate(zip(sources, targets)):
    inputs[i, :len(source)], outputs[i, :len(target)] = source, target
  state = constraint.initial_state(inputs, [len(s) + 300 for s in sources])
  previous = tf.zeros([len(pairs)], tf.int32)
  rejected = set()
  for index in range(outputs.shape[1]):
    bias, state = constraint.step(previous, tf.constant(index), state)
    gold_bias = tf.gather(bias, outputs[:, index], batch_dims=1).numpy()
    rejected |= {i for i in np.flatnonzero(gold_bias < 0) if outputs[i, index] != 0}
    previous = tf.constant(outputs[:, index])
  return rejected


def test_the_tree_constraint_allows_every_gold_target(wsj_data):
  problem, data_dir, _ = wsj_data
  tok = problem.tokenizer(data_dir)
  pairs = [pair for pair in problem.text_pairs("dev", data_dir)[:150]
           if "<unk" not in tok.decode(tok.encode(pair[1]))]  # a label unseen in train
  assert len(pairs) >= 145
  assert _constraint_rejections(problem.decode_constraint(data_dir), tok, pairs) == set()


@pytest.fixture(scope="module")
def wsj_words_data(ptb_dir, tmp_path_factory):
  """(problem, data_dir) of wsj_parsing with target_tags="words", prepared once."""
  from t2t_lite.problems.wsj_parsing import WsjParsing
  problem = WsjParsing(target_tags="words")
  data_dir = str(tmp_path_factory.mktemp("wsj_words"))
  problem.prepare(data_dir, str(ptb_dir))
  return problem, data_dir


def test_with_word_slots_the_constraint_allows_every_gold_target_and_only_its_word(
    wsj_words_data):
  import numpy as np
  import tensorflow as tf
  problem, data_dir = wsj_words_data
  tok = problem.tokenizer(data_dir)
  vocab = problem.read_vocab(data_dir)
  assert vocab["target_tags"] == "words"
  assert set(vocab["tag"]) <= treebank.EVALB_DELETE_LABELS  # no POS tag but punctuation's
  assert vocab["punctuation_words"]["'"] == ["'", "''"]  # POS is the word itself
  constraint = problem.decode_constraint(data_dir)
  pairs = [pair for pair in problem.text_pairs("dev", data_dir)[:150]
           if all(t in tok.vocabulary for t in pair[1].split() if t.startswith(("(", ")")))]
  assert len(pairs) >= 145
  assert _constraint_rejections(constraint, tok, pairs) == set()
  # After "(S (NP", the one slot allowed for "The dog barked ." is the word "The" itself.
  inputs = np.array([tok.encode(SENTENCE, add_eos=True)], np.int32)
  state = constraint.initial_state(inputs, [50])
  for index, token in enumerate(["", "(S", "(NP"]):
    bias, state = constraint.step(tf.constant([tok.encode(token)[0] if token else 0]),
                                  tf.constant(index), state)
  allowed = set(np.flatnonzero(bias.numpy()[0] == 0))
  slots = {i for i in allowed if not tok.vocabulary[i].startswith(("(", ")"))}
  assert slots == {tok.encode("The")[0]}


def test_the_constraint_allows_at_most_six_opening_brackets_in_a_row(wsj_data):
  import numpy as np
  import tensorflow as tf
  from t2t_lite.parsing import tree_constraint
  problem, data_dir, _ = wsj_data
  tok = problem.tokenizer(data_dir)
  constraint = problem.decode_constraint(data_dir)
  inputs = np.array([tok.encode(SENTENCE, add_eos=True)], np.int32)
  state = constraint.initial_state(inputs, [100])
  opening = [i for i, w in enumerate(tok.vocabulary) if w.startswith("(")]
  tokens = ["", "(S"] + ["(NP"] * (tree_constraint.MAX_OPENS_IN_ROW - 1) + ["DT", "(NP"]
  may_open = []
  for index, token in enumerate(tokens):
    bias, state = constraint.step(tf.constant([tok.encode(token)[0] if token else 0]),
                                  tf.constant(index), state)
    may_open.append(bool((bias.numpy()[0][opening] == 0).any()))
  assert tree_constraint.MAX_OPENS_IN_ROW == 6
  # Allowed up to six in a row, not a seventh; a word starts a new row.
  assert may_open == [True] * 6 + [False, True, True]


@pytest.mark.parametrize("data", ["wsj_data", "wsj_words_data"])
def test_constrained_decoding_gives_trees_over_exactly_the_source_words(data, request):
  """Even an untrained model's outputs are trees over the source words that evalb scores."""
  import t2t_lite
  from t2t_lite.decode import translation
  from t2t_lite.parsing import evalb
  problem, data_dir = request.getfixturevalue(data)[:2]
  tok = problem.tokenizer(data_dir)
  hparams = t2t_lite.get_hparams("transformer_tiny").replace(max_length=256)
  model = t2t_lite.build_model(hparams, tok.vocab_size)
  translator = translation.Translator(model, tok, beam_size=2, alpha=0.3, extra_length=300,
                                   constraint=problem.decode_constraint(data_dir))
  pairs = problem.text_pairs("test", data_dir)[:24]
  outputs, _ = translator.translate([s for s, _ in pairs], batch_size=12)
  gold, predicted = [], []
  for (source, target), output in zip(pairs, outputs):
    tokens = output.split()
    assert sum(not t.startswith(("(", ")")) for t in tokens) == len(source.split()), output
    opened = []
    for t in tokens:  # brackets balance and close with their own label, under one root
      assert opened or t.startswith("(") and t is tokens[0], output
      if t.startswith("("):
        opened.append(t[1:])
      elif t.startswith(")"):
        assert opened.pop() == t[1:], output
    assert not opened, output
    # The constraint allows a word only the tags it had in train; where that is two
    # punctuation tags (' as POS or ''), the repair picks by context, as for every output.
    tree = problem.example_to_tree(source, output)
    assert treebank.parse_tree(tree).words() == source.split()
    if problem.target_tags == "words":  # each slot is its word, or a punctuation tag
      slots = [t for t in tokens if not t.startswith(("(", ")"))]
      assert all(slot in treebank.EVALB_DELETE_LABELS or slot == tok.decode(tok.encode(word))
                 for slot, word in zip(slots, source.split())), output
    gold.append(problem.example_to_tree(source, target, repair_punctuation=False))
    predicted.append(tree)
  scores = treebank.bracket_f1(gold, predicted)
  assert (scores["scored"], scores["rejected"], scores["skipped"]) == (24, 0, 0)
  assert all(s.status == evalb.OK for s in evalb.evaluate(gold, predicted))


def test_decode_cli_prints_evalb_scores_and_writes_evalbs_report(wsj_data, tmp_path):
  import json
  import subprocess
  import sys
  import tensorflow as tf
  import t2t_lite
  from t2t_lite.rundir.run_files import write_run_files
  problem, data_dir, _ = wsj_data
  hparams = t2t_lite.get_hparams("transformer_tiny").replace(
      max_length=256, beam_size=2, extra_length=60)
  model = t2t_lite.build_model(hparams, problem.tokenizer(data_dir).vocab_size)
  model_dir = str(tmp_path / "model")
  write_run_files(model_dir, hparams, {"problem": "wsj_parsing"}, data_dir)
  tf.train.Checkpoint(model=model).save(f"{model_dir}/ckpt")
  pairs = problem.text_pairs("test", data_dir)[:6]
  (tmp_path / "in.txt").write_text("".join(s + "\n" for s, _ in pairs))
  (tmp_path / "gold.txt").write_text("".join(
      treebank.example_to_tree(s, t, repair_punctuation=False) + "\n" for s, t in pairs))
  command = [sys.executable, "-m", "t2t_lite.bin.decode", "--model_dir", model_dir,
             "--input_file", str(tmp_path / "in.txt"), "--output_file", str(tmp_path / "out.txt"),
             "--no_progress"]
  result = subprocess.run(command + ["--reference_file", str(tmp_path / "gold.txt"),
                                     "--evalb_report", str(tmp_path / "report.txt")],
                          capture_output=True, text=True)
  assert result.returncode == 0, result.stderr
  scores = json.loads(result.stderr.strip().splitlines()[-1])
  assert (scores["bracket_scored"], scores["bracket_skipped"], scores["bracket_rejected"]) == (
      6, 0, 0)
  assert {"bracket_precision", "bracket_recall", "bracket_f1", "bracket_exact_match"} <= set(scores)
  report = (tmp_path / "report.txt").read_text().splitlines()
  assert report[1].startswith(" ID  Len.  Stat. Recal  Prec.")
  assert [line[:16] for line in report[3:9]] == [
      f"{i:4d}  {len(s.split()):3d}    0  " for i, (s, _) in enumerate(pairs, 1)]
  assert "Number of Valid sentence  =      6" in report
  result = subprocess.run(command + ["--evalb_report", str(tmp_path / "r.txt")],
                          capture_output=True, text=True)
  assert result.returncode == 2 and "--evalb_report needs --reference_file" in result.stderr


def test_a_run_decodes_with_the_problem_settings_its_data_was_prepared_with(wsj_words_data,
                                                                            tmp_path):
  import tensorflow as tf
  import t2t_lite
  from t2t_lite.decode import loading
  from t2t_lite.rundir import run_files
  problem, data_dir = wsj_words_data
  hparams = t2t_lite.get_hparams("transformer_tiny").replace(max_length=256)
  model = t2t_lite.build_model(hparams, problem.tokenizer(data_dir).vocab_size)
  model_dir = str(tmp_path / "model")
  run_files.write_run_files(model_dir, hparams, {"problem": "wsj_parsing"}, data_dir)
  tf.train.Checkpoint(model=model).save(f"{model_dir}/ckpt")
  loaded = loading.load(model_dir)
  assert loaded.problem.target_tags == "words"
  assert loaded.problem.example_to_tree("a b", "(S (NP a b )NP )S") == "(S (NP (XX a) (XX b)))"


@pytest.mark.parametrize("settings, message", [
    ("target_tag=words", "unknown setting 'target_tag' for problem wsj_parsing; did you mean "
                         "'target_tags'?"),
    ("target_tags=pos", "wsj_parsing: target_tags must be one of ('all', 'punctuation', "
                        "'words'), not 'pos'"),
    ("min_word_count=two", "problem setting min_word_count=two: expected a int"),
    ("target_tags", "problem setting 'target_tags' is not name=value"),
])
def test_bad_problem_settings_are_one_line_errors(settings, message, tmp_path):
  import subprocess
  import sys
  result = subprocess.run(
      [sys.executable, "-m", "t2t_lite.bin.datagen", "--problem=wsj_parsing",
       f"--data_dir={tmp_path}", f"--problem_settings={settings}"],
      capture_output=True, text=True)
  assert result.returncode == 2
  assert result.stderr.strip().splitlines()[-1] == f"t2t-lite-datagen: error: {message}"


@pytest.mark.parametrize("pointer", [False, True])
def test_the_exported_parser_answers_what_decode_prints_trees_and_the_same_f1(
    wsj_words_data, tmp_path, capsys, pointer):
  """One pipeline: decode prints trees over the sentences' own words, and TF Serving's loader
  (the TF1 session path, in a fresh process) answers the same trees; with the source pointer
  too, whose slots both read from the checkpoint."""
  import tensorflow as tf
  import t2t_lite
  from conftest import tf1_serve
  from t2t_lite.bin import decode as decode_cli
  from t2t_lite.decode import export
  from t2t_lite.rundir import run_files
  problem, data_dir = wsj_words_data
  hparams = t2t_lite.get_hparams("transformer_tiny").replace(max_length=256,
                                                            source_pointer=pointer)
  model_dir = str(tmp_path / "model")
  run_files.write_run_files(model_dir, hparams, {"problem": "wsj_parsing"}, data_dir)
  model = t2t_lite.build_model(hparams, problem.tokenizer(data_dir).vocab_size,
                               problem.source_slots(data_dir) if pointer else None)
  tf.train.Checkpoint(model=model).save(f"{model_dir}/ckpt")
  pairs = problem.text_pairs("test", data_dir)[:12]
  sources = [s for s, _ in pairs]
  (tmp_path / "in.txt").write_text("".join(s + "\n" for s in sources))
  settings = ["--beam_size=2", "--alpha=0.3", "--extra_length=100"]
  assert decode_cli.main(["--model_dir", model_dir, "--input_file", str(tmp_path / "in.txt"),
                          "--no_progress", *settings]) == 0
  decoded = capsys.readouterr().out.splitlines()
  path = export.export_model_dir(model_dir, str(tmp_path / "export"), beam_size=2, alpha=0.3,
                                 extra_length=100)
  served = tf1_serve(path, "serving_default", sources)["outputs"]  # TF Serving's loader
  assert served == decoded
  for source, tree in zip(sources, decoded):
    assert treebank.parse_tree(tree).words() == source.split(), tree
  references = [t for _, t in pairs]
  assert problem.score(sources, served, references) == problem.score(sources, decoded,
                                                                      references)
  assert problem.score(sources, decoded, references)["bracket_scored"] == 12


_DOG = "The Dog barked at Rex ."


@pytest.mark.parametrize("tags, target, source", [
    ("all", "(S (NP DT NN )NP (VP VBD (PP IN (NP NNP )NP )PP )VP . )S", _DOG),
    ("words", "(S (NP The <unk-capital> )NP (VP barked (PP at (NP Rex )NP )PP )VP . )S", _DOG),
    ("punctuation", "(S (NP XX XX )NP (VP XX (PP XX (NP XX )NP )PP )VP , )S", _DOG),
    # A word tagged as punctuation, and "'" closing a "`" quote or a possessive (by context).
    ("punctuation", "(S `` , '' , (NP XX )NP XX XX (VP XX )VP . )S",
     "` Hi ' , he ' s said ."),
    ("punctuation", "(S (NP XX )NP (VP XX )VP XX '' XX ` XX ' ' . )S",
     "he said ' '' so ` yes ' ' ."),
])
def test_the_in_graph_trees_are_the_repaired_trees_of_constrained_outputs(tags, target, source):
  import tensorflow as tf
  from t2t_lite.parsing import tree_output
  trees = tree_output.tree_output_fn(tags)(tf.constant([source]), tf.constant([[target]]))
  expected = treebank.example_to_tree(
      source, treebank.slots_to_tags(target) if tags == "words" else target)
  assert trees.numpy()[0, 0].decode() == expected


def test_a_parser_trains_with_the_source_pointer_and_its_run_keeps_the_slots(wsj_words_data,
                                                                           tmp_path):
  """t2t-lite-train's path: the trainer sets the problem's slots, the checkpoint keeps them,
  and decoding's loader reads them back without the problem's help."""
  import numpy as np
  import t2t_lite
  from t2t_lite.decode import loading
  from t2t_lite.train import trainer
  problem, data_dir = wsj_words_data
  hparams = t2t_lite.get_hparams("transformer_tiny", "source_pointer=true,max_length=256")
  model_dir = str(tmp_path / "model")
  # One step writes the checkpoint; without XLA, whose compilation (the default where the
  # step computes in float32) would cost more than the step and has nothing to do with slots.
  trainer.train(problem, hparams, data_dir, trainer.TrainConfig(
      model_dir=model_dir, train_steps=1, eval_steps=0, log_every=1, xla=False),
      log=lambda *_: None)
  slots = loading.load(model_dir, precision="none").model.source_pointer.slots.numpy()
  expected = np.zeros_like(slots)
  expected[problem.source_slots(data_dir)] = 1.0
  np.testing.assert_array_equal(slots, expected)
  words = problem.tokenizer(data_dir).encode(problem.text_pairs("dev", data_dir)[0][0])
  assert all(slots[i] == 1.0 for i in words if i > 1)  # every source word has a slot id
  assert slots[:2].sum() == 0  # padding and EOS place nothing
