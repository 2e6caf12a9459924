"""Checkpoint averaging (section 6.1: the last 5 checkpoints for base models, 20 for big).

  path = averaging.average_last(model_dir, num_last=5, output_dir=model_dir + "/avg")

The averaged checkpoint holds the model only, written as tf.train.Checkpoint(model=model) by a
CheckpointManager, so `t2t-lite-decode --model_dir=<output_dir>` (output_dir gets hparams.json,
run.json and the vocabulary too) and `--checkpoint_path=<output_dir>` both accept it, and so
does t2t-lite-export.
"""
import collections
import json
import logging
import os

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import trackable_object_graph_pb2

from t2t_lite import files
from t2t_lite.data import data_files
from t2t_lite.decode import loading
from t2t_lite.errors import RunFailure, T2TLiteError
from t2t_lite.rundir import checkpoints, run_files

MODEL = run_files.MODEL
logger = logging.getLogger(__name__)


class CheckpointError(T2TLiteError, ValueError):
  """Too few checkpoints, or checkpoints whose model variables differ (one-line message)."""


def last_checkpoints(model_dir, num_last, warn=logger.warning):
  """The `num_last` newest checkpoint prefixes of model_dir's CheckpointManager that read,
  oldest first. One that does not read is named through warn(message), as resume and decode
  name it, and the one before it taken instead (checkpoints.newest_readable)."""
  if num_last < 1:
    raise CheckpointError(f"num_last must be >= 1, got {num_last}")
  paths = checkpoints.list_checkpoints(model_dir)
  if not paths:
    raise CheckpointError(f"no checkpoint found in {model_dir} (looked for its 'checkpoint' file)")
  readable = checkpoints.newest_readable(model_dir, checkpoints.read_whole, warn, num_last)
  if len(readable) < num_last:
    damaged = len(paths) - len(readable)
    unread = f" that read (the other {damaged} do not)" if damaged else ""
    raise CheckpointError(f"{model_dir} has {len(readable)} checkpoints{unread}, fewer than the "
                          f"{num_last} asked for")
  return readable


def model_variables(checkpoint):
  """{path: (checkpoint key, shape)} of every variable of the checkpoint's `model` object.

  Paths run from the model through the object graph ("model/encoder_0/ffn/inner/kernel"). They
  are not always the keys: a checkpoint names a variable by its shortest path from the root,
  and the trainer's reaches most model weights first through the optimizer
  ("optimizer/_trainable_variables/3/..."). Optimizer slots are not variables of the model.
  """
  reader = tf.train.load_checkpoint(checkpoint)
  graph = trackable_object_graph_pb2.TrackableObjectGraph()
  graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
  shapes = reader.get_variable_to_shape_map()
  roots = [child.node_id for child in graph.nodes[0].children if child.local_name == MODEL]
  if not roots:
    raise CheckpointError(f"{checkpoint} holds no '{MODEL}' object")
  paths, queue, variables = {roots[0]: MODEL}, collections.deque(roots), {}
  while queue:  # Breadth first: every object once, named by its shortest path from the model.
    node_id = queue.popleft()
    for attribute in graph.nodes[node_id].attributes:
      if attribute.name == "VARIABLE_VALUE":
        key = attribute.checkpoint_key
        variables[paths[node_id]] = (key, tuple(shapes[key]))
    for child in graph.nodes[node_id].children:
      if child.node_id not in paths:
        paths[child.node_id] = f"{paths[node_id]}/{child.local_name}"
        queue.append(child.node_id)
  return variables


def check_same_run(prefixes):
  """Raises CheckpointError when the run files beside the checkpoints (run.json's problem, the
  vocabulary's checksum) differ: equal shapes do not make two models' weights averageable (a
  `checkpoint` index can list another model_dir's checkpoints by absolute path)."""
  def run_of(prefix):
    directory = os.path.dirname(prefix)
    return {"problem": run_files.read_run(directory).problem,
            "vocabulary": data_files.vocab_checksum(directory)[:12]}

  first = run_of(prefixes[0])
  for other in prefixes[1:]:
    run = run_of(other)
    for key in first:
      if run[key] != first[key]:
        raise CheckpointError(f"{prefixes[0]} and {other} come from different runs: "
                              f"{key} {first[key]!r} vs {run[key]!r}")


def check_same_variables(prefixes):
  """Raises CheckpointError naming the first variable whose presence or shape differs."""
  first = {path: shape for path, (_, shape) in model_variables(prefixes[0]).items()}
  if not first:
    raise CheckpointError(f"{prefixes[0]} holds no model variables")
  for other in prefixes[1:]:
    variables = {path: shape for path, (_, shape) in model_variables(other).items()}
    for name in sorted(set(first) | set(variables)):
      if name not in variables:
        raise CheckpointError(f"{name} is in {prefixes[0]} but not in {other}")
      if name not in first:
        raise CheckpointError(f"{name} is in {other} but not in {prefixes[0]}")
      if first[name] != variables[name]:
        raise CheckpointError(f"{name} has shape {list(first[name])} in {prefixes[0]} but "
                              f"{list(variables[name])} in {other}")
  return first


def average_checkpoints(model, prefixes, averages=True):
  """Sets the model's weights to the element-wise mean of theirs in the checkpoints `prefixes`.

  Each checkpoint is restored into the model in turn (tf.train.Checkpoint's own mapping from
  keys to variables) and summed in float64; the mean is cast back to each weight's dtype.
  `averages`: of a run that kept moving averages of its weights, those (what decode uses) or,
  when False, the raw weights.
  """
  check_same_variables(prefixes)
  weights = model.trainable_variables
  sums = [np.zeros(w.shape, np.float64) for w in weights]
  for path in prefixes:
    checkpoints.restore_model(model, path, averages)
    for total, weight in zip(sums, weights):
      total += weight.numpy()
  for total, weight in zip(sums, weights):
    weight.assign((total / len(prefixes)).astype(tf.as_dtype(weight.dtype).as_numpy_dtype))
  return model


def average_last(model_dir, num_last, output_dir):
  """Averages model_dir's last `num_last` checkpoints into output_dir; returns the new prefix.

  output_dir also gets model_dir's hparams.json, run.json, manifest.json and vocabulary
  files, so it is a model_dir that t2t-lite-decode and t2t-lite-export accept as it is.
  output_dir must be new, empty or an earlier average of the same model_dir, which is replaced
  (run_files.check_average_dir).
  """
  run_files.check_run_dir(model_dir)  # Its run files are copied and its model built.
  return average(model_dir, last_checkpoints(model_dir, num_last), output_dir)


def average(model_dir, prefixes, output_dir, averages=True):
  """Averages the checkpoints `prefixes` (oldest first) of model_dir into output_dir, as
  average_last does; returns the new prefix. `averages`: as in average_checkpoints. A write
  that fails (a full disk) is a one-line RunFailure, and leaves no directory it created."""
  model_dir, output_dir = os.fspath(model_dir), os.fspath(output_dir)
  run_files.check_average_dir(model_dir, output_dir)
  check_same_run(prefixes)
  check_same_variables(prefixes)  # Before restoring any of them into the model.
  loaded = loading.load(model_dir, prefixes[-1], precision="none")  # averaged in float32
  average_checkpoints(loaded.model, prefixes, averages)
  created = _first_missing(output_dir)
  try:
    with files.writing(output_dir):
      run_files.copy_run_files(model_dir, output_dir)
      prefix = checkpoints.save_model(loaded.model, output_dir,
                                      checkpoints.checkpoint_step(prefixes[-1]))
      record = {"model_dir": _absolute(model_dir), "averaged": prefixes, "output": prefix}
      files.write_text(run_files.path(output_dir, run_files.AVERAGED_FILE),
                       json.dumps(record, indent=2))
  except RunFailure as e:
    if created and tf.io.gfile.exists(created):
      tf.io.gfile.rmtree(created)
    left = f"{created} was removed" if created else f"{output_dir} may hold part of it"
    raise RunFailure(f"{e}; {left}") from None
  return prefix


def _first_missing(directory):
  """The outermost of `directory` and (local) its parents that does not exist yet: what writing
  into it creates. None when it exists."""
  if "://" in directory:
    return None if files.exists(directory) else directory
  missing, directory = None, os.path.abspath(directory)
  while not files.exists(directory):
    missing, directory = directory, os.path.dirname(directory)
  return missing


def _absolute(directory):
  """A local directory's absolute path (what a later average compares), others as they are."""
  return directory if "://" in directory else os.path.abspath(directory)
