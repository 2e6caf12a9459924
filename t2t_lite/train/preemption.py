"""Pre-emption: SIGTERM (what Cloud TPU, GCE and Kubernetes send before taking a machine away)
asks the trainer to save a checkpoint and return; t2t-lite-train then exits 0.

  with preemption.StopOnSigterm() as stop:
    while ...:
      train a host call
      if stop.requested: save, break

Why not tf.distribute.experimental.PreemptionCheckpointHandler: it supports only
MultiWorkerMirroredStrategy and TPUStrategy (not the default strategy of one CPU or GPU, nor
MirroredStrategy), restores the latest checkpoint by itself when it is created, saves under its
own step counter and exits the process itself. The trainer already owns restoring, step-numbered
saving (after checking its model_dir lease) and agreeing between workers (`Platform.vote`); a
flag read between host calls gives the same guarantee through that one save path. The save
comes at the end of the current host call (steps_per_execution steps), well inside the 30 s
(GCE) to 30 min (Cloud TPU) of notice.
"""
import signal
import threading


class StopOnSigterm:
  """While entered, SIGTERM sets `requested` instead of killing the process; the previous
  handler is put back on exit. Outside the main thread (where Python cannot install signal
  handlers) it does nothing."""

  def __init__(self):
    self.requested = False
    self._previous = None

  def _handle(self, signum, frame):
    del signum, frame
    self.requested = True

  def __enter__(self):
    if threading.current_thread() is threading.main_thread():
      self._previous = signal.signal(signal.SIGTERM, self._handle)
    return self

  def __exit__(self, *unused):
    if self._previous is not None:
      signal.signal(signal.SIGTERM, self._previous)
      self._previous = None
