"""Errors: one base class for every failure t2t-lite foresees, and what a tool exits with.

Library modules raise a subclass of `T2TLiteError` with a message that names the problem (and the
file, path or value). The tools (`t2t_lite/bin/`) print that message as one line on stderr and
exit with the error's `exit_status`; anything else is a bug and keeps its traceback.
"""


class T2TLiteError(Exception):
  """Bad usage, configuration or input: the user has to change something. Exit status 2."""
  exit_status = 2


class RunFailure(T2TLiteError):
  """A failure at run time that the same command may not meet again (network, disk, a diverged
  run, a pre-empted peer). Exit status 1."""
  exit_status = 1
