"""model_dir ownership: the one trainer that writes a model_dir holds its lease.

  with lease.Lease(model_dir):   # LeaseHeld (exit 2) naming the holder if another trainer has it
    ...train, calling lease.check() before each save...

model_dir/lease.json = {"host", "pid", "started", "heartbeat", "token"}, written through
tf.io.gfile, so the same code works on a local disk, a shared (NFS) disk and gs://. Not an OS
lock: flock() does not exist on gs:// and is unreliable on network disks, and a lock dies with
neither a host nor a process name for the message. A background thread rewrites "heartbeat"
every `heartbeat_seconds`.

A lease found in model_dir is taken over, with a warning saying why, when it is stale:
  - its holder ran on this host and its pid is gone (a SIGKILL, a crash), or
  - its heartbeat is older than `stale_seconds` (a VM taken away; the clocks of two hosts are
    compared, so keep stale_seconds well above any clock skew).
Otherwise the new trainer is refused with a one-line error naming the holder.

Races: two trainers may both find no lease and both write theirs (a rename, so the file is
always one whole record). Each waits `settle_seconds`, reads the file back, and only the one
whose token is there goes on; the other is refused. This holds as long as reading, deciding
and writing take less than settle_seconds, which is milliseconds against seconds. The
heartbeat thread also reads before it writes: a trainer whose lease was taken over (it was
paused longer than stale_seconds) learns it there, and `check()` then raises LeaseLost instead
of letting it save over the new holder's checkpoints.
"""
import datetime
import json
import logging
import os
import socket
import threading
import time
import uuid

import tensorflow as tf

from t2t_lite.errors import RunFailure, T2TLiteError, reason
from t2t_lite.rundir import run_files
from t2t_lite.rundir.run_files import RunDirError

logger = logging.getLogger(__name__)

class LeaseHeld(T2TLiteError):
  """Another live trainer holds model_dir (exit status 2: use another model_dir, or wait)."""


class LeaseLost(RunFailure):
  """This trainer's lease was taken over while it ran (exit status 1)."""


def _describe(record):
  started = datetime.datetime.fromtimestamp(record.get("started", 0), datetime.timezone.utc)
  return (f"host {record.get('host')} pid {record.get('pid')} "
          f"(started {started:%Y-%m-%d %H:%M:%S} UTC)")


def _pid_alive(pid):
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except (PermissionError, OverflowError, TypeError):
    return True  # Someone else's process, or a pid we cannot test: assume alive.
  return True


class Lease:
  """The lease of one model_dir; see the module docstring. Use as a context manager, or call
  acquire() and release()."""

  def __init__(self, model_dir, *, heartbeat_seconds=30.0, stale_seconds=300.0,
               settle_seconds=1.0):
    self.model_dir = model_dir
    self.path = run_files.path(model_dir, run_files.LEASE_FILE)
    self.heartbeat_seconds, self.stale_seconds = heartbeat_seconds, stale_seconds
    self.settle_seconds = settle_seconds
    self.record = {"host": socket.gethostname(), "pid": os.getpid(), "started": time.time(),
                   "heartbeat": time.time(), "token": uuid.uuid4().hex}
    self._stop = threading.Event()
    self._thread = None
    self._taken_by = None  # The record found by the heartbeat thread when we lost the lease.

  # ------------------------------------------------------------------ file access
  def read(self):
    """The lease record in model_dir, or None; an unreadable file counts as no lease."""
    try:
      with tf.io.gfile.GFile(self.path) as f:
        record = json.loads(f.read())
    except tf.errors.NotFoundError:
      return None
    except (ValueError, tf.errors.OpError) as e:
      logger.warning("%s is unreadable (%s): ignoring it", self.path, reason(e))
      return None
    return record if isinstance(record, dict) else None

  def _write(self):
    # A temporary name of our own: two trainers writing at once must not share one.
    temp = f"{self.path}.{self.record['token']}.tmp"
    with tf.io.gfile.GFile(temp, "w") as f:
      f.write(json.dumps(self.record, sort_keys=True))
    tf.io.gfile.rename(temp, self.path, overwrite=True)

  def _ours(self, record):
    return record is not None and record.get("token") == self.record["token"]

  # ------------------------------------------------------------------ taking and keeping it
  def stale_reason(self, record, now=None):
    """Why `record`'s holder is gone ("" if it may be alive)."""
    now = time.time() if now is None else now
    if record.get("host") == self.record["host"] and not _pid_alive(record.get("pid")):
      return f"its process {record.get('pid')} is gone"
    age = now - float(record.get("heartbeat", 0))
    if age > self.stale_seconds:
      return f"no heartbeat for {age:.0f} s (more than {self.stale_seconds:g} s)"
    return ""

  def acquire(self):
    try:
      tf.io.gfile.makedirs(self.model_dir)
      if not tf.io.gfile.isdir(self.model_dir):
        raise RunDirError(f"model_dir {self.model_dir} is not a directory")
      found = self.read()
      if found is not None and not self._ours(found):
        why = self.stale_reason(found)
        if not why:
          raise self._held(found)
        logger.warning("taking over the lease of %s from %s: %s", self.model_dir,
                       _describe(found), why)
      self.record["heartbeat"] = time.time()
      self._write()
    except tf.errors.OpError as e:
      raise RunDirError(f"cannot write model_dir {self.model_dir}: "
                          f"{reason(e)}") from None
    time.sleep(self.settle_seconds)
    found = self.read()
    if not self._ours(found):
      raise self._held(found or {})
    self._remove_stale_temps()
    self._stop.clear()
    self._thread = threading.Thread(target=self._beat, name="t2t-lite-lease", daemon=True)
    self._thread.start()
    return self

  def _remove_stale_temps(self):
    """Temporary files of earlier holders killed between writing and renaming a record."""
    for path in tf.io.gfile.glob(f"{self.path}.*.tmp"):
      if self.record["token"] not in path:
        try:
          tf.io.gfile.remove(path)
        except tf.errors.OpError:
          pass  # Renamed meanwhile by a trainer that lost the race.

  def _held(self, record):
    age = time.time() - float(record.get("heartbeat", 0))
    return LeaseHeld(
        f"{self.model_dir} is being trained by {_describe(record)}, last heartbeat {age:.0f} s "
        f"ago ({self.path}); stop that trainer or use another --model_dir (a lease without "
        f"heartbeat for {self.stale_seconds:g} s is taken over)")

  def _beat(self):
    while not self._stop.wait(self.heartbeat_seconds):
      try:
        found = self.read()
        if not self._ours(found):
          self._taken_by = found or {}
          logger.error("the lease of %s was taken over by %s", self.model_dir,
                       _describe(self._taken_by))
          return
        self.record["heartbeat"] = time.time()
        self._write()
      except tf.errors.OpError as e:  # A transient storage error: try again next beat.
        logger.warning("could not refresh %s: %s", self.path, reason(e))

  def check(self):
    """Raises LeaseLost if another trainer holds the lease now (call before each save)."""
    found = self._taken_by or self.read()
    if not self._ours(found):
      raise LeaseLost(f"the lease of {self.model_dir} was taken over by "
                      f"{_describe(found or {})}: stopped without saving, so that the two runs' "
                      f"checkpoints do not mix")

  def release(self):
    """Stops the heartbeat and removes the lease if it is still ours."""
    self._stop.set()
    if self._thread is not None:
      self._thread.join()
      self._thread = None
    try:
      if self._ours(self.read()):
        tf.io.gfile.remove(self.path)
    except tf.errors.OpError as e:
      logger.warning("could not remove %s: %s", self.path, reason(e))

  def __enter__(self):
    return self.acquire()

  def __exit__(self, *unused):
    self.release()
