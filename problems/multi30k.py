"""Multi30k task 1 (Elliott et al., 2016): image captions, 29,000 / 1,014 / 1,000 pairs.

Raw files are `<split>.<lang>.gz` (split = train, val, test_2016_flickr) in raw_dir, as in the
public multi30k dataset repository's data/task1/raw/; missing files are downloaded from there.
Splits: train -> train, dev -> val, test -> test_2016_flickr. Vocabulary: 8k shared BPE
(SentencePiece; BPE also for EN-FR here: on these 58k lines it trains several times faster
than unigram; docs/benchmarks.md, "Design measurements").
"""
import gzip
import itertools
import os
import urllib.error
import urllib.request
import zlib

import tensorflow as tf

from t2t_lite.data.problem_base import DownloadError, Problem, ProblemError
from t2t_lite.registry import register_problem

URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"
_SPLIT_FILES = {"train": "train", "dev": "val", "test": "test_2016_flickr"}


def read_lines(path):
  """Yields the lines of a text file (gzipped when the name ends in .gz), via tf.io.gfile, one
  at a time: a corpus of WMT size never sits in memory (bench/datagen_scale.py)."""
  if path.endswith(".gz") and tf.io.gfile.stat(path).length == 0:  # gzip would read no lines
    raise ProblemError(f"{path} is empty (0 bytes, not a gzip file); download it again or "
                       "remove it so that it is downloaded")
  with tf.io.gfile.GFile(path, "rb") as raw:
    lines = gzip.GzipFile(fileobj=raw, mode="rb") if path.endswith(".gz") else raw
    try:
      for number, line in enumerate(lines, 1):
        try:
          yield line.rstrip(b"\n").rstrip(b"\r").decode("utf-8")
        except UnicodeDecodeError as e:
          raise ProblemError(
              f"{path}:{number}: not UTF-8 ({e.reason} at byte {e.start})") from None
    except (OSError, EOFError, zlib.error) as e:  # BadGzipFile is an OSError; cut: EOFError
      if lines is raw:
        raise
      raise ProblemError(f"{path} is not a complete gzip file ({e}); download it again or "
                         f"remove it so that it is downloaded") from None


def parallel_lines(source_path, target_path):
  """Yields (source, target) line pairs of two parallel files; a length mismatch names file
  and line (raised when the shorter file ends, after the pairs before it)."""
  missing = object()
  pairs = itertools.zip_longest(read_lines(source_path), read_lines(target_path),
                                fillvalue=missing)
  for number, (source, target) in enumerate(pairs, 1):
    if source is missing or target is missing:
      longer, shorter = ((source_path, target_path) if target is missing
                         else (target_path, source_path))
      total = number + sum(1 for _ in pairs)
      if number == 1:
        raise ProblemError(f"{shorter} has no lines, and {longer} has {total}: the files are "
                           "not parallel")
      raise ProblemError(
          f"{longer}:{number}: line has no counterpart in {shorter} "
          f"({total} vs {number - 1} lines; the files are not parallel)")
    yield source, target


class _Multi30k(Problem):
  source_lang = "en"
  target_lang = None
  vocab_size = 8000

  def _files(self):
    return [f"{name}.{lang}.gz" for name in _SPLIT_FILES.values()
            for lang in (self.source_lang, self.target_lang)]

  def _ensure_raw(self, raw_dir):
    """Downloads the files raw_dir lacks; a one-line error naming them when that fails."""
    missing = [name for name in self._files()
               if not tf.io.gfile.exists(os.path.join(raw_dir, name))]
    if not missing:
      return
    try:
      tf.io.gfile.makedirs(raw_dir)
      for name in missing:
        with urllib.request.urlopen(URL + name, timeout=60) as response:
          data = response.read()
        with tf.io.gfile.GFile(os.path.join(raw_dir, name), "wb") as f:
          f.write(data)
    except (OSError, urllib.error.URLError, tf.errors.OpError) as e:
      reason = str(getattr(e, "reason", e)).splitlines()[0]
      raise DownloadError(
          f"{self.name}: raw_dir {raw_dir} lacks {', '.join(missing)} and downloading them from "
          f"{URL} failed ({reason}); put those files in --raw_dir") from None

  def raw_files(self, split, raw_dir):
    prefix = os.path.join(raw_dir, _SPLIT_FILES[split])
    return [f"{prefix}.{self.source_lang}.gz", f"{prefix}.{self.target_lang}.gz"]

  def _paths(self, split, raw_dir):
    """The (source, target) files of `split`, downloaded first if missing."""
    self._ensure_raw(raw_dir)
    return self.raw_files(split, raw_dir)

  def split_size(self, split, raw_dir):
    return sum(1 for _ in read_lines(self._paths(split, raw_dir)[0]))

  def raw_pairs(self, split, raw_dir):
    yield from parallel_lines(*self._paths(split, raw_dir))


@register_problem("multi30k_ende")
class Multi30kEnDe(_Multi30k):
  """English -> German, shared SentencePiece BPE vocabulary of 8k."""
  name = "multi30k_ende"
  target_lang = "de"
  vocab_type = "bpe"


@register_problem("multi30k_enfr")
class Multi30kEnFr(_Multi30k):
  """English -> French, shared SentencePiece BPE vocabulary of 8k."""
  name = "multi30k_enfr"
  target_lang = "fr"
  vocab_type = "bpe"
