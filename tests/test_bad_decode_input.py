"""Bad input to the decoding tools, each run as its own process as a user would: one line on
stderr naming what is wrong, its exit status, and every byte of what the tool touched as it was.
"""
import json
import os

import pytest
from conftest import file_hashes
from test_bad_input import assert_one_line, run_tool

from t2t_lite.decode import export

WORDS = "a man rides horse the dog runs in park".split()


@pytest.fixture(scope="module")
def model_dir(make_random_model_dir):
  return make_random_model_dir("bad_decode_input", WORDS)


def test_scoring_empty_files_gives_no_lines_and_zero_sentences(model_dir, tmp_path):
  for name in ("src", "tgt"):
    (tmp_path / name).write_bytes(b"")
  code, out, err = run_tool("score", "--model_dir", model_dir, "--source_file", tmp_path / "src",
                            "--target_file", tmp_path / "tgt")
  assert code == 0 and out == "", err
  assert "Traceback" not in err
  assert json.loads(err.splitlines()[-1]) == {"sentences": 0, "tokens": 0, "logprob": 0,
                                               "perplexity": None}


@pytest.mark.parametrize("line, message", [
    ("1 ||| 6 5 4", "{nbest}:2: no score: Moses n-best lines are 'i ||| output ||| score'"),
    ("1 ||| x ||| notanumber", "{nbest}:2: score 'notanumber' is not a number: Moses n-best "
                               "lines are 'i ||| output ||| score'")])
def test_score_refuses_n_best_lines_without_a_number_as_their_score(model_dir, tmp_path, line,
                                                                    message):
  (tmp_path / "src").write_text("a man\nthe dog\n")
  nbest = tmp_path / "nbest"
  nbest.write_text(f"0 ||| a man ||| -1.5\n{line}\n")
  before = file_hashes(tmp_path)
  code, out, err = run_tool("score", "--model_dir", model_dir, "--source_file", tmp_path / "src",
                            "--nbest_file", nbest, "--output_file", tmp_path / "scored")
  assert code == 2 and out == ""
  assert_one_line(err, "t2t-lite-score", message.format(nbest=nbest))
  assert file_hashes(tmp_path) == before  # no output file either


def test_export_refuses_a_directory_that_is_not_an_export_base(model_dir, reverse_dir,
                                                               tmp_path):
  before = file_hashes(reverse_dir)
  code, out, err = run_tool("export", "--model_dir", model_dir, "--export_dir", reverse_dir)
  assert code == 2 and out == ""
  assert_one_line(err, "t2t-lite-export", f"export_dir {reverse_dir} holds ",
                  "entries that are not export versions (e.g. ", "it is not an export base")
  assert file_hashes(reverse_dir) == before
  # One that holds only versions takes the next version (tests/test_export.py exports into
  # such directories through the tool).
  (tmp_path / "exports" / "3").mkdir(parents=True)
  assert export.next_version(str(tmp_path / "exports")) == 4


def test_decode_refuses_a_file_that_is_not_text(model_dir, tmp_path):
  path = tmp_path / "random.bin"
  path.write_bytes(os.urandom(4096))
  before = file_hashes(tmp_path)
  code, out, err = run_tool("decode", "--model_dir", model_dir, "--input_file", path,
                            "--output_file", tmp_path / "out.txt")
  assert code == 2 and out == ""
  assert_one_line(err, "t2t-lite-decode", f"{path} is not UTF-8 text: ",
                  "characters are invalid UTF-8 or control characters (more than 20%)")
  assert file_hashes(tmp_path) == before
