"""Contracts of the repository's layout that no unit test of a module would catch."""
import ast
import importlib
import json
import os
import pathlib
import shutil
import subprocess
import sys

import t2t_lite

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _calls(tree):
  """Dotted names of every call in `tree`: "tf.GradientTape", "optimizer.apply", ..."""
  names = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Call):
      parts, func = [], node.func
      while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
      if isinstance(func, ast.Name):
        parts.append(func.id)
      names.append(".".join(reversed(parts)))
  return names


def _bench_module(name):
  """Imports bench/<name>.py (the benchmarks import each other from beside themselves)."""
  sys.path.insert(0, str(ROOT / "bench"))
  try:
    return importlib.import_module(name)
  finally:
    sys.path.remove(str(ROOT / "bench"))


def test_train_benchmark_times_the_trainers_own_step():
  tree = ast.parse((ROOT / "bench" / "train_throughput.py").read_text())
  imported = {(node.module, alias.name) for node in ast.walk(tree)
              if isinstance(node, ast.ImportFrom) for alias in node.names}
  assert ("t2t_lite.train.steps", "make_train_step") in imported
  defined = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
  assert "make_train_step" not in defined
  calls = _calls(tree)
  assert "make_train_step" in calls
  # No step of its own: no gradients taken and no optimizer update outside the library's step.
  for name in calls:
    last = name.rsplit(".", 1)[-1]
    assert last not in ("GradientTape", "gradient", "apply_gradients", "apply"), name


def test_train_benchmark_matmul_floor_holds_every_matmul_flop():
  """The floor times our step's matmuls one by one: they must add up to the FLOPs that the
  benchmark divides by, shape by shape, for both model sizes."""
  train_throughput = _bench_module("train_throughput")
  sizes = {name: train_throughput.model_hparams(name) for name in ("transformer_base", "small")}
  sizes["small, 1 decoder layer"] = sizes["small"].replace(decoder_layers=1)
  for name, hp in sizes.items():
    matmuls = train_throughput.step_matmuls(hp)
    flops = sum(2 * batches * m * k * n * count
                for (batches, m, k, n, _, _), count in matmuls.items())
    assert flops == train_throughput.train_flops(hp), name
    # Forward, input gradient and weight gradient of each forward matmul: 6 a layer in the
    # encoder, 6 + 5 in the decoder, and the vocabulary projection (for transformer_base, the
    # 309 dots of the step's optimized XLA module).
    transposes = {(ta, tb) for (*_, ta, tb) in matmuls}
    assert transposes == {(False, False), (False, True), (True, False)}
    assert sum(matmuls.values()) == 3 * (6 * hp.num_layers + 11 * hp.decoder_depth + 1), name


def test_step_trace_tells_matmuls_from_the_other_ops():
  """bench/step_trace.py, from a real profiler trace: a chain of matmuls is matmul time, an
  elementwise chain is the other ops' time, named by op type."""
  import tensorflow as tf
  step_trace = _bench_module("step_trace")
  x = tf.random.normal([1024, 1024])
  matmuls = step_trace.split_step(tf.function(lambda x: tf.matmul(tf.matmul(x, x), x)), x)
  elementwise = step_trace.split_step(tf.function(lambda x: tf.exp(tf.tanh(x) * 2.0)), x)
  assert matmuls["matmul_busy_ms"] > 5 * matmuls["other_only_ms"], matmuls
  assert elementwise["matmul_busy_ms"] == 0, elementwise
  assert elementwise["other_only_ms"] > 0, elementwise
  # The step's own ops by type; not the executor's or the thread pool's scopes around them.
  assert set(elementwise["other_only_by_op"]) == {"Exp", "Tanh", "Mul"}, elementwise
  for split in (matmuls, elementwise):  # the ops' time lies inside the timed steps
    assert 0 <= split["idle_ms"] < split["traced_step_ms"], split


_INSTALLED_CHECK = """
import importlib.util, json, sys
import t2t_lite
found = {name: importlib.util.find_spec(name) is not None for name in ("problems", "hparams")}
problems, hparams = t2t_lite.list_problems(), t2t_lite.list_hparams()
for name in problems:
  t2t_lite.get_problem(name)
for name in hparams:
  t2t_lite.get_hparams(name)
print(json.dumps({"top_level": found, "problems": problems, "hparams": hparams,
                  "package": t2t_lite.__file__}))
"""


def test_installed_package_keeps_plugins_inside_its_namespace(tmp_path):
  """pip-installed (a wheel, as from PyPI), nothing named `problems` or `hparams` lands in
  site-packages, and every registered problem and hparams set is still found."""
  source, site = tmp_path / "source", tmp_path / "site"
  source.mkdir()
  shutil.copy(ROOT / "setup.py", source / "setup.py")
  for folder in ("t2t_lite", "problems", "hparams"):
    shutil.copytree(ROOT / folder, source / folder,
                    ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
  subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                  "--no-build-isolation", "--target", str(site), str(source)],
                 check=True, cwd=tmp_path, capture_output=True)
  packages = {p.name for p in site.iterdir() if (p / "__init__.py").exists()}
  assert packages == {"t2t_lite"}  # (site also holds the dist-info and the console scripts)
  env = dict(os.environ, PYTHONPATH=str(site), TF_CPP_MIN_LOG_LEVEL="3")
  run = subprocess.run([sys.executable, "-c", _INSTALLED_CHECK], cwd=tmp_path, env=env,
                       capture_output=True, text=True, check=True)
  result = json.loads(run.stdout.splitlines()[-1])
  assert result["package"].startswith(str(site))
  assert result["top_level"] == {"problems": False, "hparams": False}
  assert result["problems"] == t2t_lite.list_problems()
  assert result["hparams"] == t2t_lite.list_hparams()
