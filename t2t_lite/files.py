"""Replacing small files (hparams.json, run.json, manifests, vocabularies) on any tf.io.gfile
filesystem: write or copy to a temporary sibling, then rename over the target.

Why not GFile(path, "w") / gfile.copy(overwrite=True) directly: on TensorFlow's ram://
filesystem both append to an existing file instead of replacing it (TF 2.21), and anywhere a
process killed mid-write would leave a truncated file that the next resume reads.
"""
import tensorflow as tf


def _replace(path, fill):
  temp = path + ".tmp"
  if tf.io.gfile.exists(temp):
    tf.io.gfile.remove(temp)
  fill(temp)
  tf.io.gfile.rename(temp, path, overwrite=True)


def write_text(path, text):
  """Replaces `path` with `text` (UTF-8)."""
  def fill(temp):
    with tf.io.gfile.GFile(temp, "w") as f:
      f.write(text)
  _replace(path, fill)


def copy(source, path):
  """Replaces `path` with a copy of `source`."""
  _replace(path, lambda temp: tf.io.gfile.copy(source, temp))

