"""Name -> object registries for problems, hparams sets and ranged hparams (search spaces), with
"did you mean" errors.

The registered problems, hparams sets and ranged hparams live in the repository's `problems/`
and `hparams/` folders, installed as `t2t_lite.problems` and `t2t_lite.hparams`. A registry
knows their names without importing them: it reads the plug-ins' source for the decorators that
register them (`@register_problem("name")`, `@register_hparams()`: the name given, or the
function's or class's), so that a tool refuses an unknown name, or lists the names, before the
plug-ins load TensorFlow. It imports its plug-in package (which runs the decorators) the first
time it is asked for what a name registers, by the package's name: the registries sit below
everything else, and the plug-ins build on the library. A plug-in module that registers a name
its source does not spell out (one computed at run time) is imported to learn it.
"""
import ast
import importlib
import importlib.util
import os

from t2t_lite.errors import T2TLiteError, did_you_mean


class RegistryError(T2TLiteError, KeyError):
  """An unknown or duplicate name. str() is a one-line, human-readable message."""

  def __str__(self):
    return self.args[0]


class Registry:
  """A name -> value map that refuses duplicates and suggests close matches on a typo."""

  def __init__(self, kind, plugins, register_function):
    self.kind = kind  # "problem", "hparams" or "ranged hparams", used in error messages.
    self.plugins = plugins  # The package whose import registers the built-in entries.
    self.register_function = register_function  # What the plug-ins register through, by name.
    self._entries = {}
    self._source_names = None  # The built-in names, read from the plug-ins' source once.

  def register(self, name=None):
    """Decorator: `@registry.register()` uses the function/class name, or pass a name."""

    def decorator(value):
      key = name or value.__name__
      if key in self._entries:
        raise RegistryError(f"{self.kind} {key!r} is already registered")
      self._entries[key] = value
      return value

    return decorator

  def _builtin_names(self):
    """The names the plug-in package registers, read from its source without importing it;
    a module whose names cannot be read that way (or a package without readable source) is
    imported, and registers them itself."""
    if self._source_names is None:
      names = set()
      for module, source in _plugin_sources(self.plugins):
        found = None if source is None else _names_in_source(source, self.register_function)
        if found is None:
          importlib.import_module(module)
        else:
          names |= found
      self._source_names = names
    return self._source_names

  def check(self, name):
    """Refuses an unknown name (RegistryError: the close ones and every known one), without
    importing the plug-ins."""
    if name not in self:
      known = self.names()
      raise RegistryError(f"unknown {self.kind} {name!r}{did_you_mean(name, known)} "
                          f"(known: {', '.join(known)})")

  def get(self, name):
    self.check(name)
    if name not in self._entries:
      importlib.import_module(self.plugins)  # Once: Python caches the import.
    return self._entries[name]

  def names(self):
    builtin = self._builtin_names()  # First: reading them may import (and register) some.
    return sorted(builtin | set(self._entries))

  def __contains__(self, name):
    builtin = self._builtin_names()  # First: reading them may import (and register) some.
    return name in builtin or name in self._entries


def _plugin_sources(package):
  """(module name, its source text or None when it cannot be read) of the package's modules,
  found the way its import would find them, without running it."""
  spec = importlib.util.find_spec(package)
  if spec is None:  # Not installed: the import says so, as it always has.
    return [(package, None)]
  modules = []
  for folder in spec.submodule_search_locations or []:
    try:
      paths = sorted(name for name in os.listdir(folder) if name.endswith(".py"))
    except OSError:  # Not a folder on disk (a zip file, say).
      return [(package, None)]
    for name in paths:
      module = package if name == "__init__.py" else f"{package}.{name[:-3]}"
      try:
        with open(os.path.join(folder, name), encoding="utf-8") as f:
          modules.append((module, f.read()))
      except (OSError, UnicodeDecodeError):
        modules.append((module, None))
  return modules or [(package, None)]


def _names_in_source(source, function):
  """The names a module's source registers through `function` (a name: register_problem), or
  None when it registers one that the source does not spell out: a call with another argument
  than one string or (as a decorator) none, or the function passed around."""
  tree = ast.parse(source)
  decorated = {call: node.name for node in ast.walk(tree)
               if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
               for call in node.decorator_list}
  names, calls = set(), set()
  for node in ast.walk(tree):
    if isinstance(node, ast.Call) and _named(node.func) == function:
      calls.add(node.func)
      given = node.args + [keyword.value for keyword in node.keywords]
      if not given and node in decorated:
        names.add(decorated[node])
      elif (len(given) == 1 and isinstance(given[0], ast.Constant)
            and isinstance(given[0].value, str)):
        names.add(given[0].value)
      else:
        return None
  others = [node for node in ast.walk(tree) if isinstance(node, (ast.Name, ast.Attribute))
            and _named(node) == function and node not in calls]
  return None if others else names


def _named(node):
  """The name a Name or an Attribute node ends with (register_problem of
  registry.register_problem), else None."""
  return getattr(node, "id", None) or getattr(node, "attr", None)


PROBLEMS = Registry("problem", "t2t_lite.problems", "register_problem")
HPARAMS = Registry("hparams", "t2t_lite.hparams", "register_hparams")
# Search spaces (t2t_lite/search_space.py) by name, tensor2tensor's ranged hparams: they live
# beside the hparams sets they range over.
RANGED_HPARAMS = Registry("ranged hparams", "t2t_lite.hparams", "register_ranged_hparams")


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
