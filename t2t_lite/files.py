"""Files on any tf.io.gfile filesystem: whether a path exists, and replacing small files
(hparams.json, run.json, manifests, vocabularies, shortlists) by writing or copying to a
temporary sibling, then renaming it over the target.

A local path is looked at with os.path and a path with a scheme (gs://, s3://, ram://) with
tf.io.gfile, imported only then: a tool checks the paths it was given before it loads
TensorFlow, and refuses a mistyped one at once.

Why not GFile(path, "w") / gfile.copy(overwrite=True) directly: on TensorFlow's ram://
filesystem both append to an existing file instead of replacing it (TF 2.21), and anywhere a
process killed mid-write would leave a truncated file that the next resume reads. A failed
write (a full disk) removes the temporary file and raises a one-line RunFailure naming `path`;
`writing(path)` does the same for any other write (the tools' outputs). `same_path` tells that
two names are one file (a symlink, "./"): what a tool compares before it writes over its input.
"""
import contextlib
import os
import sys

from t2t_lite.errors import RunFailure, reason


def _gfile(path):
  """tf.io.gfile for a path with a scheme (gs://, ram://, ...); None for a local one."""
  if "://" not in str(path):
    return None
  import tensorflow as tf  # Only here: a local path needs no TensorFlow.
  return tf.io.gfile


def exists(path):
  gfile = _gfile(path)
  return gfile.exists(path) if gfile else os.path.exists(path)


def isdir(path):
  gfile = _gfile(path)
  return gfile.isdir(path) if gfile else os.path.isdir(path)


def listdir(path):
  """The names in directory `path` (without a trailing "/", which some filesystems add)."""
  gfile = _gfile(path)
  return [name.rstrip("/") for name in (gfile.listdir(path) if gfile else os.listdir(path))]


def same_path(a, b):
  """Whether paths a and b name the same file or directory: local ones also through symlinks,
  "./", ".." and hard links (os.path.samefile where both exist, else their real paths), others
  (gs://, ram://) by their text. How a tool finds that it would write over what it reads."""
  if "://" in str(a) or "://" in str(b):
    return os.path.normpath(a) == os.path.normpath(b)
  if os.path.exists(a) and os.path.exists(b):
    return os.path.samefile(a, b)
  return os.path.realpath(a) == os.path.realpath(b)


def read_text(path):
  """The text (UTF-8) of a small file, e.g. a JSON record; TensorFlow only for a path with a
  scheme."""
  gfile = _gfile(path)
  if gfile:
    with gfile.GFile(path) as f:
      return f.read()
  with open(path, encoding="utf-8") as f:
    return f.read()


def open_binary(path):
  """`path` opened for reading bytes: Python's file for a local path (no TensorFlow),
  tf.io.gfile.GFile for one with a scheme."""
  gfile = _gfile(path)
  return gfile.GFile(path, "rb") if gfile else open(path, "rb")


@contextlib.contextmanager
def writing(path):
  """Inside it, a failed write (a full disk, a read-only file system, a quota) is a one-line
  RunFailure naming `path`, for the tools' one line and exit status 1, not a traceback.
  TensorFlow's errors are caught only where it is loaded: a local write needs none of it."""
  tf = sys.modules.get("tensorflow")
  errors = (OSError, tf.errors.OpError) if tf is not None else (OSError,)
  try:
    yield
  except errors as e:
    raise RunFailure(f"writing {path} failed: {reason(e)}") from None


def _replace(path, fill):
  import tensorflow as tf
  temp = path + ".tmp"
  with writing(path):
    try:
      if tf.io.gfile.exists(temp):
        tf.io.gfile.remove(temp)
      fill(temp)
      tf.io.gfile.rename(temp, path, overwrite=True)
    except tf.errors.OpError:  # A full disk, a read-only file system, a directory there.
      try:
        if tf.io.gfile.exists(temp) and not tf.io.gfile.isdir(temp):
          tf.io.gfile.remove(temp)  # No empty .tmp left behind.
      except tf.errors.OpError:
        pass
      raise


def write_text(path, text):
  """Replaces `path` with `text` (UTF-8)."""
  write_bytes(path, text.encode("utf-8"))


def write_bytes(path, data):
  """Replaces `path` with `data`."""
  import tensorflow as tf

  def fill(temp):
    with tf.io.gfile.GFile(temp, "wb") as f:
      f.write(data)
  _replace(path, fill)


def copy(source, path):
  """Replaces `path` with a copy of `source`."""
  import tensorflow as tf
  _replace(path, lambda temp: tf.io.gfile.copy(source, temp))


def make_dirs(path, name, error):
  """Creates directory `path` (and its parents); a file in the way or a write error (read-only
  file system, no permission) raises `error` (a T2TLiteError class) naming it as `name`."""
  check_not_a_file(path, name, error)
  import tensorflow as tf
  try:
    tf.io.gfile.makedirs(path)
  except tf.errors.OpError as e:
    raise error(f"cannot create {name} {path}: {reason(e)}") from None


def check_not_a_file(path, name, error):
  """Refuses (`error`, a T2TLiteError class) a directory path `path` (flag `name`) that names a
  file: without TensorFlow for a local path, so that a tool refuses it before it loads."""
  if exists(path) and not isdir(path):
    raise error(f"{name} {path} is a file, not a directory")


def stderr_to_devnull(run):
  """run() with file descriptor 2 pointed at /dev/null: C++ libraries' log lines (TensorFlow's
  at import, LiteRT's at its first allocation) would come before a tool's first line. Failures
  are exceptions, and reach the caller."""
  sys.stderr.flush()
  saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
  try:
    os.dup2(devnull, 2)
    run()
  finally:
    os.dup2(saved, 2)
    os.close(saved)
    os.close(devnull)
