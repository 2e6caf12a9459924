"""Errors: one base class for every failure t2t-lite foresees, and what a tool exits with.

Library modules raise a subclass of `T2TLiteError` with a message that names the problem (and the
file, path or value). The tools (`t2t_lite/bin/`) print that message as one line on stderr and
exit with the error's `exit_status`; anything else is a bug and keeps its traceback.
"""
import difflib
import re


class T2TLiteError(Exception):
  """Bad usage, configuration or input: the user has to change something. Exit status 2."""
  exit_status = 2


class RunFailure(T2TLiteError):
  """A failure at run time that the same command may not meet again (network, disk, a diverged
  run, a pre-empted peer). Exit status 1."""
  exit_status = 1


def reason(error):
  """The first line of what a failed read, write or op said: a tf.errors.OpError's message
  without the wrapped function's name that begins it and the op's name that ends it, or any
  other exception's text. The one wording of "why" inside the one-line errors above."""
  line = (str(getattr(error, "message", None) or error).strip().splitlines() or [""])[0]
  return re.sub(r"\s*\[Op:\w+\]$", "", re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", line))


def did_you_mean(name, known):
  """"; did you mean 'a', 'b'?" for the names of `known` close to `name`, or "": the one wording
  of a typo's hint in the one-line errors (registries, hparams, ranges)."""
  close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
  return f"; did you mean {', '.join(map(repr, close))}?" if close else ""
