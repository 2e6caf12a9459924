"""Name -> object registries for problems and hparams sets, with "did you mean" errors."""
import difflib

from t2t_lite.errors import T2TLiteError


class RegistryError(T2TLiteError, KeyError):
  """An unknown or duplicate name. str() is a one-line, human-readable message."""

  def __str__(self):
    return self.args[0]


class Registry:
  """A name -> value map that refuses duplicates and suggests close matches on a typo."""

  def __init__(self, kind):
    self.kind = kind  # "problem" or "hparams", used in error messages.
    self._entries = {}

  def register(self, name=None):
    """Decorator: `@registry.register()` uses the function/class name, or pass a name."""

    def decorator(value):
      key = name or value.__name__
      if key in self._entries:
        raise RegistryError(f"{self.kind} {key!r} is already registered")
      self._entries[key] = value
      return value

    return decorator

  def get(self, name):
    if name not in self._entries:
      close = difflib.get_close_matches(name, self._entries, n=3, cutoff=0.6)
      hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
      raise RegistryError(
          f"unknown {self.kind} {name!r}{hint} (known: {', '.join(sorted(self._entries))})")
    return self._entries[name]

  def names(self):
    return sorted(self._entries)

  def __contains__(self, name):
    return name in self._entries


PROBLEMS = Registry("problem")
HPARAMS = Registry("hparams")


def register_problem(name=None):
  """Registers a Problem subclass under `name` (default: its class name)."""
  return PROBLEMS.register(name)


def register_hparams(name=None):
  """Registers a function returning an HParams under `name` (default: the function name)."""
  return HPARAMS.register(name)
