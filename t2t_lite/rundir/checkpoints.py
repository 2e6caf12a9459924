"""The checkpoints of a run directory: writing them by step, finding, listing and restoring them,
and what is left of a save that did not finish.

A checkpoint is `ckpt-<step>.index` / `.data-*`, written by a tf.train.CheckpointManager (which
also keeps the `checkpoint` index file) as tf.train.Checkpoint(model=..., ...): the trainer's
also hold `optimizer`, `rng` and `train_iterator`; an averaged or best one only `model`.
"""
import os
import uuid

import tensorflow as tf

from t2t_lite.errors import RunFailure, reason
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


def save_failure(error, step, directory, last, checkpoint):
  """The one-line RunFailure of a save of step `step` that failed (a full disk): it names the
  directory, what a checkpoint of this run takes (the last one's size or, before the first, the
  size of `checkpoint`, a tf.train.Checkpoint, written once to memory to measure it: weights,
  optimizer slots and the input pipeline's state alike) and the checkpoint left intact."""
  if last:
    size, intact = checkpoint_bytes(last), f"the last good checkpoint, {last}, is intact"
  else:
    size, intact = _size_in_memory(checkpoint), "no checkpoint was saved before"
  return RunFailure(f"saving the step {step} checkpoint in {directory} failed: {reason(error)} "
                    f"(a checkpoint of this run takes {size / 1e6:.1f} MB); {intact}")


def _size_in_memory(checkpoint):
  """Bytes `checkpoint` takes once written (on TensorFlow's ram:// file system, then freed)."""
  prefix = f"ram://t2t_lite_checkpoint_size/{uuid.uuid4().hex}/ckpt"
  try:
    return checkpoint_bytes(checkpoint.write(prefix))
  finally:
    tf.io.gfile.rmtree(os.path.dirname(prefix))


def newest_readable(model_dir, read, warn, count=1):
  """Calls read(path) on model_dir's checkpoints, newest first, until `count` of them have read
  -> their paths, oldest first (fewer when fewer read; [] when model_dir has none). One that
  does not read (its .data truncated or missing, its .index damaged) is named through
  warn(message) and the previous one tried: never silently, and never a traceback while an
  older one is good."""
  paths, readable = list_checkpoints(model_dir), []
  for i, path in enumerate(reversed(paths)):
    if len(readable) == count:
      break
    try:
      read(path)
      readable.append(path)
    except UNREADABLE as e:
      fallback = (f"using the previous one, {paths[-i - 2]}" if i + 1 < len(paths)
                  else "no earlier checkpoint is left")
      warn(f"checkpoint {path} does not read ({reason(e)}): {fallback}")
  return readable[::-1]


def restore_newest_readable(restore, model_dir, warn):
  """restore(path) of model_dir's newest checkpoint that reads (newest_readable) -> its path,
  None when model_dir has none; a RunDirError when none of them reads."""
  restored = newest_readable(model_dir, restore, warn)
  if restored:
    return restored[0]
  paths = list_checkpoints(model_dir)
  if paths:
    raise RunDirError(f"no checkpoint of {model_dir} reads (tried {', '.join(paths)}): "
                      "the run must start again in a new --model_dir")
  return None


def read_whole(prefix):
  """Reads every tensor of checkpoint `prefix`: raises one of UNREADABLE where it is damaged.
  For checkpoints about to be read whole anyway (averaging)."""
  reader = tf.train.load_checkpoint(prefix)
  for name, dtype in reader.get_variable_to_dtype_map().items():
    if dtype != tf.variant:  # The input iterator's state: not readable as a tensor here.
      reader.get_tensor(name)


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
                      f"{run_files.HPARAMS_FILE}: {reason(e)}") from None
  return model


def save_model(model, directory, step):
  """Writes `model`'s weights alone as directory/ckpt-<step> (an averaged or best checkpoint,
  which decode and export read like the trainer's) -> the prefix."""
  return manager(tf.train.Checkpoint(**{run_files.MODEL: model}), directory,
                 max_to_keep=1).save(checkpoint_number=step)
