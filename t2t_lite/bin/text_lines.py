"""Lines of text in and out of the tools: an input file (any tf.io.gfile path) or stdin read
whole or a window at a time, checked to be UTF-8 text (invalid bytes replaced, with a count and
a warning), and outputs written as they come, so that an interrupted decode keeps every line
it finished and can go on after them. t2t-lite-decode and t2t-lite-score read and write
through here. The checks of the paths (check_input_file, check_output_file) need no
TensorFlow for a local path, so that a tool makes them before it loads it; the reads and writes
import it (tf.io.gfile) where they run.
"""
import logging
import os
import re
import sys

from t2t_lite import files
from t2t_lite.decode.decode_settings import DecodingError

logger = logging.getLogger("t2t-lite-decode")
# A file is text when at most this share of its characters are invalid UTF-8 (each maximal
# invalid sequence counts one) or control characters other than tab, CR and LF: a few bad bytes
# in real text (a Latin-1 accent) are replaced with a warning; random bytes (over half),
# UTF-16 (every other byte NUL) or another 8-bit encoding of a non-Latin script are refused.
MAX_NOT_TEXT = 0.2
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")


def read_lines(path):
  """Lines of a file (any tf.io.gfile path) or of stdin ("-"), without their newlines: all of
  them (see read_windows)."""
  return [line for window in read_windows(path, window=None) for line in window]


def read_windows(path, window, skip=0):
  """The lines of a file (any tf.io.gfile path) or of stdin ("-"), without their newlines, in
  lists of at most `window` lines (None: one list of all), each as soon as it is read: memory
  holds one window. The first `skip` lines are passed over.

  Lines end at "\n" only (a trailing "\r" is dropped): str.splitlines would also split at
  U+2028, U+0085 and other separators inside a sentence and shift every later output line.
  Invalid UTF-8 is replaced by U+FFFD, as the exported SavedModel does, with a warning after the
  last window that counts the lines concerned; a window that is not text (see MAX_NOT_TEXT) is
  refused before it is yielded.
  """
  name = "stdin" if path == "-" else path
  invalid = []  # numbers of the lines with invalid UTF-8
  raw, number = [], 0
  for line in _raw_lines(path):
    number += 1
    if number > skip:
      raw.append(line)
    if window is not None and len(raw) == window:
      yield _decoded(raw, number - len(raw) + 1, name, invalid)
      raw = []
  if raw or window is None:
    yield _decoded(raw, number - len(raw) + 1, name, invalid)
  if invalid:
    logger.warning("%s: %d line(s) with invalid UTF-8 (first: line %d); the invalid bytes were "
                   "replaced by U+FFFD", name, len(invalid), invalid[0])


def _raw_lines(path):
  """The byte lines (with their newline) of a file or of stdin, as they come."""
  if path == "-":
    stream = sys.stdin
    if stream is None:  # Started with stdin closed.
      return
    if hasattr(stream, "buffer"):
      yield from iter(stream.buffer.readline, b"")  # a line as soon as it is typed
    else:  # A text stream without bytes underneath (e.g. io.StringIO).
      for line in iter(stream.readline, ""):
        yield line.encode("utf-8", errors="surrogateescape")
    return
  check_input_file(path)
  with files.open_binary(path) as f:
    yield from iter(f.readline, b"")


def check_input_file(path):
  """Refuses (FileNotFoundError) an input file that does not exist; "-" (stdin) passes."""
  if path != "-" and not files.exists(path):
    raise FileNotFoundError(f"{path} does not exist")


def _decoded(raw, first_number, name, invalid):
  """Byte lines -> their text without newlines; numbers of lines with invalid UTF-8 appended to
  `invalid`; refused when not text."""
  data = b"".join(raw)
  text = data.decode("utf-8", errors="replace")
  replaced = text.count("\ufffd") - data.count("\ufffd".encode())  # U+FFFD written as such
  not_text = replaced + len(_CONTROL.findall(text))
  if not_text > MAX_NOT_TEXT * len(text):
    where = f" (lines {first_number} to {first_number + len(raw) - 1})" if first_number > 1 else ""
    raise DecodingError(f"{name} is not UTF-8 text{where}: {not_text} of its {len(text)} "
                        f"characters are invalid UTF-8 or control characters (more than "
                        f"{MAX_NOT_TEXT:.0%}); convert it to UTF-8 (e.g. with iconv)")
  lines = []
  for number, line in enumerate(raw, first_number):
    line = line[:-1] if line.endswith(b"\n") else line
    if line.endswith(b"\r"):
      line = line[:-1]
    try:
      lines.append(line.decode("utf-8"))
    except UnicodeDecodeError:
      lines.append(line.decode("utf-8", errors="replace"))
      invalid.append(number)
  return lines


def write_lines(path, lines):
  """Writes `lines` to a file (a failed write, e.g. a full disk, is a one-line RunFailure
  naming it) or to stdout ("-")."""
  text = "".join(line + "\n" for line in lines)
  if path == "-":
    sys.stdout.write(text)
    sys.stdout.flush()
  elif "://" not in path:  # A local file: no TensorFlow.
    with files.writing(path), open(path, "w", encoding="utf-8") as f:
      f.write(text)
  else:
    import tensorflow as tf
    with files.writing(path), tf.io.gfile.GFile(path, "w") as f:
      f.write(text)


class StreamedOutput:
  """Decode's output written a window at a time, each flushed before the next is read: an
  interrupted decode leaves every finished window's lines. The file is opened at the first
  write, so that a refused input or model changes nothing; when continuing (`keep`: the bytes
  of the earlier output's complete lines) its partial last line is dropped there and the new
  lines appended. A failed write (a full disk) is a one-line RunFailure naming the file; the
  lines flushed before it stay."""

  def __init__(self, path, keep=None):
    self.path, self.keep, self.file, self.opened = path, keep, None, False

  def write(self, lines):
    text = "".join(line + "\n" for line in lines)
    if self.path == "-":
      sys.stdout.write(text)
      sys.stdout.flush()
      return
    with files.writing(self.path):
      if not self.opened:
        self.opened = True  # Even if opening fails: close() then writes nothing.
        self.file = self._open()
      try:
        self.file.write(text)
        self.file.flush()
      except Exception:
        self.file = None  # Its unwritten buffer would only fail again in close().
        raise

  def _open(self):
    if "://" not in self.path:  # A local file: Python's, no TensorFlow (the LiteRT engine).
      if self.keep is not None and os.path.exists(self.path):
        os.truncate(self.path, self.keep)  # Cut in place, whatever its size.
      return open(self.path, "w" if self.keep is None else "a", encoding="utf-8")
    import tensorflow as tf
    if self.keep is None:
      return tf.io.gfile.GFile(self.path, "w")
    if tf.io.gfile.exists(self.path) and tf.io.gfile.stat(self.path).length != self.keep:
      # gs:// and the like have no truncate: rewritten without the partial line.
      with tf.io.gfile.GFile(self.path, "rb") as f:
        complete = f.read(self.keep)
      with tf.io.gfile.GFile(self.path, "wb") as f:
        f.write(complete)
    return tf.io.gfile.GFile(self.path, "a")

  def close(self):
    if self.file is not None:
      with files.writing(self.path):
        self.file.close()
    elif self.path != "-" and self.keep is None and not self.opened:
      write_lines(self.path, [])  # No input lines: an empty output file, as before.


def lines_done(path, input_file="-"):
  """--continue_output: (the number of complete lines of an earlier output file, their bytes);
  (0, 0) without one. An output of more lines than `input_file` has is refused (DecodingError):
  it is not this input's, and continuing would write nothing and keep it as if it were."""
  if path == "-" or not files.exists(path):
    return 0, 0
  count, complete, _ = _newlines(path)
  total = count_lines(input_file)
  if total is not None and count > total:
    raise DecodingError(f"--continue_output: {path} has {count} lines but {input_file} has "
                        f"{total}: it is not the output of this input")
  return count, complete


def count_lines(path):
  """The number of lines of a file (None for stdin)."""
  if path == "-" or not files.exists(path):
    return None
  count, complete, size = _newlines(path)
  return count + (size > complete)  # a last line without its newline counts too


def _newlines(path):
  """(newlines in a file, the offset just after its last one, its size), read in chunks: the
  file is never held whole (an output of millions of lines, say). No TensorFlow for a local
  file: decode counts before it loads it."""
  count = complete = size = 0
  with files.open_binary(path) as f:
    for chunk in iter(lambda: f.read(1 << 20), b""):
      last = chunk.rfind(b"\n")
      if last >= 0:
        complete = size + last + 1
      count, size = count + chunk.count(b"\n"), size + len(chunk)
  return count, complete, size


def check_output_file(path, reads=(), flag="--output_file"):
  """Refuses, before any decoding, an output path whose directory does not exist or that is a
  directory itself (writing it would fail only after all the work), or that is one of the
  files `reads` (the tool's inputs, "-" and None passing) under any name: writing it would
  destroy the input, while it is still being read. `flag` names it in the message."""
  if path in ("-", None):
    return
  directory = os.path.dirname(path) or "."
  if not files.isdir(directory):
    raise DecodingError(f"{flag} {path}: directory {directory} does not exist")
  if files.isdir(path):
    raise DecodingError(f"{flag} {path} is a directory")
  for other in reads:
    if other not in ("-", None) and files.same_path(path, other):
      raise DecodingError(f"{flag} {path} is the input file {other}: writing it would destroy "
                          "what is read; give another output file")


def split_forcing(lines, target_prefix, constraints):
  """Input lines -> (sources, decode_lines' prefixes= and / or constraints= from their TAB
  fields). --target_prefix: 'source<TAB>prefix' (a line without a TAB has the empty prefix);
  --constraints: 'source<TAB>phrase<TAB>phrase...' (a blank field, say a trailing TAB, is no
  phrase); both: 'source<TAB>prefix<TAB>phrase...', the field after the source always the
  prefix (blank for none), so that no field is read two ways."""
  if not (target_prefix or constraints):
    return list(lines), {}
  fields = [line.split("\t") for line in lines]
  forced = {}
  if target_prefix:
    if not constraints:  # The prefix is the rest of the line, TABs and all.
      fields = [f[:1] + ["\t".join(f[1:])] for f in fields]
    forced["prefixes"] = [f[1] if len(f) > 1 else "" for f in fields]
  if constraints:
    first = 2 if target_prefix else 1
    forced["constraints"] = [[p for p in f[first:] if p.strip()] for f in fields]
  return [f[0] for f in fields], forced
