"""Issue 80's cases 6, 10 and 11 and its one-line refusals of the decoding side: a request that
cannot be decoded is refused before anything is built or written (before TensorFlow loads,
where it needs no model), a target prefix is refused for a word the vocabulary lacks as a
constraint is, a damaged shortlist is named as such, and a precision that is slow on this
machine gets a warning first. Refusals: exit status 2, exactly one line on stderr, and every
file of the run as it was.
"""
import os
import shutil

import pytest
import tensorflow as tf
from conftest import file_hashes
from test_bad_input import assert_one_line, make_model_dir, run_tool
from test_refusals import assert_refused_before_tensorflow

from t2t_lite.decode import shortlist, translation
from t2t_lite.decode.decode_settings import DecodingError
from t2t_lite.modeling.mixed_precision import Machine, slower_here
from t2t_lite.rundir import run_files


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
  """An algorithmic_reverse run of random weights: a word vocabulary (0 to 9), without 'x'.
  Shared by the module's tests: read only (a test that changes a run works on a copy)."""
  root = tmp_path_factory.mktemp("one_line")
  (root / "data").mkdir()
  return str(make_model_dir(root / "model", root / "data", "", problem="algorithmic_reverse"))


def assert_refused(code, out, err, *parts):
  """Exit status 2, nothing on stdout, and exactly one line on stderr: decode's error."""
  assert (code, out, err.count("\n")) == (2, "", 1), (code, out, err)
  assert_one_line(err, "t2t-lite-decode", *parts)


# --------------------------------------------------- requests refused before anything is built
@pytest.mark.parametrize("tool, flags, reason", [
    # Case 6: the shortlist was built and written into model_dir before these were refused
    # (then target prefixes and constraints with it: they compose now, test_shortlist.py).
    ("decode", ["--shortlist", "--sample"], "shortlist with sample: sampling draws from the "
                                            "whole vocabulary"),
    ("export", ["--shortlist", "--sample"], "shortlist with sample"),
    # Refused once the model had loaded, after an "INFO exporting ..." line.
    ("export", ["--target_prefix", "--sample"], "target prefixes with sampling"),
    # Case 11: 0 meant the default.
    ("decode", ["--max_input_length=0"], "max_input_length must be >= 2 (a token and EOS), "
                                         "got 0; leave it out for hparams max_length"),
    ("export", ["--max_input_length=0"], "max_input_length must be >= 2"),
    ("export", ["--format=ctranslate2", "--max_input_length=-1"], "max_input_length must be")])
def test_a_request_that_cannot_be_decoded_is_refused_before_tensorflow_writing_nothing(
    model_dir, tmp_path, tool, flags, reason):
  (tmp_path / "in.txt").write_text("3 9 4\t4\n")
  where = (["--input_file", tmp_path / "in.txt", "--output_file", tmp_path / "out.txt"]
           if tool == "decode" else ["--export_dir", tmp_path / "export"])
  before = file_hashes(model_dir)
  assert_refused_before_tensorflow(tool, ["--model_dir", model_dir, *where, *flags], reason,
                                   tmp_path)
  assert file_hashes(model_dir) == before
  assert not os.path.exists(run_files.path(model_dir, run_files.SHORTLIST_FILE))
  assert not (tmp_path / "out.txt").exists() and not (tmp_path / "export").exists()


# ------------------------------------------------------------ case 10: prefixes as constraints
def test_a_target_prefix_word_the_vocabulary_lacks_is_refused_naming_the_line(model_dir,
                                                                             tmp_path):
  (tmp_path / "in.txt").write_text("3 9 4\t4\n1 2\t2 x\n")
  before = file_hashes(model_dir)
  code, out, err = run_tool("decode", "--model_dir", model_dir, "--target_prefix",
                            "--input_file", tmp_path / "in.txt", "--output_file",
                            tmp_path / "out.txt", "--precision=none")
  assert_refused(code, out, err, "line 2: a target prefix (2 x) has a word that is not in the "
                                 "model's vocabulary")
  assert file_hashes(model_dir) == before and not (tmp_path / "out.txt").exists()


def test_the_python_api_refuses_a_prefix_and_a_constraint_of_unknown_words_alike(model_dir):
  translator = translation.Translator.from_model_dir(model_dir, precision="none")
  sources = ["3 9 4", "1 2", ""]  # A blank line's output is blank: its prefix is not forced.
  with pytest.raises(DecodingError, match=r"^line 2: a target prefix \(x\) has a word that is "
                                          r"not in the model's vocabulary$"):
    translator.check_prefixes(sources, ["4", "x", "y"])
  with pytest.raises(DecodingError, match=r"^line 2: a constraint \(x\) has a word that is not "
                                          r"in the model's vocabulary$"):
    translator.check_constraints(sources, [["4"], ["x"], ["y"]])
  prefixes = ["4", "2 1", "y"]  # Known words, and a blank line's.
  texts, _ = translator.translate(sources, prefixes=prefixes)
  assert [t.split()[:len(p.split())] for t, p in zip(texts, prefixes)] == [["4"], ["2", "1"],
                                                                           []], texts
  # The graph the export's translate_with_prefix serves fails such a request alike.
  with pytest.raises(tf.errors.InvalidArgumentError, match="a target prefix has a word that "
                                                           "is not in the vocabulary"):
    translator.decode_with_prefix(tf.constant(sources), tf.constant(["4", "x", ""]))


# ------------------------------------------------------------------------- a damaged shortlist
def test_a_damaged_shortlist_is_named_with_what_removing_it_does(model_dir, tmp_path):
  run = str(tmp_path / "run")
  shutil.copytree(model_dir, run)
  table = run_files.path(run, run_files.SHORTLIST_FILE)
  with open(table, "wb") as f:
    f.write(b"not a table " * 10)  # numpy took it for a pickle
  (tmp_path / "in.txt").write_text("3 9 4\n")
  before = file_hashes(run)
  code, out, err = run_tool("decode", "--model_dir", run, "--shortlist", "--input_file",
                            tmp_path / "in.txt", "--output_file", tmp_path / "out.txt",
                            "--precision=none")
  damaged = (f"{table} is damaged (not the table decoding wrote: truncated or overwritten); "
             "remove it, and the next use of --shortlist builds it again from the training "
             "data its run.json names")
  assert_refused(code, out, err, damaged)
  assert file_hashes(run) == before and not (tmp_path / "out.txt").exists()
  # A table cut short (numpy: a zip archive that is not one) reads alike.
  written = shortlist.build([([3, 4], [4, 3])], 13).to_bytes()
  with open(table, "wb") as f:
    f.write(written[:len(written) // 2])
  with pytest.raises(shortlist.ShortlistError) as refused:
    shortlist.for_run(run, 13)
  assert str(refused.value) == damaged


# ------------------------------------------------------------ case 11: a slow precision, warned
AVX2 = frozenset({"avx", "avx2", "fma"})  # Zen 2 and 3: no AVX-512, bf16, VNNI or AMX
ZEN4 = AVX2 | {"avx512f", "avx512_bf16", "avx512_vnni"}
SAPPHIRE_RAPIDS = ZEN4 | {"amx_bf16", "amx_int8", "amx_tile"}


@pytest.mark.parametrize("precision, machine, slow, fast", [
    ("fp16", Machine("AuthenticAMD", AVX2), "far slower on a CPU than float32", "none"),
    ("fp16", Machine("GenuineIntel", SAPPHIRE_RAPIDS), "far slower", "bf16"),
    ("bf16", Machine("AuthenticAMD", AVX2), "slower on this CPU than float32: without "
                                            "bfloat16 instructions", "none"),
    ("int8", Machine("AuthenticAMD", AVX2), "no faster on this CPU than float32: without int8 "
                                            "dot products", "none"),
    ("int8", Machine("GenuineIntel", AVX2 | {"avx_vnni"}), None, None),
    ("bf16", Machine("AuthenticAMD", ZEN4), None, None),
    ("int8", Machine("AuthenticAMD", ZEN4), None, None),
    ("bf16", Machine("GenuineIntel", SAPPHIRE_RAPIDS), None, None),
    ("none", Machine("AuthenticAMD", AVX2), None, None),
    ("fp16", Machine("AuthenticAMD", AVX2, gpu_capabilities=((7, 0),)), None, None),
    ("bf16", Machine("AuthenticAMD", AVX2, tpu=True), None, None)])
def test_a_precision_slow_on_the_machine_is_warned_of_with_the_fast_choice(
    precision, machine, slow, fast):
  warning = slower_here(precision, machine)
  if slow is None:
    assert warning == ""
  else:
    assert warning.startswith(f"precision {precision} is {slow}") and warning.endswith(
        f"this machine's fast choice is {'none (float32)' if fast == 'none' else fast}, what "
        "auto chooses"), warning


def test_fp16_on_a_cpu_is_warned_of_first_and_decodes_all_the_same(model_dir, tmp_path):
  """float16 is slow on every CPU: the warning's first line, whatever CPU runs the test."""
  (tmp_path / "in.txt").write_text("3 9 4\n1 2\n")
  code, out, err = run_tool("decode", "--model_dir", model_dir, "--precision=fp16",
                            "--input_file", tmp_path / "in.txt", "--no_progress")
  assert code == 0, err
  assert err.splitlines()[0].startswith("WARNING precision fp16 is far slower on a CPU than "
                                        "float32"), err
  assert len(out.splitlines()) == 2
