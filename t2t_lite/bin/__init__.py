"""Console scripts: thin shells that parse flags and call the library.

Quiet TensorFlow on every tool, decided here because this runs before any tool imports
TensorFlow (`import t2t_lite` does not): without `--verbose`, whatever TF_CPP_MIN_LOG_LEVEL
the environment sets, TensorFlow's C++ log is limited to fatal errors (TF_CPP_MIN_LOG_LEVEL=3),
which hides the oneDNN / CPU-feature lines and the "failed call to cuInit" of a machine without
a GPU, and TensorFlow is imported with file descriptor 2 pointed at /dev/null: the "Could not
find cuda drivers" and "All log messages before absl::InitializeLog()" lines are written before
its logging is initialised, which no setting reaches. With `--verbose` nothing is changed: the
user asked for TensorFlow's lines, at the level TF_CPP_MIN_LOG_LEVEL sets (all by default).
Failures still reach the user: they are Python exceptions, printed by the tools as one line.

TensorFlow is not imported here but where a tool first needs it (a finder on sys.meta_path
runs that import quietly), so that a tool refuses bad flags, names, settings and paths, which
need no TensorFlow, before paying for loading it (seconds): the registries know their names
without their plug-ins (registry.py), and a local path is checked with os.path (files.py).
"""
import importlib.util
import os
import sys

from t2t_lite import files


class _QuietTensorFlowFinder:
  """Finds `tensorflow` the usual way, the first time anything imports it, and has its module
  run quietly; then leaves sys.meta_path."""

  def find_spec(self, name, path=None, target=None):
    if name != "tensorflow":
      return None
    sys.meta_path.remove(self)
    spec = importlib.util.find_spec(name)
    if spec is not None:
      spec.loader = _QuietLoader(spec.loader)
    return spec


class _QuietLoader:
  def __init__(self, loader):
    self.loader = loader

  def create_module(self, spec):
    return self.loader.create_module(spec)

  def exec_module(self, module):
    module.__loader__ = module.__spec__.loader = self.loader  # TensorFlow's own, from now on
    files.stderr_to_devnull(lambda: self.loader.exec_module(module))


def _quiet_tensorflow():
  if "--verbose" in sys.argv[1:] or "tensorflow" in sys.modules:
    return
  os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
  sys.meta_path.insert(0, _QuietTensorFlowFinder())


_quiet_tensorflow()
