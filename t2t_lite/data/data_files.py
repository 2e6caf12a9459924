"""The files of a data_dir: every name in it, and the manifest that says it is prepared.

  data_dir/
    vocab.model                       the vocabulary: a SentencePiece model proto, or another
    vocab.words.json                  vocab* file of a problem's own (wsj_parsing's word lists)
    <split>-00000-of-0000N.tfrecord   token ids, both sides ending in EOS (id 1)
    <split>.pairs.jsonl               the dev / test text pairs (for BLEU, F1)
    manifest.json                     settings and per-split counts; written last, so its
                                      presence means "prepared"
    raw/                              raw inputs a problem downloads (its default raw_dir)

Everything goes through tf.io.gfile (local, gs://, ram://), imported where it is used, so that
the names here (and run_files', which takes them) are known without TensorFlow. The run
directory copies the vocabulary and the manifest (t2t_lite/rundir/run_files.py), so both sides
take the names from here.
"""
import hashlib
import json
import os

from t2t_lite import files

MANIFEST_FILE = "manifest.json"
VOCAB_PATTERN = "vocab*"  # Every vocabulary file, whatever the problem names it.
SENTENCEPIECE_VOCAB_FILE = "vocab.model"
WORDS_VOCAB_FILE = "vocab.words.json"  # wsj_parsing's word lists.
RAW_DIR = "raw"


def manifest_path(directory):
  return os.path.join(directory, MANIFEST_FILE)


def read_manifest(directory):
  """The manifest of a prepared data_dir (or of a run directory's copy), None without one."""
  import tensorflow as tf
  path = manifest_path(directory)
  if not files.exists(path):
    return None
  with tf.io.gfile.GFile(path) as f:
    return json.loads(f.read())


def write_manifest(data_dir, manifest):
  files.write_text(manifest_path(data_dir), json.dumps(manifest, indent=1))


def vocab_path(data_dir, name=SENTENCEPIECE_VOCAB_FILE):
  return os.path.join(data_dir, name)


def vocab_files(directory):
  """The vocabulary files of a data_dir or run directory, sorted ([] for fixed vocabularies)."""
  import tensorflow as tf
  return sorted(tf.io.gfile.glob(os.path.join(directory, VOCAB_PATTERN)))


def vocab_checksum(directory):
  """sha256 over the names and bytes of directory's vocabulary files ("" when it has none):
  two vocabularies of the same size but other pieces give other ids for the same text."""
  import tensorflow as tf
  digest = hashlib.sha256()
  paths = vocab_files(directory)
  for path in paths:
    with tf.io.gfile.GFile(path, "rb") as f:
      digest.update(os.path.basename(path).encode() + b"\0" + f.read())
  return digest.hexdigest() if paths else ""


def record_path(data_dir, split, index, count):
  return os.path.join(data_dir, f"{split}-{index:05d}-of-{count:05d}.tfrecord")


def record_paths(data_dir, split=None):
  """The TFRecord files of `split` (every split when None), sorted."""
  import tensorflow as tf
  pattern = f"{split}-*-of-*.tfrecord" if split else "*.tfrecord"
  return sorted(tf.io.gfile.glob(os.path.join(data_dir, pattern)))


def pairs_path(data_dir, split):
  return os.path.join(data_dir, f"{split}.pairs.jsonl")


def prepared_files(data_dir):
  """What preparation writes into data_dir (existing ones): for removing a failed attempt."""
  import tensorflow as tf
  names = vocab_files(data_dir) + record_paths(data_dir)
  names += tf.io.gfile.glob(os.path.join(data_dir, "*.pairs.jsonl"))
  names += tf.io.gfile.glob(os.path.join(data_dir, "*.tmp"))
  return names
