"""Multi30k task 1 (Elliott et al., 2016): image captions, 29,000 / 1,014 / 1,000 pairs.

Raw files are `<split>.<lang>.gz` (split = train, val, test_2016_flickr) in raw_dir, as in the
public multi30k dataset repository's data/task1/raw/; missing files are downloaded from there.
Splits: train -> train, dev -> val, test -> test_2016_flickr. Vocabulary: 8k shared BPE
(SentencePiece; BPE also for EN-FR here: on these 58k lines it trains several times faster
than unigram; docs/benchmarks.md, "Design measurements").
"""
import gzip
import os
import urllib.error
import urllib.request

import tensorflow as tf

from t2t_lite.problem import Problem, ProblemError
from t2t_lite.registry import register_problem

URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw/"
_SPLIT_FILES = {"train": "train", "dev": "val", "test": "test_2016_flickr"}


def read_lines(path):
  """Lines of a text file (gzipped when the name ends in .gz), via tf.io.gfile."""
  with tf.io.gfile.GFile(path, "rb") as f:
    data = f.read()
  if path.endswith(".gz"):
    data = gzip.decompress(data)
  lines = data.split(b"\n")
  if lines and not lines[-1]:
    lines.pop()
  text = []
  for number, line in enumerate(lines, 1):
    try:
      text.append(line.rstrip(b"\r").decode("utf-8"))
    except UnicodeDecodeError as e:
      raise ProblemError(f"{path}:{number}: not UTF-8 ({e.reason} at byte {e.start})") from None
  return text


def parallel_lines(source_path, target_path):
  """(source, target) line pairs of two parallel files; a length mismatch names file and line."""
  sources, targets = read_lines(source_path), read_lines(target_path)
  if len(sources) != len(targets):
    shorter, longer = sorted([(len(sources), source_path), (len(targets), target_path)])
    raise ProblemError(
        f"{longer[1]}:{shorter[0] + 1}: line has no counterpart in {shorter[1]} "
        f"({longer[0]} vs {shorter[0]} lines; the files are not parallel)")
  return list(zip(sources, targets))


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
      raise ProblemError(
          f"{self.name}: raw_dir {raw_dir} lacks {', '.join(missing)} and downloading them from "
          f"{URL} failed ({reason}); put those files in --raw_dir") from None

  def raw_pairs(self, split, raw_dir):
    self._ensure_raw(raw_dir)
    prefix = os.path.join(raw_dir, _SPLIT_FILES[split])
    yield from parallel_lines(f"{prefix}.{self.source_lang}.gz", f"{prefix}.{self.target_lang}.gz")


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
