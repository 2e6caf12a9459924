"""The checkpoints of a run directory: writing them by step, finding, listing and restoring them,
and what is left of a save that did not finish.

A checkpoint is `ckpt-<step>.index` / `.data-*`, written by a tf.train.CheckpointManager (which
also keeps the `checkpoint` index file) as tf.train.Checkpoint(model=..., ...): the trainer's
also hold `optimizer`, `rng` and `train_iterator`; an averaged or best one only `model`.
"""
import os
import re

import numpy as np
import tensorflow as tf

from t2t_lite.errors import RunFailure
from t2t_lite.rundir import run_files
from t2t_lite.rundir.run_files import RunDirError

# What reading a damaged checkpoint raises: tf.errors.OpError (DataLossError, NotFoundError,
# ...) from the C++ reader, IndexError ("Read less bytes than requested") from its Python side.
UNREADABLE = (tf.errors.OpError, IndexError)


def manager(checkpoint, directory, max_to_keep):
  """The CheckpointManager that writes ckpt-<step> checkpoints into `directory`."""
  return tf.train.CheckpointManager(checkpoint, directory, max_to_keep=max_to_keep,
                                    checkpoint_name=run_files.CHECKPOINT_PREFIX)


def list_checkpoints(model_dir):
  """Every checkpoint prefix kept by model_dir's CheckpointManager, oldest first ([] if none)."""
  state = tf.train.get_checkpoint_state(model_dir)
  paths = list(state.all_model_checkpoint_paths) if state else []
  return [p if tf.io.gfile.exists(p + ".index") else os.path.join(model_dir, p) for p in paths]


def checkpoint_step(prefix):
  """ckpt-1200 -> 1200: the optimizer step after which it was saved (None without a number)."""
  suffix = prefix.rsplit("-", 1)[-1]
  return int(suffix) if suffix.isdigit() else None


def reason(error):
  """The first line of what a failed read or write said, without the wrapped function's name
  that begins an op's message and the op's name that ends it (not for the user)."""
  line = (str(getattr(error, "message", None) or error).strip().splitlines() or [""])[0]
  return re.sub(r"\s*\[Op:\w+\]$", "", re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", line))


def save_failure(error, step, directory, last, variables):
  """The one-line RunFailure of a save of step `step` that failed (a full disk): it names the
  directory, what a checkpoint takes (the last one's size, or, before the first, what
  `variables` take) and the checkpoint left intact."""
  if last:
    size = f"a checkpoint takes {checkpoint_bytes(last) / 1e6:.1f} MB"
    intact = f"the last good checkpoint, {last}, is intact"
  else:  # What the variables take (not the input's state, which has no size before a save).
    total = sum(int(np.prod(v.shape)) * tf.as_dtype(v.dtype).size for v in variables)
    size = f"its weights and optimizer state alone take {total / 1e6:.1f} MB"
    intact = "no checkpoint was saved before"
  return RunFailure(f"saving the step {step} checkpoint in {directory} failed: {reason(error)} "
                    f"({size}); {intact}")


def restore_newest_readable(restore, model_dir, warn):
  """Calls restore(path) on model_dir's checkpoints, newest first, until one reads -> its path
  (None when model_dir has none). A checkpoint that does not read (its .data truncated or
  missing, its .index damaged: a tf.errors.OpError) is named through warn(message) and the
  previous one is tried: never silently, and never a traceback while an older one is good."""
  paths = list_checkpoints(model_dir)
  for i, path in enumerate(reversed(paths)):
    try:
      restore(path)
      return path
    except UNREADABLE as e:
      fallback = (f"using the previous one, {paths[-i - 2]}" if i + 1 < len(paths)
                  else "no earlier checkpoint is left")
      warn(f"checkpoint {path} does not read ({reason(e)}): {fallback}")
  if paths:
    raise RunDirError(f"no checkpoint of {model_dir} reads (tried {', '.join(paths)}): "
                      "the run must start again in a new --model_dir")
  return None


def remove_stale_temp_dirs(model_dir, log):
  """Removes `<prefix>_temp` directories: the parts of a save that did not finish (a kill or a
  full disk mid-save). Only the lease holder may call this: a live save writes one."""
  for path in tf.io.gfile.glob(run_files.path(model_dir, run_files.SAVE_IN_PROGRESS)):
    if tf.io.gfile.isdir(path):
      tf.io.gfile.rmtree(path)
      log(f"removed {path}: the parts of a save that did not finish")


def checkpoint_bytes(prefix):
  """Size of a checkpoint's files (.index and .data-*), 0 if it has none."""
  return sum(tf.io.gfile.stat(path).length for path in tf.io.gfile.glob(prefix + ".*"))


def find_checkpoint(model_dir, checkpoint_path=None):
  """The checkpoint prefix to restore: `checkpoint_path` (a prefix, or a directory whose latest
  checkpoint is taken), else the latest checkpoint in model_dir."""
  directory = model_dir
  if checkpoint_path:
    if tf.io.gfile.exists(checkpoint_path + ".index"):
      return checkpoint_path
    if not tf.io.gfile.isdir(checkpoint_path):
      raise RunDirError(f"checkpoint {checkpoint_path} not found (no {checkpoint_path}.index)")
    directory = checkpoint_path
  latest = tf.train.latest_checkpoint(directory)
  if latest is None:
    raise RunDirError(f"no checkpoint found in {directory} (looked for its 'checkpoint' file)")
  return latest


def restore_averages(variables, prefix):
  """Restores the moving averages of the weights (a run with --ema_decay) into `variables` (a
  model's trainable variables) -> False, restoring nothing, when the checkpoint has none."""
  status = tf.train.Checkpoint(**{run_files.EMA: list(variables)}).restore(prefix)
  status.expect_partial()
  try:
    status.assert_existing_objects_matched()
  except AssertionError:  # No `ema` object in the checkpoint.
    return False
  return True


def restore_model(model, prefix, averages=True):
  """Restores the model's weights from a checkpoint written as tf.train.Checkpoint(model=...)
  (other objects in it, e.g. the optimizer, are ignored); every model weight must be there.
  Where the checkpoint holds moving averages of the weights, they are the weights restored
  (what decoding, export and averaging use), unless `averages` is False."""
  try:
    if averages and restore_averages(model.trainable_variables, prefix):
      return model
    status = tf.train.Checkpoint(**{run_files.MODEL: model}).restore(prefix)
    status.expect_partial()
    status.assert_existing_objects_matched()
  except (AssertionError, ValueError) as e:  # ValueError: a weight of another shape
    raise RunDirError(f"checkpoint {prefix} does not match the model of "
                      f"{run_files.HPARAMS_FILE}: {str(e).splitlines()[0]}") from None
  return model


def save_model(model, directory, step):
  """Writes `model`'s weights alone as directory/ckpt-<step> (an averaged or best checkpoint,
  which decode and export read like the trainer's) -> the prefix."""
  return manager(tf.train.Checkpoint(**{run_files.MODEL: model}), directory,
                 max_to_keep=1).save(checkpoint_number=step)
