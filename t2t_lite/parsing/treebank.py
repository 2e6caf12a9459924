"""Constituency trees: Penn Treebank reading, linearization, repair and EVALB bracket scoring.

Standard library only (no TensorFlow here), so it serves notebooks and scoring scripts too.

Normalisation (applied to every tree that is read, gold or predicted; idempotent):
  * the treebank's outer wrapper `( (S ...) )`, `(TOP ...)` or `(ROOT ...)` around ONE tree is
    removed, so the root is the sentence's real top constituent (usually S). A wrapper around
    several constituents is kept and labelled TOP (EVALB deletes TOP, so it is never scored);
  * empty elements (POS tag -NONE-) are removed, and every constituent left with no words;
  * function tags and co-indices are stripped from every label: NP-SBJ-1 -> NP, PP-LOC=2 -> PP,
    and of an ambiguous label the first choice is kept: ADVP|PRT -> ADVP. Labels that begin with
    '-' are kept whole (-LRB-, -RRB-, -NONE-);
  * unary chains (S (VP ...)) are kept; no label is collapsed.
  A normalised tree is printed on one line: `(S (NP (NNP Ms.) (NNP Haag)) (VP (VBZ plays)) (. .))`.

Linearization (Vinyals & Kaiser et al. 2015, "Grammar as a Foreign Language", with one change):
  source = the words, space-separated: "Ms. Haag plays ."
  target = the tree without its words, opening brackets "(LABEL", closing brackets ")LABEL"
           carrying the label, and each word replaced by its POS tag:
           "(S (NP NNP NNP )NP (VP VBZ )VP . )S"
  GAFL replaces every POS tag by XX; we keep the tags, so that tree -> (source, target) -> tree
  gives back the normalised tree EXACTLY (POS tags included) and EVALB, which decides what is
  punctuation from the POS tags, can score the prediction as it is. Every target token that is
  not an opening or a closing bracket is one word slot; an "XX" slot (GAFL style) works too.
  tree_to_example(tags="words") writes each word itself in its slot (punctuation keeps its tag),
  "(S (NP Ms. Haag )NP (VP plays )VP . )S"; slots_to_tags reads such a target back as XX tags.

Repair (`example_to_tree`): any target string becomes a well-formed, normalised tree over
  exactly the source words, in order. A closing bracket closes the innermost open constituent
  whatever its label (the opening label wins); a closing bracket with nothing open is dropped;
  constituents still open at the end are closed; constituents holding no word are removed; word
  slots beyond the number of words are dropped; words left without a slot are attached, tagged
  XX, to the end of the root constituent; several (or no) top-level constituents are wrapped in
  an S. Labels and tags are normalised like the treebank's; a bare "(" is ignored; a slot tagged
  -NONE- (or nothing) gets XX, so that no word is lost; brackets glued to other text are split
  off ("(NP)NP" reads as "(NP )NP").

Scoring (`bracket_f1`): EVALB with COLLINS.prm, as t2t_lite/parsing/evalb.py implements it: each
  tree string is read as evalb reads it, NOT normalised first, so that the counts are evalb's on
  the same two files: a `( (S ...) )` or ROOT wrapper is a bracket (TOP is deleted), ADVP|PRT is
  one label, and punctuation is deleted by each tree's own tags. A sentence evalb would reject
  (different words, or different counts after deleting punctuation) or skip (no predicted words)
  is counted in "rejected" / "skipped" and the rest is scored. Deliberate differences from the
  evalb program: no MAX_ERROR stop, no 200-word / 200-bracket / 5,000-byte limits
  (`over_evalb_limits` counts the sentences evalb could not take), malformed trees are a
  one-line error naming file and line (see evalb.py).
  Repaired outputs keep punctuation words under punctuation tags (PUNCTUATION_TAGS), so that
  evalb scores them.
"""
import functools
import re

from t2t_lite.parsing import evalb
from t2t_lite.parsing.evalb import TreeError  # noqa: F401  (raised here too)

# The POS tag given to a word that a (repaired) model output left without a slot.
UNKNOWN_TAG = "XX"
# Label of the constituent wrapping several top-level pieces of a repaired output.
DEFAULT_ROOT_LABEL = "S"

_WRAPPER_LABELS = ("", "TOP", "ROOT")
_EMPTY_TAG = "-NONE-"
EVALB_DELETE_LABELS = evalb.DELETE_LABELS  # COLLINS.prm: TOP, -NONE- and punctuation tags
# The tag a repaired output gives these words whatever the model said (the treebank's only tag
# for them in the PTB sample), and no other word gets a punctuation tag: EVALB deletes words by
# their punctuation tags and rejects a sentence whose two trees then keep different words.
# "'" is a possessive (POS) or a closing single quote (''): see _apostrophe_tags.
PUNCTUATION_TAGS = {",": ",", ".": ".", "?": ".", "!": ".", "``": "``", "`": "``", "''": "''",
                    "--": ":", "-": ":", ";": ":", ":": ":", "...": ":"}

_TOKEN_RE = re.compile(r"\(([^\s()]*)|(\))|([^\s()]+)")  # "(LABEL", ")" or a word.
_FUNCTION_TAG_RE = re.compile(r"[-=|]")
# A model output: "(LABEL", ")LABEL" (the label is ignored) or a word slot; brackets inside a
# whitespace-separated piece split it ("(NP)NP" = "(NP" ")NP").
_TARGET_TOKEN_RE = re.compile(r"\(([^\s()]*)|(\))[^\s()]*|([^\s()]+)")


class Tree:
  """A constituent: `label` and `children` (Trees), or a preterminal: `tag` and one word (str)."""
  __slots__ = ("label", "children")

  def __init__(self, label, children):
    self.label = label
    self.children = children

  @property
  def is_preterminal(self):
    return len(self.children) == 1 and isinstance(self.children[0], str)

  def words(self):
    return [event[2] for event in _events(self) if event[0] == "leaf"]

  def __str__(self):
    return tree_to_string(self)

  def __repr__(self):
    return f"Tree({tree_to_string(self)!r})"


@functools.lru_cache(maxsize=4096)
def strip_label(label):
  """NP-SBJ-1 -> NP, PP-LOC=2 -> PP, ADVP|PRT -> ADVP; -LRB-, -NONE- and '' are kept."""
  if label.startswith("-"):
    return label
  cut = _FUNCTION_TAG_RE.search(label)
  return label[:cut.start()] if cut else label


def parse_trees(text, filename="<string>"):
  """Reads every bracketed tree in `text` (an .mrg file's content); returns normalised Trees.

  Raises TreeError naming `filename` and the line of the first problem: an unmatched ')', an
  unclosed '(', a word outside any bracket, a bracket with no content, a bracket holding two
  words or a word beside constituents, or a tree that holds only empty elements.
  """

  def fail(offset, message):
    raise TreeError(f"{filename}:{text.count(chr(10), 0, offset) + 1}: {message}")

  trees = []
  # Each open bracket: [label, kept children, offset of its '(', raw child count, holds a word].
  stack = []
  for match in _TOKEN_RE.finditer(text):
    label, close, word = match.groups()
    if label is not None:  # "(NP": the label touches its '('; "( (S" has the empty label.
      stack.append([label, [], match.start(), 0, False])
    elif close is not None:
      if not stack:
        fail(match.start(), "unmatched ')' outside any tree")
      label, children, start, raw_count, has_word = stack.pop()
      if raw_count == 0:
        fail(start, f"empty bracket ({label})")
      if has_word and raw_count > 1:
        fail(start, f"bracket ({label} ...) holds a word beside other content "
             "(a preterminal holds exactly one word)")
      if has_word and not label:
        fail(start, f"word {children[0]!r} has no POS tag")
      node = _normalized_node(label, children, has_word)
      if stack:
        stack[-1][3] += 1
        if node is not None:
          stack[-1][1].append(node)
      elif node is None:
        fail(start, "tree holds no words (only empty elements -NONE-)")
      else:
        trees.append(_unwrapped(node))
    else:
      if not stack:
        fail(match.start(), f"text {word!r} outside any tree")
      top = stack[-1]
      top[1].append(word)
      top[3] += 1
      top[4] = True
  if stack:
    fail(stack[0][2], f"tree starting here is not closed by the end of the file "
         f"({len(stack)} '(' still open)")
  return trees


def _normalized_node(label, children, has_word):
  """The normalised Tree of a closed bracket, or None when it is (or holds only) empty elements."""
  if has_word:
    return None if label == _EMPTY_TAG else Tree(strip_label(label), children)
  if not children:
    return None  # Every child was an empty element.
  return Tree(strip_label(label), children)


def _unwrapped(node):
  """Removes the outer `( ... )` / TOP / ROOT around one tree; several trees get TOP."""
  while node.label in _WRAPPER_LABELS and not node.is_preterminal:
    if len(node.children) != 1:
      return Tree("TOP", node.children)
    node = node.children[0]
  return node


def parse_tree(tree_str, filename="<string>"):
  """One tree (with or without the treebank's outer `( ... )`) -> normalised Tree."""
  trees = parse_trees(tree_str, filename)
  if len(trees) != 1:
    raise TreeError(f"{filename}:1: expected one tree, found {len(trees)}")
  return trees[0]


def _events(tree):
  """Pre-order walk without recursion: ("open", label), ("leaf", tag, word), ("close", label)."""
  stack = [(tree, False)]
  while stack:
    node, closing = stack.pop()
    if closing:
      yield ("close", node.label)
    elif len(node.children) == 1 and isinstance(node.children[0], str):
      yield ("leaf", node.label, node.children[0])
    else:
      yield ("open", node.label)
      stack.append((node, True))
      stack.extend((child, False) for child in reversed(node.children))


def tree_to_string(tree):
  """`(S (NP (NNP Ms.) (NNP Haag)) (. .))`: one line, one space between siblings."""
  parts = []
  for event in _events(tree):
    if event[0] == "open":
      parts.append(f"({event[1]} ")
    elif event[0] == "leaf":
      parts.append(f"({event[1]} {event[2]}) ")
    else:
      parts[-1] = parts[-1].rstrip(" ")
      parts.append(") ")
  return "".join(parts).rstrip(" ")


TARGET_TAGS = ("all", "punctuation", "words")


def tree_to_example(tree_str, tags="all"):
  """Bracketed tree -> (source_text, target_text), after normalisation (see module doc).

  tags: "all" keeps every POS tag; "punctuation" writes XX for every tag but EVALB's
  punctuation tags (the only ones EVALB looks at), so the tree no longer round-trips its tags;
  "words" writes the word itself instead of XX: "(S (NP Ms. Haag )NP (VP plays )VP . )S", so
  that the decoder reads which word it is at (`slots_to_tags` turns such a target back).
  """
  if tags not in TARGET_TAGS:
    raise ValueError(f"tree_to_example: tags must be one of {TARGET_TAGS}, got {tags!r}")
  tree = parse_tree(tree_str)
  words, target = [], []
  for event in _events(tree):
    if event[0] == "open":
      target.append("(" + event[1])
    elif event[0] == "close":
      target.append(")" + event[1])
    else:
      keep = tags == "all" or event[1] in EVALB_DELETE_LABELS
      target.append(event[1] if keep else event[2] if tags == "words" else UNKNOWN_TAG)
      words.append(event[2])
  return " ".join(words), " ".join(target)


def slots_to_tags(target_text):
  """A target of tree_to_example(tags="words") -> the same with XX for every slot that is not
  a punctuation tag: "(S (NP Ms. Haag )NP . )S" -> "(S (NP XX XX )NP . )S"."""

  def tag(match):
    slot = match.group(3)
    if slot is None or slot in EVALB_DELETE_LABELS:
      return match.group(0)
    return UNKNOWN_TAG

  return _TARGET_TOKEN_RE.sub(tag, target_text)


def example_to_tree(source_text, target_text, repair_punctuation=True):
  """(words, linearized tree) -> bracketed tree string; repairs any target (see module doc).

  With repair_punctuation (for model outputs; not for gold targets), a word of PUNCTUATION_TAGS
  gets its tag there, "'" gets POS or '' by its context, and any other word tagged as
  punctuation gets XX.

  The result holds exactly the source words in order, each under one POS tag, is normalised
  (tree_to_string(parse_tree(result)) == result) and tree_to_example(result)[0] is the source's
  words.
  Raises ValueError when the source has no words or a word holds a bracket (the treebank
  writes them -LRB- / -RRB-), since no tree string could hold it.
  """
  words = source_text.split()
  if not words:
    raise ValueError("example_to_tree: the source sentence has no words")
  bad = [word for word in words if "(" in word or ")" in word]
  if bad:
    raise ValueError(f"example_to_tree: word {bad[0]!r} holds a bracket; write '(' as -LRB- and "
                     "')' as -RRB- as the treebank does")
  root = Tree(None, [])
  stack = [root]
  next_word = 0
  apostrophes = _apostrophe_tags(words) if repair_punctuation else {}
  for match in _TARGET_TOKEN_RE.finditer(target_text):
    opening, closing, slot = match.groups()
    if opening is not None:
      label = strip_label(opening)
      if label and label != _EMPTY_TAG:  # A bare '(' has no label: garbage.
        node = Tree(label, [])
        stack[-1].children.append(node)
        stack.append(node)
    elif closing is not None:
      if len(stack) > 1:
        _close(stack)
    elif next_word < len(words):
      tag = strip_label(slot)
      if not tag or tag == _EMPTY_TAG:
        tag = UNKNOWN_TAG  # -NONE- would make the scorer delete the word.
      if repair_punctuation:
        tag = apostrophes.get(next_word) or _punctuation_repaired(words[next_word], tag)
      stack[-1].children.append(Tree(tag, [words[next_word]]))
      next_word += 1
  while len(stack) > 1:
    _close(stack)
  if next_word < len(words):
    host = root
    if len(root.children) == 1 and not root.children[0].is_preterminal:
      host = root.children[0]
    host.children.extend(
        Tree(apostrophes.get(i) or _punctuation_repaired(words[i], UNKNOWN_TAG), [words[i]])
        for i in range(next_word, len(words)))
  if len(root.children) == 1:
    return tree_to_string(_unwrapped(root.children[0]))
  return tree_to_string(Tree(DEFAULT_ROOT_LABEL, root.children))


def _apostrophe_tags(words):
  """{index: tag} of each "'": '' when it closes a "`" opened before it in the sentence or
  precedes "''", else POS (the treebank's tags of all 68 "'" in the PTB sample)."""
  tags, open_quotes = {}, 0
  for i, word in enumerate(words):
    if word == "`":
      open_quotes += 1
    elif word == "'":
      closing = open_quotes > 0 or words[i + 1:i + 2] == ["''"]
      tags[i] = "''" if closing else "POS"
      open_quotes -= open_quotes > 0
  return tags


def _punctuation_repaired(word, tag):
  """The tag a repaired output gives `word` that the model tagged `tag` (see PUNCTUATION_TAGS)."""
  if word in PUNCTUATION_TAGS:
    return PUNCTUATION_TAGS[word]
  if tag in EVALB_DELETE_LABELS and word != "'":
    return UNKNOWN_TAG
  return tag


def _close(stack):
  """Pops the innermost open constituent; drops it from its parent when it holds no word."""
  node = stack.pop()
  if not node.children:
    stack[-1].children.pop()


def bracket_f1(gold_trees, predicted_trees, gold_name="<gold>", predicted_name="<predicted>"):
  """Corpus EVALB (COLLINS.prm) scores of two equally long lists of tree strings (evalb.py).

  Each tree is read as evalb reads it (no normalisation here: wrappers count, ADVP|PRT stays
  whole). A sentence evalb would reject (its trees keep different words after deleting each
  tree's punctuation) or skip (no predicted words) is counted, never raised.
  Returns {"precision", "recall", "f1", "exact_match"} in percent, micro-averaged over the scored
  sentences as evalb's "-- All --" block, and {"sentences", "scored", "skipped", "rejected",
  "over_evalb_limits", "matched", "gold_brackets", "test_brackets", "crossing",
  "tagging_accuracy"}. Lists of different lengths raise TreeError.
  """
  return evalb.totals(evalb.evaluate(gold_trees, predicted_trees, gold_name, predicted_name))
