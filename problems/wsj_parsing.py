"""`wsj_parsing`: constituency parsing of the WSJ Penn Treebank as translation (paper section 6.3).

Raw data: Penn Treebank `.mrg` files (bracketed trees, several per file) anywhere under raw_dir,
e.g. LDC99T42's `parsed/mrg/wsj/` (sections 00..24 in sub-folders) or NLTK's `treebank/combined`
sample. The treebank is licensed by the LDC and cannot be downloaded here.

Splits:
  * standard (WSJ): when the files are named wsj_SSxx.mrg (SS = section) and cover section 22,
    section 23 and at least one of 02-21: train = 02-21, dev = 22, test = 23; the other sections
    (00, 01, 24) are not used, as in the literature (their file count is logged);
  * otherwise (e.g. NLTK's sample, files wsj_0001..wsj_0199 of sections 00-01): files sorted by
    name, file i (0-based) goes to dev when i % 10 == 8, to test when i % 10 == 9, else to train
    (80 / 10 / 10 by file, deterministic, every file used).

Examples: source = the words, target = the linearized normalised tree with POS tags and labelled
closing brackets, "(S (NP NNP NNP )NP (VP VBZ )VP . )S" (see t2t_lite/parsing.py, which defines
the normalisation, the exact round trip, the repair of model outputs and the EVALB scorer).
Vocabulary: SentencePiece BPE of 16k shared by both sides. Metric: EVALB bracket F1 (percent).
Decoding: beam 21, alpha 0.3, output length up to input length + 300 (the paper's section 6.3).
"""
import logging
import os
import re

import tensorflow as tf

from t2t_lite import metrics, parsing
from t2t_lite.problem import Problem, ProblemError
from t2t_lite.registry import register_problem

logger = logging.getLogger(__name__)

_WSJ_FILE_RE = re.compile(r"wsj_(\d\d)\d\d\.mrg")
_STANDARD_SECTIONS = {"train": range(2, 22), "dev": (22,), "test": (23,)}
_HOW_TO_GET = ("the WSJ Penn Treebank (LDC99T42) is licensed and cannot be downloaded "
               "automatically: pass --raw_dir=<treebank>/parsed/mrg/wsj, or NLTK's free sample "
               "(`python -m nltk.downloader treebank`, then --raw_dir=<nltk_data>/corpora/"
               "treebank/combined)")


def find_mrg_files(raw_dir):
  """Every *.mrg file under raw_dir (recursively), sorted by path."""
  if not tf.io.gfile.isdir(raw_dir):
    raise ProblemError(f"wsj_parsing: raw_dir {raw_dir} does not exist; {_HOW_TO_GET}")
  paths = [os.path.join(root, name) for root, _, names in tf.io.gfile.walk(raw_dir)
           for name in names if name.endswith(".mrg")]
  if not paths:
    raise ProblemError(f"wsj_parsing: no .mrg files under raw_dir {raw_dir}; {_HOW_TO_GET}")
  return sorted(paths)


def split_files(paths):
  """{"train", "dev", "test"} -> sorted paths, by WSJ section or by the fallback rule above."""
  sections = {}
  for path in paths:
    match = _WSJ_FILE_RE.fullmatch(os.path.basename(path))
    if match:
      sections[path] = int(match.group(1))
  splits = {split: sorted(path for path, section in sections.items() if section in wanted)
            for split, wanted in _STANDARD_SECTIONS.items()}
  if len(sections) == len(paths) and all(splits.values()):
    unused = len(paths) - sum(len(files) for files in splits.values())
    if unused:
      logger.info("wsj_parsing: standard split (train 02-21, dev 22, test 23); %d files of "
                  "sections 00, 01 and 24 are not used", unused)
    return splits
  ordered = sorted(paths, key=lambda path: (os.path.basename(path), path))
  splits = {"train": [], "dev": [], "test": []}
  for i, path in enumerate(ordered):
    splits["dev" if i % 10 == 8 else "test" if i % 10 == 9 else "train"].append(path)
  return splits


def read_trees(path):
  """The normalised Trees of one .mrg file; a malformed tree raises ProblemError(file:line)."""
  with tf.io.gfile.GFile(path, "rb") as f:
    data = f.read()
  try:
    text = data.decode("utf-8")
  except UnicodeDecodeError:
    text = data.decode("latin-1")  # Some treebank releases are Latin-1; every byte decodes.
  try:
    return parsing.parse_trees(text, path)
  except parsing.TreeError as error:
    raise ProblemError(str(error)) from None


@register_problem("wsj_parsing")
class WsjParsing(Problem):
  """WSJ constituency parsing: words -> linearized tree, 16k shared BPE vocabulary."""
  name = "wsj_parsing"
  metric = "bracket_f1"
  beam_size = 21
  alpha = 0.3
  extra_length = 300
  vocab_type = "bpe"
  vocab_size = 16000

  def __init__(self, **overrides):
    super().__init__(**overrides)
    self._split_cache = {}  # raw_dir -> {split: [(source, target)]}; prepare reads train twice.

  def raw_pairs(self, split, raw_dir):
    """(words, linearized tree) of every tree of the split's files, in file and tree order."""
    if raw_dir not in self._split_cache:
      self._split_cache = {raw_dir: {}}
    cache = self._split_cache[raw_dir]
    if split not in cache:
      files = split_files(find_mrg_files(raw_dir))[split]
      cache[split] = [parsing.tree_to_example(str(tree))
                      for path in files for tree in read_trees(path)]
      logger.info("%s %s: %d trees from %d files", self.name, split, len(cache[split]),
                  len(files))
    yield from cache[split]

  # The parsing API (see t2t_lite/parsing.py).
  @staticmethod
  def tree_to_example(tree_str):
    """Bracketed tree -> (source_text, target_text), after the documented normalisation."""
    return parsing.tree_to_example(tree_str)

  @staticmethod
  def example_to_tree(source_text, target_text):
    """(words, linearized tree, possibly malformed model output) -> well-formed tree string."""
    return parsing.example_to_tree(source_text, target_text)

  @staticmethod
  def bracket_f1(gold_trees, predicted_trees):
    """EVALB (COLLINS.prm) {"precision", "recall", "f1"} in percent over lists of trees."""
    return parsing.bracket_f1(gold_trees, predicted_trees)

  def score(self, sources, hypotheses, references):
    """Bracket {"bracket_precision", "bracket_recall", "bracket_f1"} of decoded linearized trees
    (repaired into trees over their source words) against references: trees or linearized."""
    if len(hypotheses) != len(references):
      raise metrics.MetricError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    predicted = [parsing.example_to_tree(s, h) for s, h in zip(sources, hypotheses)]
    gold = [_reference_tree(s, r) for s, r in zip(sources, references)]
    f1 = parsing.bracket_f1(gold, predicted)
    return {"bracket_" + key: value for key, value in f1.items()}


def _reference_tree(source, reference):
  """A reference line: a bracketed tree over the source words as it is, else a linearized tree
  (repaired as outputs are)."""
  try:
    tree = parsing.parse_tree(reference)
  except parsing.TreeError:  # Not a bracketed tree: a linearized one.
    return parsing.example_to_tree(source, reference)
  if tree.words() != source.split():
    return parsing.example_to_tree(source, reference)
  return reference
