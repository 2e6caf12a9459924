"""The architecture the folders show (docs/design.md): layers that import only downwards, no
import loop, modules small enough to read, one declaration per training option."""
import argparse
import ast
import dataclasses
import pathlib
import re

from t2t_lite.bin import flags
from t2t_lite.bin import train as train_cli
from t2t_lite.train.train_config import TrainConfig

ROOT = pathlib.Path(__file__).resolve().parents[1]
# Lowest first. A module may import modules of its own layer or of a lower one. The plug-in
# folders (problems/, hparams/) build on the library; the registries find them by name.
LAYERS = (
    ("core", ("t2t_lite.errors", "t2t_lite.files", "t2t_lite.hyperparams", "t2t_lite.registry",
              "t2t_lite.search_space")),
    ("model", ("t2t_lite.modeling",)),
    ("data", ("t2t_lite.data",)),
    ("run directory", ("t2t_lite.rundir",)),
    ("decode", ("t2t_lite.decode",)),
    ("litert runtime", ("t2t_lite.litert",)),
    ("parsing", ("t2t_lite.parsing",)),
    ("plug-ins", ("t2t_lite.problems", "t2t_lite.hparams")),
    ("train", ("t2t_lite.train",)),
    ("tune", ("t2t_lite.tune",)),
    ("tools and API", ("t2t_lite.bin", "t2t_lite")),
)
FOLDERS = {"t2t_lite": "t2t_lite", "problems": "t2t_lite.problems", "hparams": "t2t_lite.hparams"}


def _modules():
  """{dotted name: (path, is a package)} of every module of the installed package."""
  modules = {}
  for folder, package in FOLDERS.items():
    for path in (ROOT / folder).rglob("*.py"):
      parts = list(path.relative_to(ROOT / folder).with_suffix("").parts)
      is_package = parts[-1] == "__init__"
      name = ".".join([package] + (parts[:-1] if is_package else parts))
      modules[name] = (path, is_package)
  return modules


MODULES = _modules()


def _imports(name, module_level_only=False):
  """The t2t_lite modules `name` imports (at any depth of its code, or at module level)."""
  path, is_package = MODULES[name]
  tree = ast.parse(path.read_text())
  nodes = tree.body if module_level_only else ast.walk(tree)
  package = name if is_package else name.rpartition(".")[0]
  found = set()
  for node in nodes:
    if isinstance(node, ast.Import):
      found |= {alias.name for alias in node.names}
    elif isinstance(node, ast.ImportFrom):
      base = node.module or ""
      if node.level:  # relative: from . import x
        base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]
                        + ([base] if base else []))
      for alias in node.names:
        full = f"{base}.{alias.name}"
        found.add(full if full in MODULES else base)
  return {module for module in found if module in MODULES}


def _layer(name):
  if name == "t2t_lite":
    return len(LAYERS) - 1
  matches = [(len(prefix), index) for index, (_, prefixes) in enumerate(LAYERS)
             for prefix in prefixes if prefix != "t2t_lite"
             and (name == prefix or name.startswith(prefix + "."))]
  return max(matches)[1] if matches else None


def test_every_module_has_a_layer():
  assert [name for name in MODULES if _layer(name) is None] == []


def test_no_module_imports_from_a_layer_above_it():
  upward = [f"{name} ({LAYERS[_layer(name)][0]}) imports {other} ({LAYERS[_layer(other)][0]})"
            for name in MODULES for other in _imports(name) if _layer(other) > _layer(name)]
  assert upward == []


def test_a_package_init_imports_nothing_above_its_lowest_module():
  """Importing any module runs its packages' __init__ first: were one to import a higher layer
  at module level, every module below would import it too."""
  for name, (_, is_package) in MODULES.items():
    if is_package:
      lowest = min(_layer(other) for other in MODULES if other.startswith(name + "."))
      above = [m for m in _imports(name, module_level_only=True) if _layer(m) > lowest]
      assert above == [], name


def test_the_import_graph_has_no_loop():
  """Every import, at module level or inside a function, is an edge; importing the package
  root (`import t2t_lite`, as model_dir.load once did) is one too, to its __init__'s imports."""
  edges = {name: _imports(name) for name in MODULES}
  state, loops = {}, []

  def visit(node, path):
    state[node] = "open"
    for other in sorted(edges[node]):
      if state.get(other) == "open":
        loops.append(" -> ".join(path[path.index(other):] + [other]))
      elif other not in state:
        visit(other, path + [other])
    state[node] = "done"

  for name in sorted(MODULES):
    if name not in state:
      visit(name, [name])
  assert loops == []


def test_the_design_doc_names_every_module():
  """docs/design.md's table says what each library module owns: a new module gets its line
  there (the plug-ins, problems and hparams sets, are described by their folder)."""
  design = (ROOT / "docs" / "design.md").read_text()
  unnamed = [name for name, (path, is_package) in MODULES.items()
             if not is_package and not name.startswith(("t2t_lite.problems", "t2t_lite.hparams"))
             and f"`{path.name}`" not in design]
  assert unnamed == []


def test_modules_are_short_and_long_functions_say_why():
  for name, (path, _) in MODULES.items():
    source = path.read_text()
    assert len(source.splitlines()) <= 400, name
    for node in ast.walk(ast.parse(source)):
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if node.end_lineno - node.lineno + 1 > 60:
          assert "Longer than" in (ast.get_docstring(node) or ""), f"{name}.{node.name}"


def test_no_module_is_named_like_a_common_parameter():
  """A module named like a parameter (model_dir, hparams, ...) is shadowed by it wherever both
  meet, and ends up imported under an alias. Common: used as a parameter in 3 modules or more.
  The plug-in packages keep the names the repository's folders give them."""
  uses = {}
  for name, (path, _) in MODULES.items():
    for node in ast.walk(ast.parse(path.read_text())):
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
        for arg in node.args.args + node.args.kwonlyargs + node.args.posonlyargs:
          uses.setdefault(arg.arg, set()).add(name)
  common = {arg for arg, names in uses.items() if len(names) >= 3}
  library = [name for name in MODULES if not name.startswith(("t2t_lite.problems",
                                                              "t2t_lite.hparams"))]
  named = sorted({part for name in library for part in name.split(".")[1:]} & common)
  assert named == []
  aliased = [name for name, (path, _) in MODULES.items()
             if re.search(r"^\s*(from t2t_lite\S* )?import \S+ as \w+_lib\b", path.read_text(),
                          re.M)]
  assert aliased == []


def test_the_trainer_calls_into_at_most_nine_modules():
  """The trainer composes the owners of the training state (train_state), its evaluations
  (evaluation), its stops (run_schedule), its steps, log, platform, configuration and the run
  directory's files and lease; it does the work of none of them."""
  imported = _imports("t2t_lite.train.trainer")
  assert len(imported) <= 9, sorted(imported)
  assert "t2t_lite.rundir.checkpoints" not in imported  # TrainState owns the checkpoints


# Called by the frameworks, not by name from our code: Keras layer and optimizer hooks,
# console scripts, Optuna's sampler hooks, importlib's loader hooks.
_PROTOCOL = {"call", "build", "get_config", "from_config", "compute_output_shape", "main",
             "update_step", "before_trial", "infer_relative_search_space", "sample_relative",
             "sample_independent", "after_trial", "create_module", "exec_module"}


def test_no_library_function_is_reachable_only_from_bench_or_tests():
  """Every public function and method of the library (t2t_lite/, problems/, hparams/) is
  reached from the library itself: a function only bench/ or tests/ call is a path no user
  reaches. It is reached where the library names it outside its own body: calls it (`f(...)`,
  `x.f`), imports it or looks it up by string (getattr). `self.f` inside a class reaches
  only the f of that class, its bases and its subclasses (classes matched by name), so that a
  method is not kept alive by another class' method of its name (Trainer.evaluate once was, by
  Evaluator.evaluate). Functions registered by a decorator (hparams sets, problems) are
  reached through their registry."""
  ANY = object()  # a use that may reach a method of any class, or a function
  defined, reached, bases = [], [], {}  # (name, class or None, where, (module, lines))
  for name, (path, _) in MODULES.items():
    tree = ast.parse(path.read_text())
    modules = {(alias.asname or alias.name).partition(".")[0] for node in ast.walk(tree)
               if isinstance(node, (ast.Import, ast.ImportFrom)) for alias in node.names}
    for node, owner, method in _with_classes(tree):
      if isinstance(node, ast.ClassDef):
        bases[node.name] = {ast.unparse(base).rpartition(".")[2] for base in node.bases}
      elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        if not (node.name.startswith("_") or node.name in _PROTOCOL or _registered(node)):
          defined.append((node.name, owner if method else None, f"{name}:{node.lineno}",
                          (name, node.lineno, node.end_lineno)))
      elif isinstance(node, ast.Attribute):
        value = node.value.id if isinstance(node.value, ast.Name) else None
        by = (owner if value == "self" else None if value in modules and not value[0].isupper()
              else ANY)  # self.f; module.f (a function: imported modules are lower case); x.f
        reached.append((node.attr, by, (name, node.lineno)))
      elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
        reached.append((node.id, None, (name, node.lineno)))  # a plain name is no method
      elif isinstance(node, ast.ImportFrom):
        reached += [(alias.name, None, (name, node.lineno)) for alias in node.names]
      elif isinstance(node, ast.Constant) and isinstance(node.value, str):
        reached.append((node.value, ANY, (name, node.lineno)))

  def ancestors(cls):
    found, todo = set(), [cls]
    while todo:
      for base in bases.get(todo.pop(), ()):
        if base not in found:
          found.add(base)
          todo.append(base)
    return found

  def related(cls, other):
    return cls == other or cls in ancestors(other) or other in ancestors(cls)

  def is_reached(function, owner, body):
    module, first, last = body
    return any(used == function and (by is ANY or by == owner or None not in (by, owner)
                                     and related(by, owner))
               and not (where[0] == module and first <= where[1] <= last)
               for used, by, where in reached)

  unreached = [where for function, owner, where, body in defined
               if not is_reached(function, owner, body)]
  assert unreached == [], "\n".join(unreached)


def _with_classes(tree):
  """(node, the name of the class whose body holds it or None, whether it is directly in that
  class' body: a method) for every node of `tree`."""
  stack = [(tree, None, False)]
  while stack:
    node, owner, method = stack.pop()
    yield node, owner, method
    is_class = isinstance(node, ast.ClassDef)
    inner = node.name if is_class else owner
    stack.extend((child, inner, is_class) for child in ast.iter_child_nodes(node))


def _registered(function):
  """Whether a decorator registers `function` by name (register_hparams, register_problem)."""
  return any("register" in ast.unparse(decorator) for decorator in function.decorator_list)


def test_the_trainer_asks_the_platform_and_never_tests_it():
  source = (ROOT / "t2t_lite" / "train" / "trainer.py").read_text()
  for word in ("is_tpu", "TPUStrategy", "MirroredStrategy", "MultiWorkerMirroredStrategy",
               "cluster_resolver", "list_physical_devices"):
    assert word not in source, word
  assert not re.search(r"isinstance\([^)]*strateg", source)


def test_every_train_config_field_has_exactly_one_flag_with_its_default():
  parser = argparse.ArgumentParser()
  flags.add_fields(parser, TrainConfig)
  fields = {field.name: field for field in dataclasses.fields(TrainConfig)}
  for name, field in fields.items():
    actions = [a for a in parser._actions if f"--{name}" in a.option_strings]
    assert len(actions) == 1, name
    default = None if field.default is dataclasses.MISSING else field.default
    assert actions[0].default == default, name
    assert actions[0].help == field.metadata["help"], name
    assert actions[0].choices == field.metadata.get("choices"), name
  # The CLI declares no training option of its own: every flag it adds beside the fields is
  # about what to train (problem, hparams, data) or about the tool.
  full = train_cli.parse_args(["--problem=algorithmic_reverse", "--model_dir=m"])
  assert set(vars(full)) - set(fields) == {
      "problem", "hparams", "hparams_overrides", "problem_settings", "data_dir", "raw_dir",
      "progress_seconds", "list", "verbose"}
  assert TrainConfig(**{name: getattr(full, name) for name in fields}) == TrainConfig(
      model_dir="m")


def test_boolean_options_take_the_three_spellings():
  parser = argparse.ArgumentParser()
  flags.add_fields(parser, TrainConfig)
  base = ["--model_dir=m"]
  assert parser.parse_args(base).xla is None  # the machine's default (mixed_precision.py)
  assert parser.parse_args(base + ["--xla"]).xla is True
  assert parser.parse_args(base + ["--noxla"]).xla is False
  assert parser.parse_args(base + ["--no-xla"]).xla is False
  assert parser.parse_args(base + ["--pack"]).pack is True
  assert parser.parse_args(base).static_shapes is None
