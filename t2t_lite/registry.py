"""Name -> object registries for problems, hparams sets and ranged hparams (search spaces), with
"did you mean" errors.

The registered problems, hparams sets and ranged hparams live in the repository's `problems/`
and `hparams/` folders, installed as `t2t_lite.problems` and `t2t_lite.hparams`. A registry
imports its plug-in package (which runs their `register_*` decorators) the first time it is
asked for a name, by its name: the registries sit below everything else, and the plug-ins
build on the library.
"""
import importlib

from t2t_lite.errors import T2TLiteError, did_you_mean


class RegistryError(T2TLiteError, KeyError):
  """An unknown or duplicate name. str() is a one-line, human-readable message."""

  def __str__(self):
    return self.args[0]


class Registry:
  """A name -> value map that refuses duplicates and suggests close matches on a typo."""

  def __init__(self, kind, plugins):
    self.kind = kind  # "problem", "hparams" or "ranged hparams", used in error messages.
    self.plugins = plugins  # The package whose import registers the built-in entries.
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

  def _entries_loaded(self):
    importlib.import_module(self.plugins)  # Once: Python caches the import.
    return self._entries

  def get(self, name):
    entries = self._entries_loaded()
    if name not in entries:
      raise RegistryError(f"unknown {self.kind} {name!r}{did_you_mean(name, entries)} "
                          f"(known: {', '.join(sorted(entries))})")
    return entries[name]

  def names(self):
    return sorted(self._entries_loaded())

  def __contains__(self, name):
    return name in self._entries_loaded()


PROBLEMS = Registry("problem", "t2t_lite.problems")
HPARAMS = Registry("hparams", "t2t_lite.hparams")
# Search spaces (t2t_lite/search_space.py) by name, tensor2tensor's ranged hparams: they live
# beside the hparams sets they range over.
RANGED_HPARAMS = Registry("ranged hparams", "t2t_lite.hparams")


def register_problem(name=None):
  """Registers a Problem subclass under `name` (default: its class name)."""
  return PROBLEMS.register(name)


def register_hparams(name=None):
  """Registers a function returning an HParams under `name` (default: the function name)."""
  return HPARAMS.register(name)


def register_ranged_hparams(name=None):
  """Registers a function returning a SearchSpace under `name` (default: the function name)."""
  return RANGED_HPARAMS.register(name)


def get_ranged_hparams(name):
  """The search space registered as `name` (its own ranges checked; the fields it ranges over
  are checked by SearchSpace.check)."""
  return RANGED_HPARAMS.get(name)()


def get_hparams(name, overrides=""):
  """The registered hparams set `name` with `overrides` ("a=1,b=2") applied."""
  return HPARAMS.get(name)().override(overrides)


def get_problem(name, **settings):
  """An instance of the registered problem `name`, with `settings` (its class settings, e.g.
  vocab_size) changed and checked."""
  return PROBLEMS.get(name)(**settings)


def problem_settings(name, text):
  """"name=value,..." -> the settings dict of problem `name` (see Problem.parse_settings)."""
  return PROBLEMS.get(name).parse_settings(text)
