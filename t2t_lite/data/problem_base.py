"""`Problem`: a named task that owns its data, vocabulary, input pipeline, metric and decoding.

Directories, as in tensor2tensor:
  raw_dir   raw inputs (downloads, TFDS data, treebank files); only `prepare` reads it.
  data_dir  what `prepare` builds once (t2t_lite/data/preparation.py) and everything else
            reads: the vocabulary, TFRecords, dev / test text and the manifest, named in
            t2t_lite/data/data_files.py.
Splits are "train", "dev" and "test" ("validation", "val" and "eval" mean "dev").

Public API:
  problem.prepare(data_dir, raw_dir=None, progress_seconds=10, workers=1) -> {split: stats}
      idempotent; what datagen runs. Logs pairs read, pairs/s and an ETA every progress_seconds;
      tokenizes in `workers` processes (datagen and train: one per core).
  problem.dataset(split, data_dir, hparams, training, ...) -> tf.data.Dataset of
      {"inputs": int32 [B, S], "targets": int32 [B, T]}, 0-padded, every sequence ending in EOS;
      each batch holds at most `batch_tokens` (default hparams.batch_size) tokens per side.
  problem.tokenizer(data_dir) -> encode(str) / decode(ids) / tokenize / detokenize (in-graph).
      Inputs are fed to the model as `tokenize(text, add_eos=True)`, exactly as cached here.
  problem.text_pairs(split, data_dir) -> [(source, target)]   (dev / test only)
  problem.score(sources, hypotheses, references) -> {name: value}   the problem's metric(s)
  problem.metric  "bleu" | "bracket_f1" | "accuracy" (what `score` reports, by name)

A subclass sets `name`, the class settings below, and implements `raw_pairs(split, raw_dir)`,
yielding (source, target) text pairs in a stable order (one per line of the raw files, so
pair i is line i), and `split_size` when it knows the count (for the ETA of progress lines).
Problems that do not learn a SentencePiece vocabulary override `build_vocab` and `tokenizer`;
`default_raw_dir` says where raw data goes when not given.

Nothing is dropped silently: pairs with an empty side are counted and logged at prepare time
(stored in the manifest, with their pair numbers), and `dataset` logs how many examples it
drops for being longer than hparams.max_length (see `count_overlong`).
"""
import difflib
import itertools
import json
import logging
import os

import tensorflow as tf

from t2t_lite.data import data_files, pipeline, preparation, scoring, tokenizers, word_dropout
from t2t_lite.data.preparation import SPLITS
from t2t_lite.errors import RunFailure, T2TLiteError, reason

logger = logging.getLogger(__name__)

_SPLIT_ALIASES = {"validation": "dev", "val": "dev", "eval": "dev"}


class ProblemError(T2TLiteError, ValueError):
  """Missing or bad data, or an unprepared data_dir. str() is one line."""


class DownloadError(ProblemError):
  """Raw data could not be downloaded (no network, a host down): the same command may work later,
  so the tools exit with the run-time status."""
  exit_status = 1


class Problem:
  """Base class; see the module docstring. Settings may be overridden per instance:
  `Multi30kEnDe(vocab_size=1000, vocab_sample_size=5000)`."""
  name = None  # The registered name, used in messages and the manifest.
  metric = "bleu"
  # What a run keeps its best model by (on decoded dev sentences): BLEU as the paper computed it.
  selection_metric = "paper_bleu"
  # Decoding defaults (section 6.1): beam size, length penalty alpha, max output = input +
  # extra_length; a span parser's bracket offset. hparams and flags override them:
  # decode/translation.py, DecodeSettings.resolve.
  beam_size = 4
  alpha = 0.6
  extra_length = 50
  bracket_offset = 0.0
  # Vocabulary: SentencePiece "bpe" or "unigram"; trained on source and target sides of the
  # first `vocab_sample_size` training pairs (None = all of them).
  vocab_type = "bpe"
  vocab_size = 8000
  vocab_sample_size = None
  train_shards = 1  # TFRecord files for the train split (more = more parallel workers).
  # Keep parsed examples in memory during one-pass reads (evaluation). Never for training: the
  # trainer checkpoints its input iterator, which would copy the whole cache into every
  # checkpoint (a multi30k_ende transformer_tiny checkpoint: see bench/checkpoint_size.py).
  cache_in_memory = True

  _SETTINGS = ("vocab_type", "vocab_size", "vocab_sample_size", "train_shards",
               "cache_in_memory")
  # What each setting may be, checked when a problem is made: the least value, or the values
  # allowed. (None, where a setting's default is None, is always allowed.)
  _ALLOWED = {"vocab_type": ("bpe", "unigram"), "vocab_size": 1, "vocab_sample_size": 1,
              "train_shards": 1}

  def __init__(self, **overrides):
    for key, value in overrides.items():
      if key not in self._SETTINGS:
        close = difflib.get_close_matches(key, self._SETTINGS, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ProblemError(f"unknown setting {key!r} for problem {self.name}{hint}")
      setattr(self, key, value)
    for key, allowed in self._ALLOWED.items():
      value = getattr(self, key)
      if isinstance(allowed, tuple) and value not in allowed:
        raise ProblemError(f"{self.name}: {key} must be one of {allowed}, not {value!r}")
      if not isinstance(allowed, tuple) and value is not None and not value >= allowed:
        raise ProblemError(f"{self.name}: {key} must be >= {allowed}, got {value}")
    self._tokenizers = {}

  @classmethod
  def parse_settings(cls, text):
    """"name=value,..." -> {name: value}, each value of its class default's type (a str when
    the default is None); unknown names are refused by the constructor."""
    settings = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
      key, sep, value = item.partition("=")
      if not sep:
        raise ProblemError(f"problem setting {item!r} is not name=value")
      default = getattr(cls, key.strip(), None)
      try:
        if isinstance(default, bool):
          value = {"true": True, "false": False}[value.strip().lower()]
        elif isinstance(default, (int, float)):
          value = type(default)(value)
      except (KeyError, ValueError):
        raise ProblemError(f"problem setting {key}={value}: expected a "
                           f"{type(default).__name__}") from None
      settings[key.strip()] = value.strip() if isinstance(value, str) else value
    return settings

  # Whether each output places its source's words in order, a token each (hparams
  # source_pointer); such a problem implements source_slots(data_dir): those tokens' ids.
  places_source_words = False
  # Whether its targets are span labels for a span parser (hparams architecture=span_parser);
  # such a problem implements span_vocabulary(data_dir) (modeling/span_parser.py).
  predicts_spans = False
  # Whether its vocabulary gives words an unknown-word class (hparams word_dropout); such a
  # problem implements word_classes(data_dir).
  has_word_classes = False

  # ----------------------------------------------------------------- subclass hooks
  def record_target(self, source, target):
    """The target the records hold for a (source, target) pair (the dev and test text keep
    `target`): the pair's own, unless the model predicts something else (wsj_parsing_spans)."""
    del source
    return target

  def raw_pairs(self, split, raw_dir):
    """Yields (source, target) strings of canonical `split` from `raw_dir`."""
    raise NotImplementedError(f"{type(self).__name__} must implement raw_pairs")

  def split_size(self, split, raw_dir):
    """How many pairs raw_pairs(split, raw_dir) yields, if known without reading them (for
    the ETA of progress lines); None = unknown."""
    return None

  def default_raw_dir(self, data_dir):
    """Where raw data lives when `prepare` is given no raw_dir."""
    return os.path.join(data_dir, data_files.RAW_DIR)

  def settings(self):
    """What the prepared data depends on; stored in, and checked against, the manifest."""
    return {key: getattr(self, key) for key in self._SETTINGS if key != "cache_in_memory"}

  def vocab_texts(self, raw_dir):
    """Text the vocabulary is learned from: both sides of the first training pairs."""
    for i, (source, target) in enumerate(self.raw_pairs("train", raw_dir)):
      if self.vocab_sample_size is not None and i >= self.vocab_sample_size:
        return
      yield source
      yield target

  def build_vocab(self, data_dir, raw_dir):
    """Learns the vocabulary and writes it to data_dir."""
    texts = (text for text in self.vocab_texts(raw_dir) if text.strip())
    first = next(texts, None)
    if first is None:  # SentencePiece would fail with a RuntimeError of its own.
      raise self.no_training_text(raw_dir)
    try:
      tokenizers.train_sentencepiece(itertools.chain([first], texts), self._vocab_path(data_dir),
                                     self.vocab_size, self.vocab_type)
    except tokenizers.VocabularyError as e:
      raise ProblemError(f"{self.name}: {e}") from None

  def raw_files(self, split, raw_dir):
    """The raw files `split` is read from, for messages (default: raw_dir itself)."""
    return [raw_dir]

  def no_training_text(self, raw_dir):
    """The ProblemError of raw training data without a non-empty pair."""
    names = ", ".join(map(str, self.raw_files("train", raw_dir)))
    return ProblemError(f"{self.name}: no training text in {names} (every pair is empty): "
                        "nothing to learn a vocabulary from or train on")

  def tokenizer(self, data_dir):
    """The tokenizer of a prepared (or vocabulary-built) data_dir."""
    if data_dir not in self._tokenizers:
      path = self._vocab_path(data_dir)
      if not tf.io.gfile.exists(path):
        raise ProblemError(f"{path} is missing: {self._how_to_prepare(data_dir)}")
      self._tokenizers[data_dir] = tokenizers.SentencePieceTokenizer.load(path)
    return self._tokenizers[data_dir]

  # ----------------------------------------------------------------- preparing
  def prepare(self, data_dir, raw_dir=None, progress_seconds=10.0, workers=1):
    """Builds the vocabulary and the tokenized cache in data_dir unless already there.

    Logs a progress line (pairs read, pairs/s, ETA when split_size knows the total) at most
    every progress_seconds while reading a split (0: only each split's final line). This
    process reads the raw pairs and writes the records; with workers > 1 (the tools pass
    `preparation.default_workers()`), that many processes tokenize and serialize the pairs
    of a long split (past 50,000 pairs); the records are the same for any number of workers. The
    workers are spawned, so a script of yours that calls this with workers > 1 needs
    multiprocessing's `if __name__ == "__main__":` guard.

    Returns {split: {"pairs", "examples", "empty", "empty_pairs", "lengths", "tokens",
    "longest"}}: pairs read, examples written, pairs skipped for an empty side (and the first
    pair numbers, 1-based), a histogram {length: count} of example lengths (max of both sides,
    EOS included), and per side [source, target] the total and the longest example's tokens.
    """
    if self.is_prepared(data_dir):
      manifest = self.manifest(data_dir)
      if (manifest["problem"], manifest["format"], manifest["settings"]) != (
          self.name, preparation.FORMAT_VERSION, self.settings()):
        raise ProblemError(
            f"{data_dir} holds {manifest['problem']} data prepared with {manifest['settings']}, "
            f"not {self.name} with {self.settings()}; use another --data_dir")
      logger.debug("%s: %s is already prepared", self.name, data_dir)
      return manifest["splits"]
    self._tokenizers.pop(data_dir, None)
    return preparation.prepare(self, data_dir, raw_dir or self.default_raw_dir(data_dir),
                               progress_seconds, workers, ProblemError)

  # ----------------------------------------------------------------- reading
  def is_prepared(self, data_dir):
    return tf.io.gfile.exists(data_files.manifest_path(data_dir))

  def manifest(self, data_dir):
    manifest = data_files.read_manifest(data_dir)
    if manifest is None:
      raise ProblemError(f"{data_dir} is not prepared (no {data_files.MANIFEST_FILE}): "
                         f"{self._how_to_prepare(data_dir)}")
    return manifest

  def count_overlong(self, split, data_dir, max_length):
    """How many prepared examples of `split` are longer than max_length (EOS included)."""
    lengths = self.manifest(data_dir)["splits"][canonical_split(split)]["lengths"]
    return sum(count for length, count in lengths.items() if int(length) > max_length)

  def packed_lengths(self, data_dir, max_length):
    """(source, target) row lengths of packed batches: max_length for the side with more
    tokens in the train split; the other side shorter by the ratio of their token counts
    (rounded up to a multiple of 8, never below its longest example), so both sides fill
    alike. Data prepared before the manifest counted tokens gets max_length for both."""
    stats = self.manifest(data_dir)["splits"]["train"]
    if "tokens" not in stats:
      return max_length, max_length
    tokens, longest = stats["tokens"], stats["longest"]
    long_side = 0 if tokens[0] > tokens[1] else 1
    short_side = 1 - long_side
    ratio = tokens[short_side] / max(tokens[long_side], 1)
    short = min(max_length, max(-(-int(max_length * ratio) // 8) * 8, longest[short_side]))
    lengths = [max_length, max_length]
    lengths[short_side] = short
    return tuple(lengths)

  def dataset(self, split, data_dir, hparams, training, *, batch_tokens=None, seed=None,
              num_shards=1, shard_index=0, input_context=None, static_shapes=False, cache=None,
              pack=False):
    """Batches {"inputs": int32 [B, S], "targets": int32 [B, T]} of a prepared split.

    Args:
      hparams: uses max_length (longer examples are dropped, and counted in a warning) and
        batch_size (the default token budget).
      training: shuffle and repeat forever; otherwise one ordered pass.
      batch_tokens: tokens per batch and side; the trainer passes the global hparams.batch_size
        divided by replicas and gradient-accumulation steps.
      seed: deterministic order when set.
      num_shards, shard_index: this worker's share; or pass a tf.distribute.InputContext.
      static_shapes: pad to bucket bounds and drop partial batches (TPU / XLA).
      cache: keep parsed examples in memory; None = cache_in_memory, but never when training.
      pack: packed rows of `packed_lengths` (training only; see packing.py): one static shape,
        with segment ids and positions per example.
    """
    split = canonical_split(split)
    manifest = self.manifest(data_dir)
    if input_context is not None:
      num_shards, shard_index = input_context.num_input_pipelines, input_context.input_pipeline_id
    dropped = self.count_overlong(split, data_dir, hparams.max_length)
    if dropped:
      logger.warning("%s %s: dropping %d of %d examples longer than max_length=%d tokens",
                     self.name, split, dropped, manifest["splits"][split]["examples"],
                     hparams.max_length)
    paths = data_files.record_paths(data_dir, split)
    self._check_record_sizes(data_dir, split, paths, manifest)
    if not paths:
      raise ProblemError(f"no {split} records in {data_dir}: {self._how_to_prepare(data_dir)}")
    return pipeline.pipeline(
        paths, batch_tokens or hparams.batch_size, hparams.max_length, training, seed=seed,
        num_shards=num_shards, shard_index=shard_index, static_shapes=static_shapes,
        cache=self.cache_in_memory and not training if cache is None else cache,
        packed_lengths=self.packed_lengths(data_dir, hparams.max_length) if pack else None,
        example_fn=self._word_dropout(data_dir, hparams, seed, shard_index) if training else None)

  def check_word_dropout(self, hparams):
    """Refuses hparams.word_dropout > 0 for a vocabulary without unknown-word classes."""
    if hparams.word_dropout and not self.has_word_classes:
      raise ProblemError(f"hparams word_dropout={hparams.word_dropout}: {self.name}'s "
                         "vocabulary has no unknown-word classes to drop words to "
                         "(wsj_parsing's vocabulary of words has)")

  def _word_dropout(self, data_dir, hparams, seed, shard_index):
    """word_dropout.py's example_fn with hparams.word_dropout > 0, else None."""
    self.check_word_dropout(hparams)
    if not hparams.word_dropout:
      return None
    return word_dropout.word_dropout_fn(*self.word_classes(data_dir), hparams.word_dropout,
                                        seed or 0, shard_index)

  def text_pairs(self, split, data_dir):
    """[(source, target)] text of the dev or test split, as read from raw_dir."""
    split = canonical_split(split)
    path = data_files.pairs_path(data_dir, split)
    if not tf.io.gfile.exists(path):
      raise ProblemError(f"{path} is missing (text is kept for dev and test only): "
                         f"{self._how_to_prepare(data_dir)}")
    with tf.io.gfile.GFile(path) as f:
      return [tuple(json.loads(line)) for line in f]

  def score(self, sources, hypotheses, references):
    """Corpus scores of decoded `hypotheses` against `references` -> {name: value}. Here,
    for translation: BLEU both ways, each labelled with how it was computed (the target
    language picks Moses' rules; t2t_lite/data/scoring.py); other tasks override it."""
    return scoring.translation_scores(hypotheses, references, self.target_lang or "en")

  def reading_error(self, data_dir, error):
    """The one-line error of a tf.errors.OpError met while reading data_dir's records: a
    damaged file (DataLossError, whose text names no file) is a ProblemError naming the first
    record file that does not read through; a file gone or unreadable meanwhile a RunFailure."""
    if not isinstance(error, tf.errors.DataLossError):
      return RunFailure(f"reading {data_dir} failed: {reason(error)}")
    path, why = pipeline.first_damaged_file(data_files.record_paths(data_dir))
    if path is None:
      path, why = data_dir, reason(error)
    return ProblemError(f"{path} is damaged ({why}): {self._how_to_prepare_again(data_dir)}")

  def _check_record_sizes(self, data_dir, split, paths, manifest):
    """Each record file of `split` is there with the size it had when prepared (data_dirs
    prepared before sizes were recorded are not checked): a deleted, truncated or overwritten
    file is named up front."""
    expected = manifest.get("record_bytes", {})
    present = {os.path.basename(path) for path in paths}
    for name in sorted(expected):
      if name.startswith(f"{split}-") and name not in present:
        raise ProblemError(f"{os.path.join(data_dir, name)} is missing; "
                           f"{self._how_to_prepare_again(data_dir)}")
    for path in paths:
      name = os.path.basename(path)
      size = tf.io.gfile.stat(path).length
      if name in expected and size != expected[name]:
        raise ProblemError(
            f"{path} has {size} bytes but had {expected[name]} when {data_dir} was prepared: it "
            f"was truncated or overwritten; {self._how_to_prepare_again(data_dir)}")

  def _how_to_prepare_again(self, data_dir):
    return f"remove {data_dir} and prepare it again with t2t-lite-datagen"

  # ----------------------------------------------------------------- helpers
  def _vocab_path(self, data_dir):
    return data_files.vocab_path(data_dir)

  def _how_to_prepare(self, data_dir):
    return (f"run `t2t-lite-datagen --problem={self.name} --data_dir={data_dir} "
            f"--raw_dir=...` first")


def canonical_split(split):
  """"train" / "dev" / "test" (aliases "validation", "val", "eval" -> "dev")."""
  split = _SPLIT_ALIASES.get(split, split)
  if split not in SPLITS:
    raise ProblemError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
  return split
