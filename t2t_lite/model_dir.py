"""The model_dir contract: what a training run writes, and how decode, averaging and export read
it back. Every file name of a model_dir, and every rule about them, lives here.

Layout (everything through tf.io.gfile: local, gs://, ram://):
  hparams.json       the full HParams of the run (`HParams.load`); a resume with different
                     hparams is refused (`check_saved_hparams`).
  run.json           {"problem", "hparams_set", "hparams_overrides", "vocab_size", "seed",
                     "grad_accum_steps", "num_replicas", "mixed_precision", "data_dir",
                     "vocab_files"}: what decode / export need besides hparams.json.
  vocab*             the problem's vocabulary files copied from data_dir (whatever `vocab*`
                     files it has, e.g. vocab.model; none for fixed-vocabulary problems), so
                     that `problem.tokenizer(model_dir)` works with model_dir alone.
  manifest.json      data_dir's manifest (data settings and counts), for the record.
  checkpoint         tf.train.CheckpointManager index; ckpt-<step>.index / .data-*: the
                     checkpoint after optimizer step <step>. Objects: `model` (the Transformer),
                     `optimizer` (Adam slots and iterations = the step), `rng` (dropout seed
                     states), `train_iterator` (the input pipeline's position). Weights only:
                     `restore_model(model, path)`.
  train/, eval/      TensorBoard event files (tf.summary.scalar): train/ loss, learning_rate,
                     tokens_per_second, gradient_norm; eval/ loss, perplexity, accuracy,
                     tokens and the dev metrics (dev_bleu, dev_paper_bleu, ...).

Checks made before a run writes into a model_dir (resuming it) belong in `check_saved_hparams`
or beside it, so that the trainer and the train CLI keep calling one function.
"""
import dataclasses
import hashlib
import json
import logging
import os
from typing import Any, Optional

import tensorflow as tf

from t2t_lite import files
from t2t_lite import precision as precision_lib
from t2t_lite.errors import T2TLiteError
from t2t_lite.hparams import HParams

HPARAMS_FILE = "hparams.json"
RUN_FILE = "run.json"
MANIFEST_FILE = "manifest.json"
VOCAB_PATTERN = "vocab*"  # The vocabulary files of a data_dir, copied as they are.
MODEL = "model"  # The model's name in the checkpoints' object graph.
CHECKPOINT_PREFIX = "ckpt"  # tf.train.CheckpointManager's: ckpt-<step>.


logger = logging.getLogger(__name__)


class ModelDirError(T2TLiteError, ValueError):
  """A missing or mismatched model_dir file or checkpoint (one-line message)."""


def _path(model_dir, name):
  return os.path.join(model_dir, name)


def read_json(path):
  with tf.io.gfile.GFile(path) as f:
    return json.loads(f.read())


def write_json(path, value):
  files.write_text(path, json.dumps(value, indent=2, sort_keys=True))


# --------------------------------------------------------------------------- writing a run
def check_saved_hparams(model_dir, hparams, problem=None):
  """Refuses to resume a model_dir of another problem, or whose hparams.json differs from
  `hparams` (naming the first difference). A new or empty model_dir passes."""
  run_path = _path(model_dir, RUN_FILE)
  if problem and tf.io.gfile.exists(run_path):
    saved_problem = read_json(run_path).get("problem")
    if saved_problem != problem:
      raise ModelDirError(f"{model_dir} was trained on problem {saved_problem!r}, not "
                          f"{problem!r}: use a new --model_dir")
  path = _path(model_dir, HPARAMS_FILE)
  if not tf.io.gfile.exists(path):
    return
  saved = dataclasses.asdict(HParams.load(path))
  for key, value in dataclasses.asdict(hparams).items():
    if saved.get(key) != value:
      raise ModelDirError(
          f"{model_dir} was trained with {key}={saved.get(key)!r}, not {value!r}: resume with "
          f"the same hparams (see {path}) or use a new --model_dir")


def vocab_checksum(directory):
  """sha256 over the names and bytes of directory's vocabulary files ("" when it has none):
  two vocabularies of the same size but other pieces give other ids for the same text."""
  digest = hashlib.sha256()
  paths = sorted(tf.io.gfile.glob(_path(directory, VOCAB_PATTERN)))
  for path in paths:
    with tf.io.gfile.GFile(path, "rb") as f:
      digest.update(os.path.basename(path).encode() + b"\0" + f.read())
  return digest.hexdigest() if paths else ""


# What exact resume depends on besides hparams.json: run.json fields that must not change.
RESUME_FIELDS = ("problem", "seed", "grad_accum_steps", "num_replicas", "mixed_precision")


def check_resume(model_dir, run_info, data_dir=None):
  """Refuses to resume a model_dir whose run.json says another problem, seed, accumulation,
  replica count or precision, or whose vocabulary differs from data_dir's (naming the first
  difference). Reads only: called before anything in model_dir is written."""
  path = _path(model_dir, RUN_FILE)
  if not tf.io.gfile.exists(path):
    return
  saved = read_json(path)
  for key in RESUME_FIELDS:
    if key in saved and key in run_info and saved[key] != run_info[key]:
      raise ModelDirError(
          f"{model_dir} was trained with {key}={saved[key]!r}, not {run_info[key]!r}: exact "
          f"resume needs the same {key} (see {path}), or use a new --model_dir")
  if data_dir is not None:
    # Compare with model_dir's own copy (present since the first run; run.json's checksum is
    # only a record): a vocabulary of the same size but other pieces would pass any size check.
    ours, theirs = vocab_checksum(model_dir), vocab_checksum(data_dir)
    if ours != theirs:
      raise ModelDirError(
          f"the vocabulary of {data_dir} differs from the one {model_dir} was trained with "
          f"(sha256 {theirs[:12] or 'none'} vs {ours[:12] or 'none'}): resume with the "
          f"data_dir of the run ({saved.get('data_dir')}) or use a new --model_dir")


def copy_vocabulary(source_dir, model_dir):
  """Copies source_dir's vocabulary files into model_dir -> their names, sorted."""
  names = []
  for path in sorted(tf.io.gfile.glob(_path(source_dir, VOCAB_PATTERN))):
    name = os.path.basename(path)
    files.copy(path, _path(model_dir, name))
    names.append(name)
  return names


def _copy_if_present(name, source_dir, model_dir):
  if tf.io.gfile.exists(_path(source_dir, name)):
    files.copy(_path(source_dir, name), _path(model_dir, name))


def write_run_files(model_dir, hparams, run_info, data_dir=None):
  """hparams.json, run.json, and the vocabulary / manifest copied from data_dir."""
  tf.io.gfile.makedirs(model_dir)
  hparams.save(_path(model_dir, HPARAMS_FILE))
  vocab_files = []
  if data_dir:
    vocab_files = copy_vocabulary(data_dir, model_dir)
    _copy_if_present(MANIFEST_FILE, data_dir, model_dir)
  write_json(_path(model_dir, RUN_FILE), dict(run_info, vocab_files=vocab_files,
                                               vocab_sha256=vocab_checksum(model_dir)))


def copy_run_files(model_dir, output_dir):
  """Copies model_dir's files other than checkpoints (hparams.json, run.json, manifest.json,
  the vocabulary) into output_dir, which then loads like model_dir (e.g. averaged weights)."""
  tf.io.gfile.makedirs(output_dir)
  for name in (HPARAMS_FILE, RUN_FILE, MANIFEST_FILE):
    _copy_if_present(name, model_dir, output_dir)
  copy_vocabulary(model_dir, output_dir)


# --------------------------------------------------------------------------- checkpoints
def checkpoint_manager(checkpoint, directory, max_to_keep):
  """The CheckpointManager that writes ckpt-<step> checkpoints into `directory`."""
  return tf.train.CheckpointManager(checkpoint, directory, max_to_keep=max_to_keep,
                                    checkpoint_name=CHECKPOINT_PREFIX)


def list_checkpoints(model_dir):
  """Every checkpoint prefix kept by model_dir's CheckpointManager, oldest first ([] if none)."""
  state = tf.train.get_checkpoint_state(model_dir)
  paths = list(state.all_model_checkpoint_paths) if state else []
  return [p if tf.io.gfile.exists(p + ".index") else _path(model_dir, p) for p in paths]


def checkpoint_step(checkpoint):
  """ckpt-1200 -> 1200: the optimizer step after which it was saved (None without a number)."""
  suffix = checkpoint.rsplit("-", 1)[-1]
  return int(suffix) if suffix.isdigit() else None


# What reading a damaged checkpoint raises: tf.errors.OpError (DataLossError, NotFoundError,
# ...) from the C++ reader, IndexError ("Read less bytes than requested") from its Python side.
UNREADABLE = (tf.errors.OpError, IndexError)


def _reason(error):
  return _first_line(getattr(error, "message", None) or error)


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
      warn(f"checkpoint {path} does not read ({_reason(e)}): {fallback}")
  if paths:
    raise ModelDirError(f"no checkpoint of {model_dir} reads (tried {', '.join(paths)}): "
                        "the run must start again in a new --model_dir")
  return None


def remove_stale_temp_dirs(model_dir, log):
  """Removes `<prefix>_temp` directories: the parts of a save that did not finish (a kill or a
  full disk mid-save). Only the lease holder may call this: a live save writes one."""
  for path in tf.io.gfile.glob(_path(model_dir, "*_temp")):
    if tf.io.gfile.isdir(path):
      tf.io.gfile.rmtree(path)
      log(f"removed {path}: the parts of a save that did not finish")


def checkpoint_bytes(prefix):
  """Size of a checkpoint's files (.index and .data-*), 0 if it has none."""
  return sum(tf.io.gfile.stat(path).length for path in tf.io.gfile.glob(prefix + ".*"))


def _first_line(text):
  return (str(text).strip().splitlines() or [""])[0]


def find_checkpoint(model_dir, checkpoint_path=None):
  """The checkpoint prefix to restore: `checkpoint_path` (a prefix, or a directory whose latest
  checkpoint is taken), else the latest checkpoint in model_dir."""
  directory = model_dir
  if checkpoint_path:
    if tf.io.gfile.exists(checkpoint_path + ".index"):
      return checkpoint_path
    if not tf.io.gfile.isdir(checkpoint_path):
      raise ModelDirError(f"checkpoint {checkpoint_path} not found (no {checkpoint_path}.index)")
    directory = checkpoint_path
  latest = tf.train.latest_checkpoint(directory)
  if latest is None:
    raise ModelDirError(f"no checkpoint found in {directory} (looked for its 'checkpoint' file)")
  return latest


def restore_model(model, checkpoint):
  """Restores the model's weights from a checkpoint written as tf.train.Checkpoint(model=...)
  (other objects in it, e.g. the optimizer, are ignored); every model weight must be there."""
  try:
    status = tf.train.Checkpoint(**{MODEL: model}).restore(checkpoint)
    status.expect_partial()
    status.assert_existing_objects_matched()
  except (AssertionError, ValueError) as e:  # ValueError: a weight of another shape
    raise ModelDirError(f"checkpoint {checkpoint} does not match the model of {HPARAMS_FILE}: "
                        f"{str(e).splitlines()[0]}") from None
  return model


# --------------------------------------------------------------------------- loading back
@dataclasses.dataclass
class LoadedModel:
  """What a model_dir holds, restored: the model (weights from `checkpoint`) and its vocabulary."""
  model: Any
  hparams: HParams
  problem: Any
  tokenizer: Any
  checkpoint: str


def read_run_info(model_dir):
  """run.json of a model_dir (written by the trainer)."""
  path = _path(model_dir, RUN_FILE)
  if not tf.io.gfile.exists(path):
    raise ModelDirError(f"{path} is missing: is {model_dir} a t2t-lite-train model_dir?")
  return read_json(path)


def read_hparams(model_dir):
  path = _path(model_dir, HPARAMS_FILE)
  if not tf.io.gfile.exists(path):
    raise ModelDirError(f"{path} is missing: is {model_dir} a t2t-lite-train model_dir?")
  return HParams.load(path)


def _data_settings(model_dir):
  """The problem settings the run's data was prepared with (manifest.json), {} without one:
  e.g. wsj_parsing's target_tags decide how its outputs read as trees."""
  path = _path(model_dir, MANIFEST_FILE)
  return read_json(path).get("settings", {}) if tf.io.gfile.exists(path) else {}


def load(model_dir, checkpoint_path: Optional[str] = None, precision="none"):
  """Builds the model of model_dir/hparams.json, restores its checkpoint and the vocabulary,
  and makes it a model for decoding in `precision` (precision.inference_model)."""
  import t2t_lite  # The package's registries; imported here as the package imports us.
  hparams = read_hparams(model_dir)
  problem = t2t_lite.get_problem(read_run_info(model_dir)["problem"], **_data_settings(model_dir))
  tokenizer = problem.tokenizer(model_dir)
  precision_lib.check(precision)
  with precision_lib.building("none"):  # checkpoints hold float32 weights
    model = t2t_lite.build_model(hparams, tokenizer.vocab_size)
  if checkpoint_path:  # Asked for by name: no other one will do.
    checkpoint = find_checkpoint(model_dir, checkpoint_path)
    try:
      restore_model(model, checkpoint)
    except UNREADABLE as e:
      raise ModelDirError(f"checkpoint {checkpoint} does not read ({_reason(e)})") from None
  else:
    checkpoint = restore_newest_readable(lambda path: restore_model(model, path), model_dir,
                                         logger.warning)
    if checkpoint is None:
      find_checkpoint(model_dir)  # Raises, naming the directory.
  model = precision_lib.inference_model(model, precision)
  return LoadedModel(model, hparams, problem, tokenizer, checkpoint)
