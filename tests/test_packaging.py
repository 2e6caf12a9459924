"""setup.py declares exactly what the product imports: no idle install requirement, no
undeclared import. The product is t2t_lite/, problems/ and hparams/ (bench/ and tests/ have
their extras)."""
import ast
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
PRODUCT = ("t2t_lite", "problems", "hparams")
# pip name -> import name, where they differ.
IMPORT_NAMES = {"tensorflow-text": "tensorflow_text", "tensorflow-datasets": "tensorflow_datasets"}
# Requirements the product needs at run time without importing them itself.
RUNTIME_ONLY = {
    # TFDS's WMT builders import these while preparing data but TFDS does not declare them.
    "importlib_resources",
    "dm-tree",
    # tf.summary.scalar is TensorBoard's (TF loads it from the tensorboard package), and users
    # run the `tensorboard` command on model_dir.
    "tensorboard",
}
# Optional extras of the product: the module imported -> (its extra, the distribution, the one
# module that imports it, inside a function: `import t2t_lite` and every other tool work
# without it).
OPTIONAL = {"ctranslate2": ("ctranslate2", "ctranslate2", "t2t_lite/decode/ctranslate2_export.py"),
            "ai_edge_litert": ("litert", "ai-edge-litert", "t2t_lite/litert/runtime.py")}


def _setup_keywords():
  """setup()'s keyword arguments, read from setup.py's syntax tree (nothing is executed)."""
  tree = ast.parse((ROOT / "setup.py").read_text())
  call = next(node for node in ast.walk(tree)
              if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "setup")
  return {k.arg: ast.literal_eval(k.value) for k in call.keywords
          if k.arg in ("install_requires", "extras_require")}


def _name(requirement):
  return re.split(r"[<>=!~;\[ ]", requirement, maxsplit=1)[0]


def _product_imports():
  """{top-level module: first file importing it} of the product's third-party imports,
  function-level (lazy) imports included."""
  own = set(PRODUCT)
  found = {}
  for package in PRODUCT:
    for path in sorted((ROOT / package).rglob("*.py")):
      for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
          names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
          names = [node.module]
        else:
          continue
        for name in names:
          top = name.split(".")[0]
          if top not in sys.stdlib_module_names and top not in own:
            found.setdefault(top, str(path.relative_to(ROOT)))
  return found


def test_install_requires_are_the_product_imports():
  requirements = [_name(r) for r in _setup_keywords()["install_requires"]]
  imported = _product_imports()
  declared = {IMPORT_NAMES.get(name, name): name for name in requirements
              if name not in RUNTIME_ONLY}
  undeclared = {module: path for module, path in imported.items()
                if module not in declared and module not in OPTIONAL}
  assert not undeclared, f"imported but not in install_requires: {undeclared}"
  idle = sorted(name for module, name in declared.items() if module not in imported)
  assert not idle, f"in install_requires but never imported by the product: {idle}"
  assert RUNTIME_ONLY <= set(requirements)
  # The ones this check is most about: present, and imported where expected.
  assert imported["sacremoses"] == "t2t_lite/data/scoring.py"
  assert imported["tensorflow_datasets"] == "problems/wmt.py"


def test_keras_hub_is_for_benchmarks_only():
  keywords = _setup_keywords()
  assert "keras-hub" not in map(_name, keywords["install_requires"])
  assert "keras-hub" in map(_name, keywords["extras_require"]["bench"])
  assert "keras_hub" not in _product_imports()


def test_optional_extras_are_imported_lazily_by_their_one_module():
  """ctranslate2 and ai_edge_litert: each its own extra, in the test extra (CI runs its tests),
  never required, and imported only inside functions of the one module that needs it."""
  keywords = _setup_keywords()
  imported = _product_imports()
  for name, (extra, distribution, owner) in OPTIONAL.items():
    assert distribution not in map(_name, keywords["install_requires"])
    assert distribution in map(_name, keywords["extras_require"][extra])
    assert distribution in map(_name, keywords["extras_require"]["test"])
    assert imported[name] == owner
    importers = []
    for package in PRODUCT:
      for path in sorted((ROOT / package).rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        nodes = [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
                 and any((alias.name if isinstance(node, ast.Import) else node.module or "")
                         .split(".")[0] == name for alias in node.names)]
        at_top = [node for node in nodes if node in tree.body]
        assert not at_top, f"{path} imports {name} at module level"
        importers += [str(path.relative_to(ROOT))] * bool(nodes)
    assert importers == [owner]
