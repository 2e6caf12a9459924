"""What every t2t-lite tool does with an expected failure: one line on stderr and an exit status."""
import argparse
import logging
import sys


def fail(prog, message, exit_status=2):
  """Prints `prog: error: message` on stderr (one line) and returns the exit status."""
  print(f"{prog}: error: {' '.join(str(message).split())}", file=sys.stderr)
  return exit_status


class ArgumentParser(argparse.ArgumentParser):
  """argparse's parser whose refusal is the tools' one line (`prog: error: ...` and a hint to
  run --help) instead of the usage page followed by the error, which buries the line that
  matters under 16-32 lines of flags."""

  def error(self, message):
    self.exit(fail(self.prog, f"{message} (see {self.prog} --help)"))


def configure_logging(verbose, level=logging.INFO, fmt="%(levelname)s %(message)s"):
  """The tool's own log at `level` on stderr; TensorFlow's Python loggers (absl, tensorflow)
  only from ERROR on unless --verbose: they log every checkpoint write at INFO and warn about
  TensorFlow's internals (deprecations, unrestored optimizer values of a partial restore)."""
  logging.basicConfig(level=level, format=fmt)
  if not verbose:
    for name in ("absl", "tensorflow"):
      logging.getLogger(name).setLevel(logging.ERROR)



def print_registered(ranged=False):
  """--list: the registered problems and hparams sets (and, with `ranged`, the ranged hparams),
  a line each."""
  import t2t_lite
  print("problems:", " ".join(t2t_lite.list_problems()))
  print("hparams: ", " ".join(t2t_lite.list_hparams()))
  if ranged:
    print("ranged hparams:", " ".join(t2t_lite.registry.RANGED_HPARAMS.names()))
