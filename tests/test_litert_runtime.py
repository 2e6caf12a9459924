"""The LiteRT engine (t2t_lite/litert/) through the consumer's paths: t2t-lite-decode
--engine=litert as a process (its outputs, first line, exit status and what it imports) and the
Python API, on the trained reverser exported by t2t-lite-export --format=litert. Its outputs
are the TensorFlow engine's for the same model, line for line, and its scores within 1e-4.
"""
import os
import random
import shutil
import subprocess
import sys

import pytest

pytest.importorskip("ai_edge_litert")

from test_refusals import ENV, run_tool  # noqa: E402

MAX_INPUT_LENGTH = 64  # the reverser's hparams max_length (the export's max_input_length)
# Reversal lines of 1-20 numbers, a blank line, a line of spaces, a word the vocabulary lacks
# and a line longer than max_input_length (70 tokens).
rng = random.Random(5)
LINES = ([" ".join(str(rng.randrange(10)) for _ in range(rng.randint(1, 20))) for _ in range(30)]
         + ["", "   ", "3 x 4", " ".join(str(i % 10) for i in range(70))])
LONG_LINE = len(LINES)  # its number (1-based)
FLAGS = {1: [], 4: ["--beam_size=4", "--n_best=4", "--alpha=0.6"]}


@pytest.fixture(scope="module")
def exports(reversing_model, tmp_path_factory):
  """{beam size: the reverser's LiteRT export} made by t2t-lite-export as a process: beam 1
  (the problem's) and beam 4 with n_best 4."""
  root = tmp_path_factory.mktemp("litert")
  made = {}
  for beam, flags in FLAGS.items():
    made[beam] = str(root / f"beam{beam}")
    code, out, err = run_tool("export", "--format=litert", f"--model_dir={reversing_model}",
                              f"--export_dir={made[beam]}", *flags)
    assert code == 0, err
  return made


def decode(model_dir, *flags, lines=LINES, tmp_path, engine="litert"):
  """(exit status, output lines, stderr lines) of t2t-lite-decode as a process."""
  (tmp_path / "in.txt").write_text("".join(line + "\n" for line in lines))
  code, out, err = run_tool("decode", f"--model_dir={model_dir}", f"--engine={engine}",
                            f"--input_file={tmp_path}/in.txt", "--no_progress", *flags)
  return code, out.splitlines(), err.splitlines()


def test_decode_gives_the_tensorflow_engines_lines_and_warnings(reversing_model, exports,
                                                                 tmp_path):
  code, litert, err = decode(exports[1], tmp_path=tmp_path)
  assert code == 0, err
  assert err[0].startswith(f"INFO decoding {len(LINES)} lines with the LiteRT export "
                           f"{exports[1]} (") and err[0].endswith(
      "beam 1, alpha 0, max output = input + 10; plan: engine litert, "
      f"{len(os.sched_getaffinity(0))} thread{'s' * (len(os.sched_getaffinity(0)) > 1)} "
      "(XNNPACK); quantization float32 (the export's)")
  code, tensorflow, tf_err = decode(reversing_model, "--precision=none", engine="tensorflow",
                                    tmp_path=tmp_path)
  assert code == 0 and litert == tensorflow and len(litert) == len(LINES)
  assert litert[LINES.index("")] == litert[LINES.index("   ")] == ""
  warning = (f"WARNING line {LONG_LINE}: longer than {MAX_INPUT_LENGTH} tokens (EOS included): "
             "truncated")
  assert [line for line in err if "truncated" in line] == [warning]
  assert [line for line in tf_err if "truncated" in line] == [warning]
  # The model, not an empty output, answers: every line with words gets words, and many of the
  # 30 random ones are reversed exactly (greedy, by a reverser of 1,000 steps: 19 to 26 of them
  # over the models the suite's code changes have trained; a third is far from that edge).
  assert all(out for out, line in zip(litert, LINES) if line.strip())
  reversed_ = sum(out == " ".join(line.split()[::-1]) for out, line in zip(litert, LINES))
  assert reversed_ >= 10


def _n_best(lines):
  """Moses' n-best lines -> [(i, output, score)]."""
  return [(int(i), out, float(score)) for i, out, score in
          (line.split(" ||| ") for line in lines)]


def test_n_best_lists_and_scores_are_the_tensorflow_engines(reversing_model, exports, tmp_path):
  code, litert, err = decode(exports[4], "--n_best=4", tmp_path=tmp_path)
  assert code == 0, err
  code, tensorflow, _ = decode(reversing_model, *FLAGS[4], "--precision=none",
                               engine="tensorflow", tmp_path=tmp_path)
  assert code == 0
  litert, tensorflow = _n_best(litert), _n_best(tensorflow)
  assert [(i, out) for i, out, _ in litert] == [(i, out) for i, out, _ in tensorflow]
  assert max(abs(a[2] - b[2]) for a, b in zip(litert, tensorflow)) < 1e-4


def test_target_prefixes_give_the_tensorflow_engines_lines(reversing_model, exports, tmp_path):
  lines = [f"{line}\t{' '.join(line.split()[::-1][:2])}" for line in LINES[:20]]
  lines += ["1 2 3\t9 9", "\t5", "4 5\t", " ".join(["7"] * 70) + "\t" + " ".join(["7"] * 70)]
  code, litert, err = decode(exports[4], "--n_best=4", "--target_prefix", lines=lines,
                             tmp_path=tmp_path)
  assert code == 0, err
  code, tensorflow, tf_err = decode(reversing_model, *FLAGS[4], "--precision=none",
                                    "--target_prefix", engine="tensorflow", lines=lines,
                                    tmp_path=tmp_path)
  assert code == 0, tf_err
  litert, tensorflow = _n_best(litert), _n_best(tensorflow)
  assert [(i, out) for i, out, _ in litert] == [(i, out) for i, out, _ in tensorflow]
  assert max(abs(a[2] - b[2]) for a, b in zip(litert, tensorflow)) < 1e-4
  assert all(out.startswith("9 9") for i, out, _ in litert if i == 20)


def test_the_python_api_answers_as_translate_does(reversing_model, exports):
  import t2t_lite
  from t2t_lite import litert
  texts, scores = litert.translate(exports[1], LINES)
  expected, expected_scores = t2t_lite.translate(reversing_model, LINES, precision="none")
  assert texts == expected
  assert max(abs(a - b) for a, b in zip(scores, expected_scores)) < 1e-4
  # translate(engine="litert") delegates to the same runtime.
  assert t2t_lite.translate(exports[4], LINES[:5], engine="litert", n_best=2)[0] == [
      t[:2] for t in litert.LiteRTTranslator(exports[4]).translate(LINES[:5])[0]]


# python -c _WRAPPER <report> <hidden module,...> <decode's flags...>: t2t-lite-decode's main()
# in a process where the hidden modules cannot be imported, then whether TensorFlow was.
_WRAPPER = """
import sys
report, hidden, argv = sys.argv[1], set(filter(None, sys.argv[2].split(","))), sys.argv[3:]

class Hide:
  def find_spec(self, name, path=None, target=None):
    if name.split(".")[0] in hidden:
      raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, Hide())
sys.argv = ["t2t-lite-decode"] + argv
try:
  from t2t_lite.bin import decode
  sys.exit(decode.main(argv))
finally:
  with open(report, "w") as f:
    f.write(str("tensorflow" in sys.modules))
"""


def run_hiding(hidden, *args, tmp_path):
  """(exit status, stdout, stderr, whether TensorFlow was imported) of decode's main()."""
  report = tmp_path / "report"
  run = subprocess.run([sys.executable, "-c", _WRAPPER, str(report), ",".join(hidden),
                        *map(str, args)], env=ENV, stdin=subprocess.DEVNULL, capture_output=True,
                       text=True, timeout=300)
  return run.returncode, run.stdout, run.stderr, report.read_text() == "True"


def test_an_export_decodes_and_writes_without_tensorflow(exports, tmp_path):
  (tmp_path / "in.txt").write_text("1 2 3\n\n4 5\n")
  code, out, err, imported = run_hiding(
      [], f"--model_dir={exports[1]}", "--engine=litert", f"--input_file={tmp_path}/in.txt",
      f"--output_file={tmp_path}/out.txt", "--no_progress", tmp_path=tmp_path)
  assert (code, out, imported) == (0, "", False), err
  assert (tmp_path / "out.txt").read_text() == "3 2 1\n\n5 4\n"
  assert err.count("\n") == 1 and "plan: engine litert" in err  # the first line only
  # Where TensorFlow is not installed at all, alike.
  code, _, err, _ = run_hiding(["tensorflow"], f"--model_dir={exports[1]}", "--engine=litert",
                               f"--input_file={tmp_path}/in.txt", "--no_progress",
                               tmp_path=tmp_path)
  assert code == 0, err


def assert_refused(result, reason, tmp_path, written=("in.txt", "report")):
  code, out, err = result[:3]
  assert (code, out) == (2, ""), (code, out, err)
  assert err.count("\n") == 1 and err.startswith("t2t-lite-decode: error: "), err
  assert reason in err, err
  assert sorted(os.listdir(tmp_path)) == sorted(written)  # no output file


@pytest.mark.parametrize("flag, reason", [
    ("--sample", "sampling with the LiteRT engine"),
    ("--shortlist", "the shortlist with the LiteRT engine"),
    ("--constraints", "lexical constraints with the LiteRT engine"),
    ("--with_alignments", "word alignments with the LiteRT engine"),
    ("--precision=bf16", "--precision=bf16 with the LiteRT engine"),
])
def test_what_litert_cannot_carry_is_refused_before_anything_is_read(exports, tmp_path, flag,
                                                                      reason):
  (tmp_path / "in.txt").write_text("1 2\n")
  result = run_hiding([], f"--model_dir={exports[1]}", "--engine=litert", flag,
                      f"--input_file={tmp_path}/in.txt", f"--output_file={tmp_path}/out.txt",
                      tmp_path=tmp_path)
  assert_refused(result, reason, tmp_path)
  assert result[3] is False  # before TensorFlow


def test_an_unknown_engine_is_refused_in_one_line(exports, tmp_path):
  (tmp_path / "in.txt").write_text("1 2\n")
  result = run_tool("decode", f"--model_dir={exports[1]}", "--engine=tflite",
                    f"--input_file={tmp_path}/in.txt", f"--output_file={tmp_path}/out.txt")
  assert_refused(result, "argument --engine: invalid choice: 'tflite'", tmp_path, ["in.txt"])


def test_a_missing_ai_edge_litert_is_refused_in_one_line(exports, tmp_path):
  (tmp_path / "in.txt").write_text("1 2\n")
  result = run_hiding(["ai_edge_litert"], f"--model_dir={exports[1]}", "--engine=litert",
                      f"--input_file={tmp_path}/in.txt", f"--output_file={tmp_path}/out.txt",
                      tmp_path=tmp_path)
  assert_refused(result, "the LiteRT engine needs ai_edge_litert: pip install -e '.[litert]'",
                 tmp_path)


def test_a_run_without_an_export_where_tensorflow_is_missing_is_refused(reversing_model,
                                                                         tmp_path):
  (tmp_path / "in.txt").write_text("1 2\n")
  result = run_hiding(["tensorflow"], f"--model_dir={reversing_model}", "--engine=litert",
                      f"--input_file={tmp_path}/in.txt", f"--output_file={tmp_path}/out.txt",
                      tmp_path=tmp_path)
  assert_refused(result, f"{reversing_model} has no LiteRT export and TensorFlow is not "
                 "installed to make one: run t2t-lite-export --format=litert where it is",
                 tmp_path)


def test_an_export_whose_tokenizer_is_of_another_vocabulary_is_refused(exports, tmp_path):
  other = tmp_path / "other"
  shutil.copytree(exports[1], other)
  with open(other / "words.txt", "a") as f:
    f.write("10\n")
  (tmp_path / "in.txt").write_text("1 2\n")
  result = run_hiding([], f"--model_dir={other}", "--engine=litert",
                      f"--input_file={tmp_path}/in.txt", f"--output_file={tmp_path}/out.txt",
                      tmp_path=tmp_path)
  assert_refused(result, f"{other}/words.txt is a vocabulary of 14 tokens, the model's has 13",
                 tmp_path, ["in.txt", "other", "report"])


def test_a_model_of_another_vocabulary_is_refused(exports, tmp_path):
  """The JSON and tokenizer agree, the .tflite's embedding table [V, D] does not."""
  from t2t_lite.litert import LiteRTError, LiteRTTranslator
  other = tmp_path / "other"
  shutil.copytree(exports[1], other)
  text = (other / "t2t_lite_litert.json").read_text().replace('"vocab_size": 13',
                                                             '"vocab_size": 14')
  (other / "t2t_lite_litert.json").write_text(text)
  with open(other / "words.txt", "a") as f:
    f.write("10\n")
  with pytest.raises(LiteRTError, match=f"{other}/model.tflite is a model of a vocabulary of 13 "
                                        "tokens, not the 14 its JSON and tokenizer have"):
    LiteRTTranslator(str(other))


def test_the_runtimes_unfilled_score_is_the_searchs():
  from t2t_lite.decode import beam_search
  from t2t_lite.litert import LiteRTTranslator
  assert LiteRTTranslator.NEG_INF == beam_search.NEG_INF


def test_a_run_decodes_through_the_export_kept_beside_it(reversing_model, tmp_path):
  """translate(run, engine="litert"): exported on first use into run/litert/float32/, the same
  outputs as the TensorFlow engine's; an export of other settings is made beside it again."""
  import t2t_lite
  from t2t_lite.rundir import run_files
  run = tmp_path / "run"
  shutil.copytree(reversing_model, run)
  texts, _ = t2t_lite.translate(str(run), LINES[:8], engine="litert")
  assert texts == t2t_lite.translate(reversing_model, LINES[:8], precision="none")[0]
  kept = run_files.litert_cache_dir(str(run), "float32")
  assert os.path.isfile(os.path.join(kept, "t2t_lite_litert.json"))
