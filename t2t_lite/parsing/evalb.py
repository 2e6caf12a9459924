"""EVALB (Sekine & Collins 1997) with COLLINS.prm, in Python: the parsing scores people publish.

Standard library only. Each tree is read as evalb reads a line, from its text, without our
normalisation (t2t_lite/parsing/treebank.py); the rules, from evalb.c and COLLINS.prm:
  * a terminal is `(TAG word)`; a terminal whose TAG is a DELETE_LABEL (COLLINS.prm: TOP, -NONE-,
    and the punctuation tags , : `` '' .) is removed with its word, by EACH tree's own tags;
  * every other bracket is a constituent (label, start, end) over the remaining words. Its label
    is cut at the first '-' or '=' (NP-SBJ-1 -> NP); '|' is NOT a cut: ADVP|PRT stays ADVP|PRT,
    which matches neither ADVP nor PRT. A constituent left with no words, or labelled TOP,
    -NONE- or a punctuation tag after the cut, is not counted. Any other wrapper counts: the
    treebank's empty-labelled `( (S ...) )` and a ROOT wrapper are brackets over the sentence;
  * EQ_LABEL ADVP PRT: the two labels match each other; brackets match one-to-one (a multiset);
  * a test tree with no words left is skipped (evalb status 2); a sentence whose two trees have
    different numbers of words left (e.g. a comma tagged `,` in one and not in the other: "Length
    unmatch") or different words ("Words unmatch") is an error (status 1): it is not scored and
    counts as neither gold nor test brackets. The rest of the corpus is scored;
  * totals ("-- All --"): recall = matched / gold brackets, precision = matched / test
    brackets, F1, complete match = sentences whose gold, test and matched counts are equal, over
    the valid sentences; the "-- len<=40 --" block keeps sentences of at most 40 gold words
    (counting punctuation, not -NONE-).
Deliberate differences from the evalb program (which users will meet when cross-checking):
  * evalb exits without totals once its error count passes MAX_ERROR (10 in COLLINS.prm: on
    the 12th rejected sentence, `Error_count++ > Max_error`); here every sentence is scored or
    counted, never a stop;
  * evalb's fixed arrays hold 200 words and 200 brackets a sentence (more overruns them: a crash
    or wrong counts) and its lines 5,000 bytes (a longer line is read as two sentences); here
    there is no limit, and `over_evalb_limits` counts the sentences evalb could not take;
  * an unbalanced or otherwise malformed tree is a one-line TreeError naming the file and line
    (evalb reads on, or stops, depending on the damage);
  * where evalb prints `nan` for an F1 with no brackets, 0.0 here.
"""
import collections
import re
from typing import NamedTuple

from t2t_lite.errors import T2TLiteError

DELETE_LABELS = frozenset({"TOP", "-NONE-", ",", ":", "``", "''", "."})
EQUAL_LABELS = {"PRT": "ADVP"}  # EQ_LABEL ADVP PRT, mapped onto one name.
CUTOFF_LENGTH = 40
MAX_WORDS = 200  # evalb.c's MAX_WORD_IN_SENT
MAX_BRACKETS = 200  # evalb.c's MAX_BRACKET_IN_SENT
MAX_LINE_BYTES = 5000  # evalb.c's fgets buffer
OK, ERROR, SKIP = 0, 1, 2  # evalb's per-sentence status
_TOKEN_RE = re.compile(r"\(([^\s()]*)|(\))|([^\s()]+)")


class TreeError(T2TLiteError, ValueError):
  """A malformed tree (or a missing one). str() is one line: `file:line: what is wrong`."""


class Reading(NamedTuple):
  """One tree as evalb reads it."""
  terminals: list  # [(tag, word)] of the words kept (not DELETE_LABEL-tagged)
  brackets: list  # [(label, start, end)] counted: label cut, no deleted label, start < end
  length: int  # words but -NONE- (DELETE_LABEL_FOR_LENGTH): the len<=40 test
  raw_brackets: int  # every non-terminal bracket (evalb's array holds 200)


class Sentence(NamedTuple):
  """One line of evalb's per-sentence table."""
  status: int  # OK, ERROR or SKIP
  reason: str  # "" or evalb's message, e.g. "Length unmatch (9|8)"
  length: int
  matched: int
  gold: int
  test: int
  crossing: int
  words: int
  correct_tags: int
  over_limits: bool


def modify_label(label):
  """evalb's label cut: at the first '-' or '=' (NP-SBJ-1 -> NP); '|' is kept."""
  cut = re.search(r"[-=]", label)
  return label[:cut.start()] if cut else label


def read(tree_text, filename="<tree>", line=1):
  """evalb's reading of one tree (see the module doc) -> Reading; malformed -> TreeError.

  An empty text reads as a tree with no words (a test tree without words is skipped)."""
  def fail(message):
    raise TreeError(f"{filename}:{line}: {message}")

  tokens = _TOKEN_RE.findall(tree_text)
  terminals, brackets, stack = [], [], []
  length = raw = position = 0
  i = 0
  while i < len(tokens):
    label, close, word = tokens[i]
    if close:
      if not stack:
        fail("unbalanced tree: ')' with no open bracket")
      label, start = stack.pop()
      raw += 1
      label = modify_label(label)
      if start < position and label not in DELETE_LABELS:
        brackets.append((label, start, position))
      i += 1
    elif word:
      fail(f"word {word!r} outside a (TAG word) bracket")
    elif i + 2 < len(tokens) and tokens[i + 1][2] and tokens[i + 2][1]:  # (TAG word)
      word = tokens[i + 1][2]
      if label != "-NONE-":
        length += 1
      if label not in DELETE_LABELS:
        terminals.append((label, word))
        position += 1
      i += 3
    else:
      if i + 1 < len(tokens) and tokens[i + 1][2]:
        fail(f"bracket ({label} ...) holds a word beside other content")
      stack.append((label, position))
      i += 1
  if stack:
    fail(f"unbalanced tree: {len(stack)} bracket(s) not closed")
  return Reading(terminals, brackets, length, raw)


def _crossing(gold, test):
  """evalb's crossing count: test brackets that cross at least one gold bracket."""
  count = 0
  for _, ts, te in test:
    if any((gs < ts < ge < te) or (ts < gs < te < ge) for _, gs, ge in gold):
      count += 1
  return count


def score_sentence(gold, test):
  """Two Readings (gold, test) -> Sentence, with evalb's skip and error rules."""
  over = (max(len(gold.terminals), len(test.terminals)) > MAX_WORDS
          or max(gold.raw_brackets, test.raw_brackets) > MAX_BRACKETS)
  if not test.terminals:
    return Sentence(SKIP, "test tree has no words", gold.length, 0, 0, 0, 0, 0, 0, over)
  if len(gold.terminals) != len(test.terminals):
    return Sentence(ERROR, f"Length unmatch ({len(gold.terminals)}|{len(test.terminals)})",
                    gold.length, 0, 0, 0, 0, 0, 0, over)
  for (_, gold_word), (_, test_word) in zip(gold.terminals, test.terminals):
    if gold_word != test_word:
      return Sentence(ERROR, f"Words unmatch ({gold_word}|{test_word})", gold.length,
                      0, 0, 0, 0, 0, 0, over)
  gold_counts = collections.Counter((EQUAL_LABELS.get(l, l), s, e) for l, s, e in gold.brackets)
  test_counts = collections.Counter((EQUAL_LABELS.get(l, l), s, e) for l, s, e in test.brackets)
  matched = sum((gold_counts & test_counts).values())
  tags = sum(EQUAL_LABELS.get(g, g) == EQUAL_LABELS.get(t, t)
             for (g, _), (t, _) in zip(gold.terminals, test.terminals))
  return Sentence(OK, "", gold.length, matched, len(gold.brackets), len(test.brackets),
                  _crossing(gold.brackets, test.brackets), len(gold.terminals), tags, over)


def totals(sentences, max_length=None):
  """evalb's summary block over Sentences (those of at most max_length gold words if set)."""
  chosen = [s for s in sentences if max_length is None or s.length <= max_length]
  valid = [s for s in chosen if s.status == OK]
  matched, gold, test = (sum(s.matched for s in valid), sum(s.gold for s in valid),
                         sum(s.test for s in valid))
  recall = 100.0 * matched / gold if gold else 0.0
  precision = 100.0 * matched / test if test else 0.0
  f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
  exact = sum(s.gold == s.test == s.matched for s in valid)
  words = sum(s.words for s in valid)
  return {
      "precision": precision, "recall": recall, "f1": f1,
      "exact_match": 100.0 * exact / len(valid) if valid else 0.0,
      "sentences": len(chosen), "scored": len(valid),
      "skipped": len(chosen) - len(valid),
      "rejected": sum(s.status == ERROR for s in chosen),  # what evalb counts to MAX_ERROR
      "over_evalb_limits": sum(s.over_limits for s in chosen),
      "matched": matched, "gold_brackets": gold, "test_brackets": test,
      "crossing": sum(s.crossing for s in valid),
      "tagging_accuracy": 100.0 * sum(s.correct_tags for s in valid) / words if words else 0.0}


def evaluate(gold_trees, test_trees, gold_name="<gold>", test_name="<test>"):
  """Sentence-by-sentence evalb over two equally long lists of tree strings -> [Sentence].

  A list shorter than the other raises TreeError naming the first line without a partner.
  """
  gold_trees, test_trees = list(gold_trees), list(test_trees)
  if len(gold_trees) != len(test_trees):
    shorter = test_name if len(test_trees) < len(gold_trees) else gold_name
    longer = gold_name if shorter == test_name else test_name
    raise TreeError(f"{shorter} has {min(len(gold_trees), len(test_trees))} trees but "
                    f"{longer} has {max(len(gold_trees), len(test_trees))}: tree "
                    f"{min(len(gold_trees), len(test_trees)) + 1} of {longer} has no partner")
  return [score_sentence(read(g, gold_name, i), read(t, test_name, i))
          for i, (g, t) in enumerate(zip(gold_trees, test_trees), 1)]


_HEADER = ("  Sent.                        Matched  Bracket   Cross        Correct Tag\n"
           " ID  Len.  Stat. Recal  Prec.  Bracket gold test Bracket Words  Tags Accracy\n"
           "============================================================================\n")
_RULE = "============================================================================\n"


def _sentence_line(number, s):
  recall = 100.0 * s.matched / s.gold if s.gold else 0.0
  precision = 100.0 * s.matched / s.test if s.test else 0.0
  accuracy = 100.0 * s.correct_tags / s.words if s.words else 0.0
  return (f"{number:4d}  {s.length:3d}    {s.status:d}  {recall:6.2f} {precision:6.2f}   "
          f"{s.matched:3d}    {s.gold:3d}  {s.test:3d}    {s.crossing:3d}   {s.words:4d}  "
          f"{s.correct_tags:4d}   {accuracy:6.2f}\n")


def _summary(title, sentences, max_length=None):
  t = totals(sentences, max_length)
  valid = t["scored"]
  crossing_free = sum(s.crossing == 0 for s in sentences if s.status == OK
                      and (max_length is None or s.length <= max_length))
  two_or_less = sum(s.crossing <= 2 for s in sentences if s.status == OK
                    and (max_length is None or s.length <= max_length))
  rows = [("Number of sentence", f"{t['sentences']:6d}"),
          ("Number of Error sentence", f"{t['rejected']:6d}"),
          ("Number of Skip  sentence", f"{t['skipped'] - t['rejected']:6d}"),
          ("Number of Valid sentence", f"{valid:6d}"),
          ("Bracketing Recall", f"{t['recall']:6.2f}"),
          ("Bracketing Precision", f"{t['precision']:6.2f}"),
          ("Bracketing FMeasure", f"{t['f1']:6.2f}"),
          ("Complete match", f"{t['exact_match']:6.2f}"),
          ("Average crossing", f"{t['crossing'] / valid if valid else 0.0:6.2f}"),
          ("No crossing", f"{100.0 * crossing_free / valid if valid else 0.0:6.2f}"),
          ("2 or less crossing", f"{100.0 * two_or_less / valid if valid else 0.0:6.2f}"),
          ("Tagging accuracy", f"{t['tagging_accuracy']:6.2f}")]
  return f"\n{title}\n" + "".join(f"{name:<26}= {value}\n" for name, value in rows)


def report(sentences):
  """evalb's printed output for Sentences: the per-sentence table, totals and summaries."""
  parts = [_HEADER] + [_sentence_line(i, s) for i, s in enumerate(sentences, 1)] + [_RULE]
  t = totals(sentences)
  if t["gold_brackets"] and t["test_brackets"]:
    parts.append(f"                {t['recall']:6.2f} {t['precision']:6.2f} {t['matched']:6d} "
                 f"{t['gold_brackets']:5d} {t['test_brackets']:5d}  {t['crossing']:5d}")
  correct = sum(s.correct_tags for s in sentences if s.status == OK)
  words = sum(s.words for s in sentences if s.status == OK)
  parts.append(f"  {words:5d} {correct:5d}   {t['tagging_accuracy']:6.2f}\n=== Summary ===\n")
  parts.append(_summary("-- All --", sentences))
  parts.append(_summary(f"-- len<={CUTOFF_LENGTH} --", sentences, CUTOFF_LENGTH))
  return "".join(parts)


def read_tree_file(path):
  """The trees of a file: one a line (evalb's format; an empty line is a tree without words), or
  for a `.mrg` file every top-level bracket, over as many lines as it takes. -> [str]."""
  with open(path, encoding="utf-8", errors="replace") as f:
    text = f.read()
  if not text.strip():
    raise TreeError(f"{path}:1: the file holds no trees")
  if not path.endswith(".mrg"):
    return text[:-1].split("\n") if text.endswith("\n") else text.split("\n")
  trees, depth, start, line, start_line = [], 0, 0, 1, 1
  for i, char in enumerate(text):
    if char == "\n":
      line += 1
    elif char == "(":
      if depth == 0:
        start, start_line = i, line
      depth += 1
    elif char == ")":
      depth -= 1
      if depth < 0:
        raise TreeError(f"{path}:{line}: unbalanced tree: ')' with no open bracket")
      if depth == 0:
        trees.append(text[start:i + 1])
  if depth:
    raise TreeError(f"{path}:{start_line}: unbalanced tree: {depth} bracket(s) not closed "
                    "by the end of the file")
  return trees


def main(argv=None):
  """python -m t2t_lite.parsing.evalb GOLD TEST [--report FILE]: as `evalb -p COLLINS.prm`."""
  import argparse
  import json
  import sys
  parser = argparse.ArgumentParser(prog="python -m t2t_lite.parsing.evalb",
                                   description=main.__doc__)
  parser.add_argument("gold", help="gold trees: one a line, or a .mrg file")
  parser.add_argument("test", help="test trees: one a line (an empty line is skipped)")
  parser.add_argument("--report", default=None, help="write evalb's per-sentence report here")
  args = parser.parse_args(argv)
  try:
    sentences = evaluate(read_tree_file(args.gold), read_tree_file(args.test),
                         args.gold, args.test)
  except (TreeError, OSError) as e:
    print(f"python -m t2t_lite.parsing.evalb: error: {e}", file=sys.stderr)
    return 2
  if args.report:
    with open(args.report, "w", encoding="utf-8") as f:
      f.write(report(sentences))
  print(json.dumps(totals(sentences)))
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
