"""Where a training step's wall time goes beyond its matmuls, from a tf.profiler trace.

bench/train_throughput.py compares each step with its matmul floor (the step's matmuls, each
timed alone). That ratio alone does not say whether the rest is the other ops or the matmuls
themselves running slower inside the step (colder caches, two ops sharing the cores). The
trace of a few steps splits each step's wall time into

  matmul_busy_ms  some matmul op is running (others may run beside it: they cost nothing here)
  other_only_ms   no matmul runs, some other op does: the time that fusing or removing the
                  other ops could save ("other_only_by_op": each op type's share of it)
  idle_ms         no op runs at all: the executor, the Python call, the profiler

For steps without XLA only: there TensorFlow runs each op as an event of its own on its
executor threads ("tf_Compute"), named "name:OpType"; an XLA-compiled part (the loss) is one
"ExecuteAsyncOnStream" event there, its fusions running on Eigen's threads, and counts as
"XLA". Under a step compiled whole, matmuls and the rest are one XLA program: not split here.
"""
import collections
import glob
import os
import tempfile
import time

import tensorflow as tf
from tensorflow.tsl.profiler.protobuf import xplane_pb2


def _op_intervals(space):
  """-> [(op type, start ps, end ps)] of every op event on the host's executor threads."""
  intervals = []
  for plane in space.planes:
    if plane.name != "/host:CPU":
      continue
    names = {key: meta.name for key, meta in plane.event_metadata.items()}
    for line in plane.lines:
      if not line.name.startswith("tf_Compute"):
        continue
      for event in line.events:
        name = names.get(event.metadata_id, "")
        if name.endswith("::ExecuteAsyncOnStream"):
          op = "XLA"
        elif "::" in name or ":" not in name:
          continue  # the executor's and the thread pool's own scopes
        else:
          op = name.rsplit(":", 1)[1].strip()  # "name:OpType"
          if op.startswith("__inference"):
            continue  # the call of the whole step
        start = line.timestamp_ns * 1000 + event.offset_ps
        intervals.append((op, start, start + event.duration_ps))
  return intervals


def _covered(intervals):
  """-> total length of the union of [(start, end)]."""
  total, end = 0, None
  for start, stop in sorted(intervals):
    if end is None or start > end:
      total, end = total + stop - start, stop
    elif stop > end:
      total, end = total + stop - end, stop
  return total


def split_step(step, features, steps=3, top=8):
  """Runs `step(features)` (warmed up) `steps` times under the profiler -> ms a step:
  {"traced_step_ms", "matmul_busy_ms", "other_only_ms", "idle_ms", "other_only_by_op": {op
  type: ms, the `top` largest}}."""
  with tempfile.TemporaryDirectory() as logdir:
    tf.profiler.experimental.start(logdir)
    start = time.perf_counter()
    for _ in range(steps):
      loss = step(features)
    loss.numpy()
    wall = time.perf_counter() - start
    tf.profiler.experimental.stop()
    paths = glob.glob(os.path.join(logdir, "plugins", "profile", "*", "*.xplane.pb"))
    space = xplane_pb2.XSpace()
    with open(paths[0], "rb") as f:
      space.ParseFromString(f.read())
  intervals = _op_intervals(space)
  matmuls = [(a, b) for op, a, b in intervals if "MatMul" in op]
  matmul_busy = _covered(matmuls)
  busy = _covered([(a, b) for _, a, b in intervals])
  by_op = collections.defaultdict(list)
  for op, a, b in intervals:
    if "MatMul" not in op:
      by_op[op].append((a, b))
  # An op type's share: the time it adds to the matmuls' union, alone or beside other ops.
  only = {op: _covered(spans + matmuls) - matmul_busy for op, spans in by_op.items()}
  ms = 1e-9 / steps  # picoseconds in all -> milliseconds a step
  return {
      "traced_step_ms": round(1000 * wall / steps, 1),
      "matmul_busy_ms": round(matmul_busy * ms, 1),
      "other_only_ms": round((busy - matmul_busy) * ms, 1),
      "idle_ms": round(1000 * wall / steps - busy * ms, 1),
      "other_only_by_op": {op: round(t * ms, 1) for op, t in
                           sorted(only.items(), key=lambda kv: -kv[1])[:top]}}
