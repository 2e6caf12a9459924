"""Console scripts: thin shells that parse flags and call the library.

Quiet TensorFlow on every tool, decided here because this runs before any tool imports
TensorFlow (`import t2t_lite` does not): without `--verbose` (and unless the user set
TF_CPP_MIN_LOG_LEVEL), TensorFlow's C++ log is limited to fatal errors, which hides the
oneDNN / CPU-feature lines and the "failed call to cuInit" of a machine without a GPU, and
TensorFlow is imported with file descriptor 2 pointed at /dev/null: the "Could not find cuda
drivers" line is written by absl before its logging is initialised, which no setting reaches.
Failures still reach the user: they are Python exceptions, printed by the tools as one line.
"""
import os
import sys

def _quiet_tensorflow():
  if ("--verbose" in sys.argv[1:] or "TF_CPP_MIN_LOG_LEVEL" in os.environ
      or "tensorflow" in sys.modules):
    return
  os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
  sys.stderr.flush()
  saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
  try:
    os.dup2(devnull, 2)
    import tensorflow  # noqa: F401
  finally:
    os.dup2(saved, 2)
    os.close(saved)
    os.close(devnull)


_quiet_tensorflow()
