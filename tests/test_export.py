"""t2t-lite-export: a SavedModel that a process without t2t_lite answers like t2t-lite-decode.

The model_dir is made the way t2t-lite-train lays it out (hparams.json, run.json, vocab.model,
a CheckpointManager checkpoint of the model), with a tiny Transformer at random weights and a
SentencePiece vocabulary trained here on synthetic text in several scripts.
"""
import base64
import contextlib
import io
import json
import os
import random
import re
import subprocess
import sys

import keras
import pytest
import tensorflow as tf
from tensorflow.core.framework import types_pb2
from tensorflow.core.protobuf import saved_model_pb2

import t2t_lite
from t2t_lite.decode import translation
from t2t_lite.decode import export
from t2t_lite.modeling import mixed_precision
from t2t_lite.rundir import run_files
from t2t_lite.bin import decode as decode_cli
from t2t_lite.bin import export as export_cli

_WORDS = ("a man rides horse the dog runs in park woman with red hat over bridge "
          "ein mann reitet über die straße hund läuft im grünen "
          "東京 猫 犬 走る кошка спит собака бежит مرحبا بالعالم").split()

# One batch: plain, empty and blank lines, a 1,000-word line, non-Latin text, invalid UTF-8.
LONG = " ".join(_WORDS[i % len(_WORDS)] for i in range(1000))
REQUEST = [b"a man rides the horse", "ein hund läuft über die straße".encode(), b"", b" \t ",
           LONG.encode(), "東京 猫 走る".encode(), "кошка спит".encode(), "مرحبا بالعالم".encode(),
           b"the dog \xff\xfe runs", b"\x80"]
# What each element means as text: invalid bytes are replaced by U+FFFD, one per bad byte.
REQUEST_TEXT = [r.decode("utf-8", errors="replace") for r in REQUEST]
# The module's export and decodes allow 10 output tokens past the input instead of the default
# 50: random weights seldom emit EOS, so this keeps the 1,000-sentence comparisons short.
EXTRA_LENGTH = 10
# How far an export's score may be from decode's for the same sentence. In bfloat16 (what
# "auto" chooses on a CPU with AVX-512 bf16) each matmul's output is rounded, and a batch of
# another shape (decode's batches of 32 sentences of like length, a client's one batch) rounds
# some of them otherwise: 0.017 at most over these 1,010 sentences (Zen 4, oneDNN); float32's
# differences are below 1e-5. Two outputs that close to a tie may come out either way.
SCORE_TOLERANCE = 0.05

# Runs in a fresh interpreter: argv = [SavedModel path, JSON file of the requests]. Answers every
# request through TF Serving's loading path (the TF1 session loader: import the MetaGraph, run
# the saver's restore op and the init op, then each signature by tensor name), and every request
# but the 1,000 sentences through the TF2 object-graph loader (`tf.saved_model.load`) too.
_CLIENT = r"""
import base64, json, sys
import numpy
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.python.framework import op_def_registry

path, request_file = sys.argv[1], sys.argv[2]
saved_model = saved_model_pb2.SavedModel()
with tf.io.gfile.GFile(path + "/saved_model.pb", "rb") as f:
  saved_model.ParseFromString(f.read())
ops, functions, xla_functions = set(), set(), []
for meta_graph in saved_model.meta_graphs:
  ops.update(node.op for node in meta_graph.graph_def.node)
  for function in meta_graph.graph_def.library.function:
    functions.add(function.signature.name)
    ops.update(node.op for node in function.node_def)
    if function.attr["_XlaMustCompile"].b:
      xla_functions.append(function.signature.name)
ops -= functions  # A call of a library function by name is not an op type.
core = {op for op in ops if op_def_registry.get(op) is not None}
import tensorflow_text  # noqa: F401  (registers TF Text's ops, as TF Serving links them in)
tf_text = {op for op in ops - core if op_def_registry.get(op) is not None}

with open(request_file) as f:
  request = json.load(f)
texts = {name: [base64.b64decode(s) for s in batch] for name, batch in request["text"].items()}
requests = [("serving_default", name, batch) for name, batch in texts.items()]
requests.append(("translate_ids", "ids", request["ids"]))

def answer(signature, name, result):
  if signature == "serving_default":
    result["outputs"] = [s.decode("utf-8") for s in result["outputs"]]
  return {key: value.tolist() if hasattr(value, "tolist") else value
          for key, value in result.items()}

tf1 = {}
with tf.Graph().as_default(), tf.compat.v1.Session() as session:
  meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
  for signature, name, batch in requests:
    signature_def = meta_graph.signature_def[signature]
    fetches = {key: info.name for key, info in signature_def.outputs.items()}
    dtype = object if signature == "serving_default" else "int32"
    feed = {signature_def.inputs["inputs"].name: numpy.array(batch, dtype=dtype)}
    tf1[name] = answer(signature, name, session.run(fetches, feed))

loaded = tf.saved_model.load(path)
tf2 = {}
for signature, name, batch in requests:
  if name in ("many", "pair"):
    continue  # The TF1 path answers these; here the other batches cover both signatures.
  dtype = tf.string if signature == "serving_default" else tf.int32
  inputs = tf.constant(batch, dtype, shape=[0] if not len(batch) else None)
  result = loaded.signatures[signature](inputs=inputs)
  tf2[name] = answer(signature, name, {k: v.numpy() for k, v in result.items()})
# Batches of the wrong rank: a client's mistake, answered with an error that says so.
refused = {}
for name, signature, batch in (("2d_text", "serving_default", [["a man"], ["ein hund"]]),
                               ("3d_ids", "translate_ids", [[[3, 1], [3, 1]]])):
  try:
    loaded.signatures[signature](inputs=tf.constant(batch))
    refused[name] = None
  except Exception as e:
    refused[name] = [type(e).__name__, str(e)]
print(json.dumps({
    "tf1": tf1, "tf2": tf2, "refused": refused,
    "core_ops": sorted(core), "tf_text_ops": sorted(tf_text),
    "unregistered_ops": sorted(ops - core - tf_text), "xla_functions": xla_functions,
    "modules": sorted(m for m in sys.modules if m.split(".")[0] in
                      ("t2t_lite", "sentencepiece", "keras_hub", "problems", "hparams")),
}))
"""

# `saved_model_cli` with TF Text's ops registered, as the model server links them in (the stock
# saved_model_cli loads no op library, so it cannot import a graph with SentencePiece ops).
_SAVED_MODEL_CLI_WITH_TF_TEXT = (
    "import sys; import tensorflow_text; from tensorflow.python.tools import saved_model_cli; "
    "sys.argv[0] = 'saved_model_cli'; saved_model_cli.main()")


def _run_cli(argv):
  """(exit code, stdout, stderr) of t2t-lite-export run in this process."""
  out, err = io.StringIO(), io.StringIO()
  with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
    code = export_cli.main(argv)
  return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="module")
def model_dir(make_random_model_dir):
  return make_random_model_dir("export", _WORDS, checkpoint_number=10)


@pytest.fixture(scope="module")
def export_dir(model_dir, tmp_path_factory):
  """Exported as on a machine whose TensorFlow has no oneDNN, where decoding compiles its
  float32 matmuls (plan.compiled_matmuls): not an export, whose graph is served
  elsewhere (test_graph_holds_only_core_tensorflow_and_tf_text_ops: no XLA functions)."""
  export_dir = str(tmp_path_factory.mktemp("exports"))
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(mixed_precision, "_onednn_on", lambda: False)
    code, out, err = _run_cli(["--model_dir", model_dir, "--export_dir", export_dir,
                               "--extra_length", str(EXTRA_LENGTH)])
  assert code == 0, err
  assert out.strip() == os.path.join(export_dir, "1")
  return export_dir


def _many_sentences(count=1000):
  rng = random.Random(1)
  return [" ".join(rng.choice(_WORDS) for _ in range(rng.randint(1, 20))).encode()
          for _ in range(count)]


def _decode_cli(model_dir, lines, tmp_path, *flags):
  """t2t-lite-decode run as its own process on `lines` (bytes) -> its output lines."""
  (tmp_path / "decode_in.txt").write_bytes(b"".join(line + b"\n" for line in lines))
  run = subprocess.run(
      [sys.executable, "-m", "t2t_lite.bin.decode", "--model_dir", model_dir, "--input_file",
       str(tmp_path / "decode_in.txt"), "--output_file", str(tmp_path / "decode_out.txt"),
       "--no_progress", *flags], capture_output=True, text=True, check=False)
  assert run.returncode == 0, run.stderr[-3000:]
  return (tmp_path / "decode_out.txt").read_text(encoding="utf-8").split("\n")[:-1]


def _decode_here(model_dir, lines, tmp_path, *flags):
  """What t2t-lite-decode writes for `lines` (bytes), run in this process: what a test compares
  another tool's answers with, where decode is not the tool it tests (no TensorFlow start)."""
  (tmp_path / "decode_in.txt").write_bytes(b"".join(line + b"\n" for line in lines))
  code = decode_cli.main(["--model_dir", model_dir, "--input_file", str(tmp_path / "decode_in.txt"),
                          "--output_file", str(tmp_path / "decode_out.txt"), "--no_progress",
                          *flags])
  assert code == 0
  return (tmp_path / "decode_out.txt").read_text(encoding="utf-8").split("\n")[:-1]


def _best_of_n_best(lines, count):
  """Moses n-best lines ("i ||| output ||| score") -> [(output, score)], each of the `count`
  input lines' first (its best)."""
  best = {}
  for line in lines:
    i, output, score = line.split(" ||| ")
    best.setdefault(int(i), (output, float(score)))
  assert sorted(best) == list(range(count))
  return [best[i] for i in range(count)]


def _assert_answers_like_decode(outputs, scores, decoded):
  """An export's outputs and scores for a batch are what decode wrote for its lines (`decoded`:
  [(output, score)]): every score decode's within SCORE_TOLERANCE, and every output decode's
  but for one in 200 at most (one in a smaller batch), each a tie: the export's output scores
  what decode's does. Another checkpoint, setting, tokenization or kernel changes far more
  outputs, and scores by far more (see `decoded`)."""
  assert len(outputs) == len(scores) == len(decoded) > 0
  for i, (score, (output, decoded_score)) in enumerate(zip(scores, decoded)):
    assert score == pytest.approx(decoded_score, abs=SCORE_TOLERANCE), (i, outputs[i], output)
  ties = [(i, got, output) for i, (got, (output, _)) in enumerate(zip(outputs, decoded))
          if got != output]
  assert len(ties) <= max(1, len(decoded) // 200), ties


@pytest.fixture(scope="module")
def served(model_dir, export_dir, tmp_path_factory):
  """The requests answered by the export loaded in a fresh process with only TF and TF Text,
  through the TF1 session loader (TF Serving's path) and the TF2 loader."""
  source_ids = [t2t_lite.get_problem("multi30k_ende").tokenizer(model_dir).encode(text)
                for text in REQUEST_TEXT[:2]]
  width = max(map(len, source_ids)) + 2
  ids = [s + [1] + [0] * (width - len(s) - 1) for s in source_ids]  # EOS, then padding
  request_file = tmp_path_factory.mktemp("client") / "request.json"
  # "pair": the sentences of `ids` as text, a batch of the shape the ids make (not the hostile
  # batch's: in bfloat16 a batch of another shape rounds some products otherwise).
  batches = {"hostile": REQUEST, "empty": [], "many": _many_sentences(), "pair": REQUEST[:2]}
  request_file.write_text(json.dumps({
      "text": {name: [base64.b64encode(r).decode() for r in batch]
               for name, batch in batches.items()},
      "ids": ids}))
  client = subprocess.run(
      [sys.executable, "-c", _CLIENT, os.path.join(export_dir, "1"), str(request_file)],
      capture_output=True, text=True, check=False)
  assert client.returncode == 0, client.stderr[-3000:]
  return json.loads(client.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def decoded(model_dir, tmp_path_factory):
  """What t2t-lite-decode (its own process) writes for the hostile batch, then the 1,000:
  {"hostile": [(output, score)], "many": [...]}, each line's best with its score (--n_best=2:
  the same search, its scores written). With this machine's TensorFlow as it comes, as the
  export is served: with oneDNN turned off in decode alone, its bfloat16 products were Eigen's,
  not the export's oneDNN's, and 233 of the 1,010 outputs differed, scores by up to 4.6. (This
  64-wide model compiles no matmuls where oneDNN is off: plan.compiled_matmuls,
  from 256 wide.)"""
  lines = _decode_cli(model_dir, REQUEST + _many_sentences(), tmp_path_factory.mktemp("decode"),
                      "--extra_length", str(EXTRA_LENGTH), "--n_best=2")
  best = _best_of_n_best(lines, len(REQUEST) + 1000)
  return {"hostile": best[:len(REQUEST)], "many": best[len(REQUEST):]}


def test_tf_serving_loader_answers_like_t2t_lite_decode(served, decoded):
  tf1 = served["tf1"]
  assert served["modules"] == []  # neither t2t_lite nor the sentencepiece package
  for name in ("hostile", "many"):
    _assert_answers_like_decode(tf1[name]["outputs"], tf1[name]["scores"], decoded[name])
  assert tf1["empty"] == {"outputs": [], "scores": [], "truncated": []}
  assert len(decoded["many"]) == 1000 and all(output for output, _ in decoded["many"])


def test_tf1_and_tf2_loaders_give_the_same_answers(served):
  assert sorted(served["tf2"]) == ["empty", "hostile", "ids"]
  for name in ("hostile", "empty", "ids"):
    tf1, tf2 = served["tf1"][name], served["tf2"][name]
    assert tf1["outputs"] == tf2["outputs"] and tf1["truncated"] == tf2["truncated"], name
    assert tf1["scores"] == pytest.approx(tf2["scores"], abs=1e-5), name


def test_fresh_process_translates_like_t2t_lite_translate(model_dir, served):
  texts, scores = translation.translate(model_dir, REQUEST_TEXT, extra_length=EXTRA_LENGTH)
  answer = served["tf1"]["hostile"]
  assert answer["outputs"] == texts
  assert answer["scores"] == pytest.approx(scores, abs=1e-4)
  assert sum(bool(t) for t in texts) == len(texts) - 2  # only "" and " \t " give no output


def test_every_element_of_a_hostile_batch_gets_an_output(served):
  answer = served["tf1"]["hostile"]
  assert len(answer["outputs"]) == len(answer["scores"]) == len(REQUEST)
  assert answer["truncated"] == [i == REQUEST.index(LONG.encode()) for i in range(len(REQUEST))]
  assert answer["outputs"][2:4] == ["", ""] and answer["scores"][2:4] == [0.0, 0.0]
  assert all(s < 0 for i, s in enumerate(answer["scores"]) if i not in (2, 3))


def test_translate_ids_signature_returns_the_same_best_outputs(model_dir, served):
  vocab = t2t_lite.get_problem("multi30k_ende").tokenizer(model_dir)
  ids, text = served["tf1"]["ids"], served["tf1"]["pair"]
  assert len(ids["outputs"]) == 2 and min(len(row) for row in ids["outputs"]) >= 1
  assert [vocab.decode([t for t in row if t]) for row in ids["outputs"]] == text["outputs"]
  assert ids["scores"] == pytest.approx(text["scores"], abs=1e-4)
  assert all(1 not in row for row in ids["outputs"])  # EOS is not part of the output ids


def test_a_batch_of_the_wrong_rank_is_refused_with_a_clear_message(served):
  """A 2-D string batch ([2, 1]) and a 3-D batch of ids: refused by the signature, naming the
  shape it expects (through the TF2 loader, in the client process above)."""
  refused = served["refused"]
  assert refused["2d_text"][0] == "InvalidArgumentError", refused
  assert re.search(r"Shape of tensor inputs \[2,1\] is not compatible with expected shape "
                   r"\[\?\]", refused["2d_text"][1]), refused
  assert refused["3d_ids"][0] == "InvalidArgumentError", refused
  assert re.search(r"Shape of tensor inputs \[1,2,2\]", refused["3d_ids"][1]), refused


def test_graph_holds_only_core_tensorflow_and_tf_text_ops(served):
  assert served["unregistered_ops"] == []
  assert served["tf_text_ops"] == [
      "SentencepieceDetokenizeOp", "SentencepieceOp", "SentencepieceTokenizeOp"]
  # The walk reaches into the function library (the beam search's loop, the string handling).
  assert {"While", "TopKV2", "UnicodeTranscode", "RaggedTensorToTensor"} <= set(served["core_ops"])
  assert not [op for op in served["core_ops"] if "Xla" in op]
  assert served["xla_functions"] == []


def test_saved_model_cli_run_prints_the_translations(model_dir, export_dir, decoded, tmp_path):
  """`saved_model_cli run` (the TF1 session loader) on the SentencePiece export."""
  import numpy as np
  np.save(tmp_path / "inputs.npy", np.array(REQUEST, dtype=object))
  run = subprocess.run(
      [sys.executable, "-c", _SAVED_MODEL_CLI_WITH_TF_TEXT, "run", "--dir",
       os.path.join(export_dir, "1"), "--tag_set", "serve", "--signature_def", "serving_default",
       "--inputs", f"inputs={tmp_path / 'inputs.npy'}", "--outdir", str(tmp_path / "out")],
      capture_output=True, text=True, check=False)
  assert run.returncode == 0, run.stderr[-3000:]
  outputs = np.load(tmp_path / "out" / "outputs.npy", allow_pickle=True)
  scores = np.load(tmp_path / "out" / "scores.npy").tolist()
  _assert_answers_like_decode([o.decode("utf-8") for o in outputs], scores, decoded["hostile"])
  truncated = np.load(tmp_path / "out" / "truncated.npy").tolist()
  assert truncated == [r == LONG.encode() for r in REQUEST]


def test_stock_saved_model_cli_runs_a_word_vocabulary_export(tmp_path):
  """The unmodified `saved_model_cli run` binary (no TF Text needed for a word vocabulary)."""
  hparams = t2t_lite.get_hparams("transformer_tiny")
  model_dir = str(tmp_path / "model")
  run_files.write_run_files(model_dir, hparams, {"problem": "algorithmic_reverse"})
  keras.utils.set_random_seed(8)  # Random weights whose outputs are not empty.
  model = t2t_lite.build_model(hparams, t2t_lite.get_problem("algorithmic_reverse").tokenizer()
                               .vocab_size)
  tf.train.CheckpointManager(tf.train.Checkpoint(model=model), model_dir, 1).save(5)
  code, out, err = _run_cli(["--model_dir", model_dir, "--export_dir", str(tmp_path / "export")])
  assert code == 0, err
  cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
  run = subprocess.run(
      [cli, "run", "--dir", out.strip(), "--tag_set", "serve", "--signature_def",
       "serving_default", "--input_exprs", 'inputs=["3 1 4 1 5", "", "9 2 6"]'],
      capture_output=True, text=True, check=False)
  assert run.returncode == 0, run.stderr[-3000:]
  printed = run.stdout.split("Result for output key outputs:")[1].split("Result for")[0]
  expected = _decode_here(model_dir, [b"3 1 4 1 5", b"", b"9 2 6"], tmp_path)
  assert expected[1] == "" and expected[0] and expected[2]
  assert " ".join(printed.split()) == "[" + " ".join(f"b'{e}'" for e in expected) + "]"


def test_saved_model_cli_show_lists_the_string_signature(export_dir):
  cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
  shown = subprocess.run([cli, "show", "--all", "--dir", os.path.join(export_dir, "1")],
                         capture_output=True, text=True, check=True).stdout
  block = shown.split("signature_def['serving_default']:")[1].split("signature_def[")[0]
  squeezed = " ".join(block.split())
  assert "inputs['inputs'] tensor_info: dtype: DT_STRING shape: (-1)" in squeezed
  assert "outputs['outputs'] tensor_info: dtype: DT_STRING shape: (-1)" in squeezed
  assert "outputs['scores'] tensor_info: dtype: DT_FLOAT shape: (-1)" in squeezed
  assert "outputs['truncated'] tensor_info: dtype: DT_BOOL shape: (-1)" in squeezed
  assert "Method name is: tensorflow/serving/predict" in squeezed
  assert "signature_def['translate_ids']" in shown


def test_next_version_is_one_more_than_the_largest_integer_directory(tmp_path):
  assert export.next_version(str(tmp_path / "new")) == 1
  for name in ("1", "7", "10", "notes", ".tmp-11", "3.old"):
    (tmp_path / name).mkdir()
  assert export.next_version(str(tmp_path)) == 11


def test_missing_checkpoint_names_the_directory(model_dir, tmp_path):
  empty = tmp_path / "model"
  empty.mkdir()
  for name in ("hparams.json", "run.json", "vocab.model"):
    (empty / name).write_bytes(open(os.path.join(model_dir, name), "rb").read())
  code, out, err = _run_cli(["--model_dir", str(empty), "--export_dir", str(tmp_path / "x")])
  assert code == 2 and out == ""
  assert err.count("\n") == 1 and str(empty) in err and "no checkpoint" in err
  assert not (tmp_path / "x").exists()


@pytest.mark.parametrize("flag,value,message", [
    ("--beam_size", "0", "beam_size must be >= 1, got 0"),
    ("--max_input_length", "1", "max_input_length must be >= 2"),
    ("--alpha", "-1", "alpha must be >= 0, got -1.0")])
def test_bad_settings_are_refused_in_one_line(model_dir, tmp_path, flag, value, message):
  code, _, err = _run_cli(["--model_dir", model_dir, "--export_dir", str(tmp_path), flag, value])
  assert code == 2 and message in err and err.count("\n") == 1


def test_word_vocabulary_problem_exports_too(tmp_path):
  """The algorithmic problems' fixed word list (a core lookup table, no TF Text)."""
  problem = t2t_lite.get_problem("algorithmic_reverse")
  vocab = problem.tokenizer()
  keras.utils.set_random_seed(2)
  model = t2t_lite.build_model(t2t_lite.get_hparams("transformer_tiny"), vocab.vocab_size)
  translator = translation.Translator(model, vocab, beam_size=2, alpha=0.0, extra_length=3,
                                   max_input_length=6)
  path = export.save(export.TranslationModule(translator), str(tmp_path))
  texts = ["3 9 4", "", "1 2 3 4 5 6 7 8 9"]  # the last one is cut to 5 words + EOS
  loaded = tf.saved_model.load(path)
  served = loaded.signatures["serving_default"](inputs=tf.constant(texts))
  expected, scores = translator.translate(texts)
  assert [s.decode() for s in served["outputs"].numpy()] == expected
  assert served["scores"].numpy().tolist() == pytest.approx(scores, abs=1e-4)
  assert expected[1] == "" and all(expected[i].split() for i in (0, 2))
  assert served["truncated"].numpy().tolist() == [False, False, True]
  assert loaded.signatures["serving_default"](inputs=tf.constant([], tf.string))[
      "outputs"].shape == [0]
  with pytest.raises(tf.errors.InvalidArgumentError, match="input ids must be < vocab_size=13"):
    loaded.signatures["translate_ids"](inputs=tf.constant([[3, 13, 1]]))


@pytest.mark.slow  # ~30 s of XLA compilation; bench/export_latency.py --jit_compile runs it too.
def test_xla_compiled_beam_search_answers_the_same():
  """The jit_compile option (measured in bench/export_latency.py, not the default)."""
  vocab = t2t_lite.get_problem("algorithmic_copy").tokenizer()
  keras.utils.set_random_seed(3)
  model = t2t_lite.build_model(t2t_lite.get_hparams("transformer_tiny"), vocab.vocab_size)
  translator = translation.Translator(model, vocab, beam_size=2, alpha=0.6, extra_length=4)
  texts = tf.constant(["3 9 4 4", "", "7"])
  modules = [export.TranslationModule(translator, jit_compile=jit) for jit in (False, True)]
  plain, compiled = (module.translate_text(texts) for module in modules)
  assert compiled["outputs"].numpy().tolist() == plain["outputs"].numpy().tolist()
  assert compiled["scores"].numpy() == pytest.approx(plain["scores"].numpy(), abs=1e-4)


def test_a_second_export_is_the_next_version_with_its_settings_and_bf16_answers_like_decode(
    model_dir, export_dir, tmp_path):
  """A second export into the module's export_dir: version 2, with the settings it was given
  in its settings file. Given --precision=bf16: bfloat16 matmuls and weights in the graph TF
  Serving loads (LayerNorm's stay float32), no mixed bf16 x float32 product (TensorFlow runs
  those as the slow SparseMatMul), and `saved_model_cli run` printing what `t2t-lite-decode`
  prints with the same settings."""
  import numpy as np
  settings = ["--beam_size", "1", "--alpha", "0", "--max_input_length", "8", "--extra_length",
              str(EXTRA_LENGTH), "--precision", "bf16"]
  code, out, err = _run_cli(["--model_dir", model_dir, "--export_dir", export_dir, *settings,
                             "--checkpoint_path", os.path.join(model_dir, "ckpt-10")])
  assert code == 0, err
  path = out.strip()
  assert path == os.path.join(export_dir, "2")
  with open(os.path.join(path, "assets.extra", export.SETTINGS_FILE)) as f:
    recorded = json.load(f)
  assert {k: recorded[k] for k in ("version", "beam_size", "alpha", "max_input_length",
                                   "extra_length", "checkpoint", "precision")} == {
      "version": 2, "beam_size": 1, "alpha": 0.0, "max_input_length": 8,
      "extra_length": EXTRA_LENGTH, "checkpoint": os.path.join(model_dir, "ckpt-10"),
      "precision": "bf16"}
  assert not [name for name in os.listdir(export_dir) if name.startswith(".tmp")]
  saved_model = saved_model_pb2.SavedModel()
  with open(os.path.join(path, "saved_model.pb"), "rb") as f:
    saved_model.ParseFromString(f.read())
  matmul_types = {
      types_pb2.DataType.Name(node.attr["T"].type)
      for meta_graph in saved_model.meta_graphs
      for function in meta_graph.graph_def.library.function for node in function.node_def
      if node.op in ("MatMul", "BatchMatMulV2", "BatchMatMulV3")}
  assert "DT_BFLOAT16" in matmul_types, matmul_types
  assert not any(node.op == "SparseMatMul" for meta_graph in saved_model.meta_graphs
                 for function in meta_graph.graph_def.library.function
                 for node in function.node_def)
  reader = tf.train.load_checkpoint(os.path.join(path, "variables", "variables"))
  dtypes, sizes = reader.get_variable_to_dtype_map(), {}  # sizes: dtype -> number of weights
  for name, shape in reader.get_variable_to_shape_map().items():
    sizes[dtypes[name]] = sizes.get(dtypes[name], 0) + int(np.prod(shape))
  assert sizes.get(tf.bfloat16, 0) > 0.95 * sum(sizes.values()), sizes  # LayerNorm's: float32

  np.save(tmp_path / "inputs.npy", np.array(REQUEST, dtype=object))
  run = subprocess.run(
      [sys.executable, "-c", _SAVED_MODEL_CLI_WITH_TF_TEXT, "run", "--dir", path,
       "--tag_set", "serve", "--signature_def", "serving_default",
       "--inputs", f"inputs={tmp_path / 'inputs.npy'}", "--outdir", str(tmp_path / "out")],
      capture_output=True, text=True, check=False)
  assert run.returncode == 0, run.stderr[-3000:]
  served = [o.decode("utf-8") for o in np.load(tmp_path / "out" / "outputs.npy",
                                               allow_pickle=True)]
  decoded = _decode_here(model_dir, REQUEST, tmp_path, *settings)
  assert served == decoded and any(served)
