"""t2t-lite-export --format=litert, through the consumer's path: the tool run as a process, its
model run by ai_edge_litert's own Interpreter in a process that never imports TensorFlow, and
its outputs compared with t2t-lite-decode's search (Translator, float32)."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from t2t_lite.decode import litert_export, translation
from t2t_lite.rundir import run_files
from test_processors import REVERSIBLE
from test_refusals import ENV, assert_refused_before_tensorflow, run_tool

# The reverser's search with beams and an n-best list (its own settings are beam 1, alpha 0).
SETTINGS = dict(beam_size=4, alpha=0.6, extra_length=6, n_best=2)
FLAGS = [f"--{name}={value}" for name, value in SETTINGS.items()]

# What a client of the export does with numpy and ai_edge_litert alone: argv[1] the export,
# argv[2] JSON [[lines, prefixes or null], ...], one batch each, all through one interpreter.
# Prints JSON [{"texts": [B][N], "scores": [B][N], "shape": ids' [B, N, L]}, ...].
CONSUMER = r"""
import itertools, json, sys
import numpy as np
from ai_edge_litert.interpreter import Interpreter

directory, batches = sys.argv[1], json.loads(sys.argv[2])
spec = json.load(open(f"{directory}/t2t_lite_litert.json"))
assert spec["tokenizer"]["kind"] == "words"
words = open(f"{directory}/{spec['tokenizer']['file']}").read().splitlines()
eos = spec["eos_id"]
interpreter = Interpreter(model_path=f"{directory}/model.tflite")
index = {d["name"]: d["index"]
         for d in interpreter.get_input_details() + interpreter.get_output_details()}
results = []
for lines, prefixes in batches:
  sources = [[words.index(w) for w in line.split()] for line in lines]
  forced = [[words.index(w) for w in p.split()] for p in prefixes or [""] * len(lines)]
  feed = {"inputs": np.zeros([len(lines), max(map(len, sources)) + 1], np.int32),  # [B, S]
          "prefix": np.zeros([len(lines), max(map(len, forced))], np.int32),  # [B, P]
          "max_lengths": np.array([max(len(s), len(f)) + 1 + spec["extra_length"]
                                   for s, f in zip(sources, forced)], np.int32)}  # [B]
  for row, (source, prefix) in enumerate(zip(sources, forced)):
    feed["inputs"][row, :len(source) + 1] = source + [eos]
    feed["prefix"][row, :len(prefix)] = prefix
  for key, value in feed.items():
    interpreter.resize_tensor_input(index[spec["inputs"][key]], value.shape)
  interpreter.allocate_tensors()
  for key, value in feed.items():
    interpreter.set_tensor(index[spec["inputs"][key]], value)
  interpreter.invoke()
  ids = interpreter.get_tensor(index[spec["outputs"]["ids"]])  # [B, N, L]
  scores = interpreter.get_tensor(index[spec["outputs"]["scores"]])  # [B, N]
  texts = [[" ".join(words[t] for t in itertools.takewhile(lambda t: t != eos, output))
            for output in row] for row in ids]
  results.append({"texts": texts, "scores": scores.tolist(), "shape": list(ids.shape)})
assert "tensorflow" not in sys.modules
print(json.dumps(results))
"""


def consume(directory, batches):
  """CONSUMER's results for `batches`, run in a fresh process."""
  run = subprocess.run([sys.executable, "-c", CONSUMER, str(directory), json.dumps(batches)],
                       capture_output=True, text=True, timeout=300, env=ENV)
  assert run.returncode == 0, run.stderr
  return json.loads(run.stdout)


def export(model_dir, export_dir, *flags):
  """t2t-lite-export --format=litert as a process -> the path it printed."""
  code, out, err = run_tool("export", "--format=litert", f"--model_dir={model_dir}",
                            f"--export_dir={export_dir}", *flags)
  assert code == 0, err
  assert out == f"{export_dir}\n"
  return out.strip()


@pytest.fixture(scope="module")
def exported(reversing_model, tmp_path_factory):
  return export(reversing_model, tmp_path_factory.mktemp("litert") / "float32", *FLAGS)


@pytest.fixture(scope="module")
def translator(reversing_model):
  return translation.Translator.from_model_dir(reversing_model, precision="none", **SETTINGS)


def test_directory_and_record(exported, reversing_model):
  assert sorted(os.listdir(exported)) == ["model.tflite", "t2t_lite_litert.json", "words.txt"]
  record = litert_export.read_record(exported)
  assert {k: record[k] for k in SETTINGS} == SETTINGS
  assert (record["format"], record["version"], record["quantization"]) == (
      "t2t-lite-litert", 1, "float32")
  assert (record["vocab_size"], record["pad_id"], record["eos_id"], record["unk_id"]) == (
      13, 0, 1, 2)
  assert record["tokenizer"] == {"kind": "words", "file": "words.txt"}
  assert record["plan"]["engine"] == "litert" and record["plan"]["precision"] == "none"
  assert record["max_input_length"] == 64 and record["model_dir"] == reversing_model
  assert sorted(record["inputs"]) == ["inputs", "max_lengths", "prefix"]
  with open(os.path.join(exported, "words.txt")) as f:
    assert f.read().split() == ["<pad>", "</s>", "<unk>"] + [str(i) for i in range(10)]


def test_outputs_are_decodes(exported, translator):
  """Two batches of other shapes through one interpreter: the n-best lists and scores of
  t2t-lite-decode's search."""
  batches = [REVERSIBLE[:3], REVERSIBLE[3:]]
  results = consume(exported, [[lines, None] for lines in batches])
  for lines, result in zip(batches, results):
    texts, scores = translator.translate(lines)
    assert result["texts"] == texts
    np.testing.assert_allclose(result["scores"], scores, atol=1e-4)
    assert result["shape"][:2] == [len(lines), SETTINGS["n_best"]]
  assert [r["texts"][0][0] for r in results] == ["7 4 9 3", "1 6 5"]  # It reverses.


def test_prefix(exported, translator):
  prefixes = ["1 6", "6 1"]  # One the reverse starts with, one it does not.
  (result,) = consume(exported, [[REVERSIBLE[3:], prefixes]])
  texts, scores = translator.translate(REVERSIBLE[3:], prefixes=prefixes)
  assert result["texts"] == texts
  np.testing.assert_allclose(result["scores"], scores, atol=1e-4)
  for prefix, outputs in zip(prefixes, result["texts"]):
    assert all(output.startswith(prefix + " ") for output in outputs), outputs


def test_empty_prefix_is_none(translator):
  """One graph serves both: a [B, 0] prefix searches exactly as none."""
  inputs = tf.constant([[3, 4, 5, 1], [6, 7, 1, 0]], tf.int32)
  max_lengths = tf.constant([10, 9], tf.int32)
  ids, scores = translator.search_ids(inputs, max_lengths)
  ids_p, scores_p = translator.search_ids(inputs, max_lengths, tf.zeros([2, 0], tf.int32))
  np.testing.assert_array_equal(ids_p, ids)
  np.testing.assert_array_equal(scores_p, scores)


def test_int8(reversing_model, tmp_path):
  path = export(reversing_model, tmp_path / "int8", "--quantization=int8", *FLAGS)
  assert litert_export.read_record(path)["quantization"] == "int8"
  (result,) = consume(path, [[REVERSIBLE, None]])
  assert result["shape"][:2] == [len(REVERSIBLE), SETTINGS["n_best"]]
  assert result["shape"][2] >= 1 + max(len(line.split()) for line in REVERSIBLE)
  assert len(result["texts"]) == len(REVERSIBLE)


def test_float16(reversing_model, tmp_path, translator, exported):
  """Weights in float16 (small constants kept float32): padded batches decode as float32."""
  path = export(reversing_model, tmp_path / "float16", "--quantization=float16", *FLAGS)
  size = lambda directory: os.path.getsize(os.path.join(directory, "model.tflite"))
  assert size(path) < 0.6 * size(exported)
  (result,) = consume(path, [[REVERSIBLE, None]])
  texts, scores = translator.translate(REVERSIBLE)
  assert result["texts"] == texts
  np.testing.assert_allclose(result["scores"], scores, atol=1e-2)


def test_cached(reversing_model, tmp_path):
  """t2t-lite-decode --engine=litert's cache beside the run: made once, again for other
  settings (but not for a smaller n_best)."""
  import shutil
  model_dir = str(tmp_path / "run")
  shutil.copytree(reversing_model, model_dir)
  path = litert_export.cached(model_dir, "float32", **SETTINGS)
  assert path == run_files.litert_cache_dir(model_dir, "float32")
  made = os.stat(os.path.join(path, "model.tflite")).st_mtime_ns
  assert litert_export.cached(model_dir, "float32", **SETTINGS) == path
  # Fewer outputs a sentence than it was made for: the same export serves them.
  assert litert_export.cached(model_dir, "float32", **dict(SETTINGS, n_best=1)) == path
  assert os.stat(os.path.join(path, "model.tflite")).st_mtime_ns == made
  litert_export.cached(model_dir, "float32", **dict(SETTINGS, beam_size=2))
  assert litert_export.read_record(path)["beam_size"] == 2
  assert sorted(os.listdir(os.path.dirname(path))) == ["float32"]


@pytest.mark.parametrize("flags, reason", [
    (["--sample"], "sampling with the LiteRT engine"),
    (["--precision=bf16"], "--format=litert with --precision=bf16"),
    (["--quantization=int8_float32"], "quantization 'int8_float32' is not one of"),
    (["--with_alignments"], "word alignments with the LiteRT engine"),
    (["--constraints"], "lexical constraints with the LiteRT engine"),
])
def test_refused(reversing_model, tmp_path, flags, reason):
  export_dir = tmp_path / "export"
  assert_refused_before_tensorflow(
      "export", ["--format=litert", f"--model_dir={reversing_model}",
                 f"--export_dir={export_dir}", *flags], reason, tmp_path)
  assert not export_dir.exists()


def test_refused_ensemble_and_export_dir(reversing_model, tmp_path):
  export_dir = tmp_path / "export"
  assert_refused_before_tensorflow(
      "export", ["--format=litert", f"--model_dir={reversing_model}",
                 f"--model_dir={reversing_model}", f"--export_dir={export_dir}"],
      "an ensemble with the LiteRT engine", tmp_path)
  assert not export_dir.exists()
  export_dir.mkdir()
  (export_dir / "notes.txt").write_text("mine")
  assert_refused_before_tensorflow(
      "export", ["--format=litert", f"--model_dir={reversing_model}",
                 f"--export_dir={export_dir}"], "is not empty", tmp_path)
  assert os.listdir(export_dir) == ["notes.txt"]
