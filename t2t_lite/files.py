"""Replacing small files (hparams.json, run.json, manifests, vocabularies, shortlists) on any
tf.io.gfile filesystem: write or copy to a temporary sibling, then rename over the target.

Why not GFile(path, "w") / gfile.copy(overwrite=True) directly: on TensorFlow's ram://
filesystem both append to an existing file instead of replacing it (TF 2.21), and anywhere a
process killed mid-write would leave a truncated file that the next resume reads. A failed
write (a full disk) removes the temporary file and raises a one-line RunFailure naming `path`.
"""
import tensorflow as tf

from t2t_lite.errors import RunFailure, reason


def _replace(path, fill):
  temp = path + ".tmp"
  try:
    if tf.io.gfile.exists(temp):
      tf.io.gfile.remove(temp)
    fill(temp)
    tf.io.gfile.rename(temp, path, overwrite=True)
  except tf.errors.OpError as e:  # A full disk, a read-only file system, a directory there.
    try:
      if tf.io.gfile.exists(temp) and not tf.io.gfile.isdir(temp):
        tf.io.gfile.remove(temp)  # No empty .tmp left behind.
    except tf.errors.OpError:
      pass
    raise RunFailure(f"writing {path} failed: {reason(e)}") from None


def write_text(path, text):
  """Replaces `path` with `text` (UTF-8)."""
  write_bytes(path, text.encode("utf-8"))


def write_bytes(path, data):
  """Replaces `path` with `data`."""
  def fill(temp):
    with tf.io.gfile.GFile(temp, "wb") as f:
      f.write(data)
  _replace(path, fill)


def copy(source, path):
  """Replaces `path` with a copy of `source`."""
  _replace(path, lambda temp: tf.io.gfile.copy(source, temp))



def make_dirs(path, name, error):
  """Creates directory `path` (and its parents); a file in the way or a write error (read-only
  file system, no permission) raises `error` (a T2TLiteError class) naming it as `name`."""
  if tf.io.gfile.exists(path) and not tf.io.gfile.isdir(path):
    raise error(f"{name} {path} is a file, not a directory")
  try:
    tf.io.gfile.makedirs(path)
  except tf.errors.OpError as e:
    raise error(f"cannot create {name} {path}: {reason(e)}") from None
