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
closing brackets, "(S (NP NNP NNP )NP (VP VBZ )VP . )S" (see t2t_lite/parsing/treebank.py, which
defines the normalisation, the exact round trip, the repair of model outputs and the EVALB scorer).
Vocabulary (vocab_type):
  * "words" (the default): one id per target symbol ("(NP", ")NP", a POS tag) and per source word
    seen at least `min_word_count` times in train (at most vocab_size words, most frequent
    first); a rarer or unseen word is one of UNKNOWN_WORD_CLASSES by its shape (a digit, a
    hyphen, a capital, a suffix such as -ing, -ous or -tion), as unknown-word signatures in
    treebank parsers, or UNK. Written to data_dir/vocab.words.json with, for every word ever
    tagged as punctuation in train, the tags it had: `decode_constraint` uses them;
  * "bpe" / "unigram": SentencePiece of vocab_size shared by both sides (a 16k BPE is larger
    than the 3,000-sentence sample supports; no decoding constraint then).
Target tags (target_tags): "all" (the default) keeps every POS tag; "punctuation" writes XX for
every tag but EVALB's punctuation tags (, . : `` ''): EVALB scores no preterminal, but deletes
words by their punctuation tags, so those are all a scored tree needs; "words" writes the word
itself where
"punctuation" writes XX, "(S (NP Ms. Haag )NP (VP plays )VP . )S": the constraint forces each
such slot to be its source word, so the decoder always reads where in the sentence it is (with
XX or tag slots it must count them). With the source pointer (hparams source_pointer), which
tells the decoder where it is with any slots, "all" parses best: predicting the tags is
training signal that 3,000 trees lack (docs/parsing.md has the measured differences).
Decoding: `decode_constraint` makes every output a tree over exactly its source words (see
TreeConstraint). Metric: EVALB bracket F1 (percent). The paper decodes with beam 21, alpha 0.3,
output up to input + 300 (section 6.3); transformer_parsing sets those.
"""
import collections
import json
import logging
import os
import re

import numpy as np
import tensorflow as tf

from t2t_lite.data import data_files, scoring
from t2t_lite.data.problem_base import Problem, ProblemError
from t2t_lite.data.tokenizers import WordTokenizer
from t2t_lite.parsing import evalb, tree_constraint, tree_output, treebank
from t2t_lite.registry import register_problem

logger = logging.getLogger(__name__)

# (token, pattern): the first whose pattern matches a whole unknown word is its id. Suffixes
# that mark a part of speech, as the Berkeley parser's unknown-word signatures: a sixth of a
# sample sentence's words are unknown, and their tags (JJ or NN above all) were most errors.
UNKNOWN_WORD_CLASSES = (
    ("<unk-digit>", ".*[0-9].*"), ("<unk-hyphen>", ".*-.*"), ("<unk-capital-s>", "[A-Z].*s"),
    ("<unk-capital>", "[A-Z].*"), ("<unk-ing>", ".*ing"), ("<unk-ed>", ".*ed"),
    ("<unk-ly>", ".*ly"), ("<unk-adjective>", ".*(ous|less|ful|ive|ic|able|ible|al|ary)"),
    ("<unk-noun>", ".*(tion|sion|ment|ness|ity|ism|ance|ence|ship|ure)"),
    ("<unk-er>", ".*er"), ("<unk-est>", ".*est"), ("<unk-verb>", ".*(ize|ise|ify|ate)"),
    ("<unk-s>", ".*s"), ("<unk-y>", ".*y"))
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
    trees = treebank.parse_trees(text, path)
  except treebank.TreeError as error:
    raise ProblemError(str(error)) from None
  if not trees:  # An empty (or truncated-to-nothing) file: say so rather than drop it.
    raise ProblemError(f"{path}:1: the file holds no trees")
  return trees


class ParsingTokenizer(WordTokenizer):
  """A WordTokenizer whose unknown words get the id of their shape class (UNKNOWN_WORD_CLASSES)
  instead of UNK, in Python and in-graph alike."""

  def __init__(self, words, unknown_classes=()):
    self.unknown_classes = [(token, re.compile(pattern)) for token, pattern in unknown_classes]
    super().__init__(list(words) + [token for token, _ in unknown_classes])

  def __reduce__(self):  # Pickled as its constructor's arguments (see WordTokenizer).
    classes = [(token, pattern.pattern) for token, pattern in self.unknown_classes]
    _, (words,) = super().__reduce__()  # ... and the class tokens appended to them.
    return type(self), (words[:len(words) - len(classes)], classes)

  def encode(self, text, add_eos=False):
    ids = [self._ids[w] if w in self._ids else self.unknown_id(w) for w in text.split()]
    return ids + [1] if add_eos else ids

  def unknown_id(self, word):
    """The id of `word` as an unknown word: its class's, else UNK's."""
    for token, pattern in self.unknown_classes:
      if pattern.fullmatch(word):
        return self._ids[token]
    return self._ids["<unk>"]

  def _tokenize(self, strings, add_eos):
    ids = super()._tokenize(strings, add_eos)  # [B, (T)], unknown words = UNK
    words = tf.strings.split(strings)
    if add_eos:
      words = tf.concat([words, tf.fill([tf.shape(strings)[0], 1], "")], axis=1)

    def classify(flat_ids, flat_words):
      unknown = tf.fill(tf.shape(flat_ids), self._ids["<unk>"])
      for token, pattern in reversed(self.unknown_classes):  # the first match wins
        unknown = tf.where(tf.strings.regex_full_match(flat_words, pattern.pattern),
                           self._ids[token], unknown)
      return tf.where(tf.equal(flat_ids, self._ids["<unk>"]), unknown, flat_ids)

    return ids.with_flat_values(classify(ids.flat_values, words.flat_values))


@register_problem("wsj_parsing")
class WsjParsing(Problem):
  """WSJ constituency parsing: words -> linearized tree; word vocabulary; trees by construction."""
  name = "wsj_parsing"
  metric = "bracket_f1"
  selection_metric = "bracket_f1"
  beam_size = 21
  alpha = 0.3
  extra_length = 300
  vocab_type = "words"
  vocab_size = 50000  # Source words kept at most ("words"), or SentencePiece pieces.
  min_word_count = 2  # Rarer train words are UNK, so that the model learns UNK in training.
  target_tags = "all"  # Measured against "words" and "punctuation": docs/parsing.md.
  _SETTINGS = Problem._SETTINGS + ("min_word_count", "target_tags")
  _ALLOWED = dict(Problem._ALLOWED, vocab_type=("words", "bpe", "unigram"), min_word_count=1,
                  target_tags=treebank.TARGET_TAGS)

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
      cache[split] = [treebank.tree_to_example(str(tree), tags=self.target_tags)
                      for path in files for tree in read_trees(path)]
      logger.info("%s %s: %d trees from %d files", self.name, split, len(cache[split]),
                  len(files))
    yield from cache[split]

  # The vocabulary ("words": see the module doc; "bpe" / "unigram": the base class's).
  def _vocab_path(self, data_dir):
    if self.vocab_type != "words":
      return super()._vocab_path(data_dir)
    return data_files.vocab_path(data_dir, data_files.WORDS_VOCAB_FILE)

  def build_vocab(self, data_dir, raw_dir):
    if self.vocab_type != "words":
      return super().build_vocab(data_dir, raw_dir)
    symbols = {"open": set(), "close": set(), "tag": set()}
    counts = collections.Counter()
    word_tags = collections.defaultdict(set)
    copies = self.target_tags == "words"  # Slots that are not punctuation hold their word.
    for source, target in self.raw_pairs("train", raw_dir):
      words = iter(source.split())
      for token in target.split():
        kind = "open" if token.startswith("(") else "close" if token.startswith(")") else "tag"
        if kind == "tag":
          word = next(words)
          counts[word] += 1
          word_tags[word].add(token)
          if copies and token not in treebank.EVALB_DELETE_LABELS:
            continue  # The word itself, not a tag.
        symbols[kind].add(token)
    kept = [w for w, n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))
            if n >= self.min_word_count][:self.vocab_size]
    # The slots each word ever tagged as punctuation took: its tags ("words": the word itself
    # stands for its other tags).
    punctuation = {word: sorted(tags) for word, tags in word_tags.items()
                   if tags & treebank.EVALB_DELETE_LABELS}
    vocab = {"open": sorted(symbols["open"]), "close": sorted(symbols["close"]),
             "tag": sorted(symbols["tag"]), "words": kept,
             "word_counts": [counts[word] for word in kept], "punctuation_words": punctuation,
             "unknown_word_classes": [list(c) for c in UNKNOWN_WORD_CLASSES],
             "target_tags": self.target_tags}
    self._write_vocab(data_dir, vocab)

  def _write_vocab(self, data_dir, vocab):
    tf.io.gfile.makedirs(data_dir)
    with tf.io.gfile.GFile(self._vocab_path(data_dir), "w") as f:
      f.write(json.dumps(vocab, ensure_ascii=False, indent=0))

  def read_vocab(self, data_dir):
    """The "words" vocabulary file as a dict (see build_vocab)."""
    path = self._vocab_path(data_dir)
    if not tf.io.gfile.exists(path):
      raise ProblemError(f"{path} is missing: {self._how_to_prepare(data_dir)}")
    with tf.io.gfile.GFile(path) as f:
      return json.loads(f.read())

  def tokenizer(self, data_dir):
    if self.vocab_type != "words":
      return super().tokenizer(data_dir)
    if data_dir not in self._tokenizers:
      vocab = self.read_vocab(data_dir)
      symbols = self._symbols(vocab, data_dir)
      known = set(symbols)
      self._tokenizers[data_dir] = ParsingTokenizer(
          symbols + [word for word in vocab["words"] if word not in known],
          vocab.get("unknown_word_classes", ()))
    return self._tokenizers[data_dir]

  def _symbols(self, vocab, data_dir):
    """The vocabulary's symbols, its first ids after the reserved ones (its words follow)."""
    del data_dir  # A subclass's error names it.
    return vocab["open"] + vocab["close"] + vocab["tag"]

  def decode_constraint(self, data_dir):
    """The TreeConstraint of data_dir's (or model_dir's) vocabulary; None for SentencePiece."""
    if self.vocab_type != "words":
      return None
    return tree_constraint.TreeConstraint(self.read_vocab(data_dir), self.tokenizer(data_dir))

  @property
  def places_source_words(self):
    """With a vocabulary of words every slot places the next source word (hparams
    source_pointer); SentencePiece splits words over several tokens."""
    return self.vocab_type == "words"

  @property
  def has_word_classes(self):
    """A vocabulary of words gives every word an unknown-word class (hparams word_dropout)."""
    return self.vocab_type == "words"

  def word_classes(self, data_dir):
    """(class ids, counts), int32 [V] each: the id of each source word's unknown-word class
    (each other id, target symbols, punctuation, the classes, EOS, is its own) and how often
    train has the word (0 for the others): what word dropout replaces a word with, and how
    rarely."""
    vocab, tokenizer = self.read_vocab(data_dir), self.tokenizer(data_dir)
    if "word_counts" not in vocab:
      raise ProblemError(f"{self._vocab_path(data_dir)} was written without word counts (before "
                         f"word dropout): {self._how_to_prepare_again(data_dir)}")
    keep = set(vocab["open"] + vocab["close"] + vocab["tag"]) | set(vocab["punctuation_words"])
    class_ids = np.arange(tokenizer.vocab_size, dtype=np.int32)
    counts = np.zeros([tokenizer.vocab_size], np.int32)
    for word, count in zip(vocab["words"], vocab["word_counts"]):
      if word not in keep:
        word_id = tokenizer.encode(word)[0]
        class_ids[word_id], counts[word_id] = tokenizer.unknown_id(word), count
    return class_ids, counts

  def source_slots(self, data_dir):
    """The ids of the target tokens that place a source word: the tree constraint's slots."""
    return self.decode_constraint(data_dir).slot_ids

  def decode_output_fn(self, data_dir):
    """What decoding turns an output into, in the graph: a tree over the source's own words
    (tree_output.py); None for SentencePiece vocabularies, whose outputs are not constrained
    to be trees and stay linearized."""
    del data_dir  # The same for every vocabulary of words.
    return tree_output.tree_output_fn(self.target_tags) if self.vocab_type == "words" else None

  # The parsing API (see t2t_lite/parsing/treebank.py).
  def example_to_tree(self, source_text, target_text, repair_punctuation=True):
    """(words, linearized tree, possibly malformed model output) -> well-formed tree string;
    with target_tags="words" each word slot becomes an XX tag."""
    if self.target_tags == "words":
      target_text = treebank.slots_to_tags(target_text)
    return treebank.example_to_tree(source_text, target_text, repair_punctuation)

  @staticmethod
  def bracket_f1(gold_trees, predicted_trees):
    """EVALB (COLLINS.prm) {"precision", "recall", "f1"} in percent over lists of trees."""
    return treebank.bracket_f1(gold_trees, predicted_trees)

  def scored_trees(self, sources, hypotheses, references):
    """(gold trees, predicted trees), one string each, as EVALB is to read them: hypotheses
    (linearized trees) repaired into trees over their source words; references used as they
    are when they are trees over the source words (EVALB counts e.g. a `( (S ...) )`
    wrapper), else read as linearized trees."""
    if len(hypotheses) != len(references):
      raise scoring.MetricError(f"{len(hypotheses)} hypotheses but {len(references)} references")
    predicted = [self._as_tree(s, h, repair=True) for s, h in zip(sources, hypotheses)]
    return [self._as_tree(s, r, repair=False) for s, r in zip(sources, references)], predicted

  def _as_tree(self, source, text, repair):
    """A tree over the source's words as it is (decode's outputs, gold trees), else a
    linearized tree repaired into one."""
    try:
      tree = treebank.parse_tree(text)
    except treebank.TreeError:  # Not a bracketed tree: a linearized one.
      tree = None
    if tree is not None and tree.words() == source.split():
      return text
    return self.example_to_tree(source, text, repair_punctuation=repair)

  def score(self, sources, hypotheses, references):
    """EVALB's bracket scores ("bracket_precision", "bracket_recall", "bracket_f1", exact match,
    sentences scored / skipped) of decoded linearized trees, repaired into trees over their
    source words, against references (trees, or linearized trees)."""
    f1 = self.bracket_f1(*self.scored_trees(sources, hypotheses, references))
    return {"bracket_" + key: value for key, value in f1.items()}

  def evalb_report(self, sources, hypotheses, references):
    """EVALB's printed report (per-sentence table and summaries) of the hypotheses."""
    return evalb.report(evalb.evaluate(*self.scored_trees(sources, hypotheses, references)))
