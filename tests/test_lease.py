"""model_dir leases: one holder at a time, across processes; stale leases are taken over."""
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import pytest
import tensorflow as tf

from t2t_lite import files
from t2t_lite.rundir import lease, run_files

FAST = dict(heartbeat_seconds=0.1, stale_seconds=5.0, settle_seconds=0.2)

# argv: model_dir, seconds to hold. Prints "held" once the lease is taken, then sleeps.
_HOLDER = textwrap.dedent("""
    import logging, sys, time
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    from t2t_lite.bin import cli  # first: TensorFlow is then imported quietly, as in the tools
    from t2t_lite.rundir import lease
    try:
      with lease.Lease(sys.argv[1], heartbeat_seconds=0.1, stale_seconds=5, settle_seconds=0.5):
        print("held", flush=True)
        time.sleep(float(sys.argv[2]))
    except lease.T2TLiteError as e:
      sys.exit(cli.fail("holder", e, e.exit_status))
    """)
ENV = {k: v for k, v in os.environ.items() if k != "TF_CPP_MIN_LOG_LEVEL"}


def _holder(model_dir, seconds):
  return subprocess.Popen([sys.executable, "-c", _HOLDER, str(model_dir), str(seconds)], env=ENV,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_two_processes_started_together_one_holds_then_a_sigkilled_lease_is_taken_over(
    tmp_path, caplog):
  model_dir = tmp_path / "model"
  first, second = _holder(model_dir, 60), _holder(model_dir, 60)
  # The first line of each: "held" once it holds the lease, or none when it exits refused.
  lines = [first.stdout.readline(), second.stdout.readline()]
  assert sorted(lines) == ["", "held\n"], lines
  winner, loser = (first, second) if lines[0] else (second, first)
  out, err = loser.communicate()
  assert loser.returncode == 2 and out == ""
  assert winner.poll() is None, winner.communicate()  # still holding, not refused
  record = json.loads((model_dir / "lease.json").read_text())
  assert record["pid"] == winner.pid
  assert err == (f"holder: error: {model_dir} is being trained by host {socket.gethostname()} "
                 f"pid {winner.pid} ") + err.split(f"pid {winner.pid} ", 1)[1]
  assert f"({model_dir}/lease.json)" in err and err.count("\n") == 1

  winner.send_signal(signal.SIGKILL)
  winner.communicate()
  # Taken over by another process (this one): the dead holder's pid is gone on this host.
  with caplog.at_level(logging.WARNING), lease.Lease(str(model_dir), **FAST):
    assert json.loads((model_dir / "lease.json").read_text())["pid"] == os.getpid()
  (warning,) = [r.getMessage() for r in caplog.records if r.name == lease.__name__]
  assert warning.startswith(f"taking over the lease of {model_dir} from host "
                            f"{socket.gethostname()} pid {winner.pid}")
  assert warning.endswith(f"its process {winner.pid} is gone")
  assert not (model_dir / "lease.json").exists()  # released at exit
  assert not list(model_dir.glob("*.tmp"))


def _foreign(model_dir, heartbeat_age):
  now = time.time()
  record = {"host": "another-host", "pid": 1234, "started": now - 3600,
            "heartbeat": now - heartbeat_age, "token": "x"}
  tf.io.gfile.makedirs(model_dir)
  files.write_text(os.path.join(model_dir, run_files.LEASE_FILE), json.dumps(record))


@pytest.mark.parametrize("root", ["local", "ram://lease_test"])
def test_lease_of_another_host_is_refused_while_it_beats_and_taken_over_when_silent(
    root, tmp_path, caplog):
  model_dir = str(tmp_path / "m") if root == "local" else root + "/m"
  _foreign(model_dir, heartbeat_age=1)
  with pytest.raises(lease.LeaseHeld, match=r"is being trained by host another-host pid 1234 "
                                            r"\(started .* UTC\), last heartbeat [1-4] s ago"):
    lease.Lease(model_dir, **FAST).acquire()
  _foreign(model_dir, heartbeat_age=100)
  with lease.Lease(model_dir, **FAST) as held:
    assert "no heartbeat for 100 s (more than 5 s)" in caplog.text
    first = held.read()["heartbeat"]
    # The background thread refreshes it (every 0.1 s: waited for, however slow the machine).
    deadline = time.time() + 60
    while held.read()["heartbeat"] == first and time.time() < deadline:
      time.sleep(0.05)
    assert held.read()["heartbeat"] > first
    held.check()
  assert not tf.io.gfile.exists(os.path.join(model_dir, run_files.LEASE_FILE))


def test_a_lease_taken_over_meanwhile_makes_check_fail(tmp_path):
  model_dir = str(tmp_path)
  held = lease.Lease(model_dir, **FAST).acquire()
  try:
    _foreign(model_dir, heartbeat_age=0)
    time.sleep(0.4)
    with pytest.raises(lease.LeaseLost, match="taken over by host another-host pid 1234"):
      held.check()
  finally:
    held.release()
  assert json.loads((tmp_path / "lease.json").read_text())["host"] == "another-host"  # kept


def test_model_dir_that_is_a_file_is_one_line(tmp_path):
  path = tmp_path / "file"
  path.write_text("x")
  with pytest.raises(run_files.RunDirError, match=f"^cannot write model_dir {path}: "):
    lease.Lease(str(path), **FAST).acquire()
