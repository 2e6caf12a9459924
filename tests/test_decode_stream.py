"""t2t-lite-decode reads, decodes and writes in windows (bin/decode.py): outputs equal to a
whole-file decode, complete lines after a SIGKILL and a continuation that finishes the file, and
one line in, its output out through a pseudo-terminal, as a person types. Each run tested as its
own process, as a user runs it (what the SIGKILL test compares with is decoded in this one)."""
import os
import pty
import select
import signal
import subprocess
import sys
import time

import pytest
from test_bad_input import ENV, assert_one_line, run_tool

from t2t_lite.bin import decode as decode_cli

WORDS = "a man rides horse the dog runs in park woman with red hat over bridge".split()
SETTINGS = ["--beam_size=2", "--alpha=0.6", "--extra_length=6", "--precision=none",
            "--no_progress"]


@pytest.fixture(scope="module")
def model_dir(make_random_model_dir):
  return make_random_model_dir("stream", WORDS)


def _lines(count, seed=0):
  import random
  rng = random.Random(seed)
  return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 9))) for _ in range(count)]


def _decode(model_dir, tmp_path, lines, *flags, name="out"):
  (tmp_path / "in.txt").write_text("".join(line + "\n" for line in lines))
  code, out, err = run_tool("decode", "--model_dir", model_dir, "--input_file",
                            tmp_path / "in.txt", "--output_file", tmp_path / name, *SETTINGS,
                            *flags)
  assert code == 0, err
  return (tmp_path / name).read_text().splitlines(), err


def _decode_here(model_dir, tmp_path, lines):
  """What t2t-lite-decode writes for `lines`, run in this process (no TensorFlow start): the
  outputs a test compares the runs it tests with."""
  (tmp_path / "in.txt").write_text("".join(line + "\n" for line in lines))
  assert decode_cli.main(["--model_dir", model_dir, "--input_file", str(tmp_path / "in.txt"),
                          "--output_file", str(tmp_path / "whole"), *SETTINGS]) == 0
  return (tmp_path / "whole").read_text().splitlines()


TYPED = ["a man rides the horse", "the dog"]  # at the terminal, in the interactive test


@pytest.fixture(scope="module")
def whole(model_dir, tmp_path_factory):
  """(lines, what a decode of the whole file writes): 25 lines, an empty one, 6 more and the
  lines the interactive test types."""
  lines = _lines(25) + [""] + _lines(6, seed=1) + TYPED
  outputs, err = _decode(model_dir, tmp_path_factory.mktemp("whole"), lines, "--window=100",
                         name="whole")
  assert "INFO decoding 34 lines with" in err
  return lines, outputs


def test_windows_write_what_the_whole_file_decode_writes(model_dir, whole, tmp_path):
  lines, expected = whole
  streamed, _ = _decode(model_dir, tmp_path, lines, "--window=3", name="streamed")
  assert streamed == expected and len(expected) == 34 and expected[25] == ""
  # n-best lines keep their input line numbers across windows.
  nbest, _ = _decode(model_dir, tmp_path, lines, "--window=4", "--n_best=2", name="nbest")
  assert [int(line.split(" ||| ")[0]) for line in nbest] == [i for i in range(34) for _ in "ab"]
  assert [line.split(" ||| ")[1] for line in nbest[::2]] == expected


def test_sigkill_leaves_complete_lines_and_continue_output_finishes_the_file(model_dir,
                                                                             tmp_path):
  lines = _lines(300, seed=2)
  whole = _decode_here(model_dir, tmp_path, lines)
  out = tmp_path / "out"
  process = subprocess.Popen(
      [sys.executable, "-m", "t2t_lite.bin.decode", "--model_dir", model_dir, "--input_file",
       str(tmp_path / "in.txt"), "--output_file", str(out), "--window=10", *SETTINGS],
      env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  deadline = time.time() + 300
  while time.time() < deadline and (not out.exists() or out.read_text().count("\n") < 50):
    time.sleep(0.02)
  process.send_signal(signal.SIGKILL)
  process.wait()
  partial = out.read_text()
  done = partial.count("\n")
  assert 50 <= done < 300, "killed before the end, after 5 windows"
  assert partial.endswith("\n") and partial.splitlines() == whole[:done]
  with open(out, "a") as f:  # As if the kill had cut a write short: a partial last line.
    f.write(whole[done][:2])

  code, _, err = run_tool("decode", "--model_dir", model_dir, "--input_file",
                          tmp_path / "in.txt", "--output_file", out, *SETTINGS,
                          "--continue_output")
  assert code == 0, err
  assert f"INFO decoding {300 - done} lines (after the {done} already in {out})" in err
  assert out.read_text().splitlines() == whole


def test_interactive_through_a_pseudo_terminal_answers_each_line_before_the_next(model_dir,
                                                                                  whole):
  controller, terminal = pty.openpty()
  process = subprocess.Popen(
      [sys.executable, "-m", "t2t_lite.bin.decode", "--model_dir", model_dir, *SETTINGS,
       "--verbose"], env=ENV, stdin=terminal, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  os.close(terminal)

  def read_line(timeout=300):
    ready, _, _ = select.select([process.stdout], [], [], timeout)
    assert ready, "no output line"
    return process.stdout.readline().decode()

  try:
    os.write(controller, f"{TYPED[0]}\n".encode())
    first = read_line()  # before the second line is typed
    assert first.endswith("\n") and first.strip()
    os.write(controller, f"{TYPED[1]}\n".encode())
    second = read_line()
    os.write(controller, b"\x04")  # Ctrl-D: end of input
    assert process.wait(timeout=60) == 0
  finally:
    process.kill()
    os.close(controller)
  err = process.stderr.read().decode()
  assert "INFO decoding stdin's lines with" in err
  assert "line 1: " in err and "line 2: " in err  # --verbose: each line's latency in ms
  # What the same lines decode to in a file.
  assert [first.rstrip("\n"), second.rstrip("\n")] == whole[1][-2:]


@pytest.mark.parametrize("flags, message", [
    (["--window=0"], "--window must be >= 1, got 0"),
    (["--continue_output", "--n_best=2"], "--continue_output needs an --output_file of one "
                                          "output a line")])
def test_bad_window_and_continuation_are_one_line(model_dir, tmp_path, flags, message):
  (tmp_path / "in.txt").write_text("a man\n")
  code, out, err = run_tool("decode", "--model_dir", model_dir, "--input_file",
                            tmp_path / "in.txt", "--output_file", tmp_path / "out", *flags)
  assert code == 2 and out == ""
  assert_one_line(err, "t2t-lite-decode", message)
  assert not (tmp_path / "out").exists()


def test_a_later_window_that_is_not_text_stops_after_the_lines_before_it(model_dir, tmp_path):
  (tmp_path / "in.txt").write_bytes(b"a man\nthe dog\n" + bytes(range(128, 256)) * 4 + b"\n")
  code, out, err = run_tool("decode", "--model_dir", model_dir, "--input_file",
                            tmp_path / "in.txt", "--output_file", tmp_path / "out", "--window=2",
                            *SETTINGS)
  assert code == 2 and out == ""
  assert_one_line(err, "t2t-lite-decode", f"{tmp_path / 'in.txt'} is not UTF-8 text (lines 3 "
                  "to 3)", "(the 2 lines before it were written; --continue_output goes on "
                  "after them)")
  assert len((tmp_path / "out").read_text().splitlines()) == 2
