"""The run directory (model_dir): every file and folder name in it, what its run files hold, and
the one check a run makes before it writes into a directory that holds an earlier run.

Layout (everything through tf.io.gfile: local, gs://, ram://):
  hparams.json       the full HParams of the run (`HParams.load`).
  run.json           {"problem", "hparams_set", "hparams_overrides", "vocab_size", "seed",
                     "grad_accum_steps", "num_replicas", "mixed_precision", "packed",
                     "train_cache", "data_dir", "vocab_files", "vocab_sha256"}: what decoding
                     and a resume need besides hparams.json.
  vocab*             the problem's vocabulary files copied from data_dir (none for fixed
                     vocabularies), so that `problem.tokenizer(model_dir)` works with model_dir
                     alone.
  manifest.json      data_dir's manifest: the problem settings the data was prepared with.
  lease.json         the trainer that holds the directory (t2t_lite/rundir/lease.py).
  checkpoint, ckpt-<step>.index / .data-*   the checkpoints (t2t_lite/rundir/checkpoints.py);
  ckpt-<step>_temp/  a save in progress (removed at the next start if it never finished).
  workertemp_<task>_<index>/   a non-chief worker's own copy of a save, removed after it.
  train/, eval/      TensorBoard event files (t2t_lite/train/training_log.py).
  best/              the best model so far by the run's selection metric: a run directory of
                     its own (run files and the weights alone as ckpt-<step>), with
  best/best.json     {"metric", "value", "step"} and, once the run stopped early,
                     "stopped_early": {"step", "reason"} (t2t_lite/train/model_selection.py).
  averaged.json      in an averaged run directory: {"model_dir", "averaged" (the checkpoints),
                     "output"}; a later average of the same model_dir may replace it
                     (check_average_dir).
  litert/<quantization>/   the LiteRT export t2t-lite-decode --engine=litert decodes with,
                     made on first use (t2t_lite/decode/litert_export.py's `cached`).
  shortlist.npz      the vocabulary shortlist decoding builds from the training data the first
                     time it is asked for one (t2t_lite/decode/shortlist.py).

`check_run_dir` refuses a directory without run files, which every tool that reads a run checks
first; `check_average_dir` and `check_data_dir_apart` refuse a directory another writer owns; `read_run` reads the run files once; `check_resume` compares them with a new run's before
any byte of the directory changes; `write_run_files` writes them. TensorFlow (tf.io.gfile) is
imported by the functions that read or write a file, not here: the names and `check_run_dir`
serve a tool before it loads TensorFlow (t2t_lite/files.py looks at a local path with os.path).
"""
import dataclasses
import fnmatch
import json
import os
from typing import Optional

from t2t_lite import files
from t2t_lite.data import data_files
from t2t_lite.errors import T2TLiteError
from t2t_lite.hyperparams import HParams

HPARAMS_FILE = "hparams.json"
RUN_FILE = "run.json"
MANIFEST_FILE = data_files.MANIFEST_FILE
LEASE_FILE = "lease.json"
AVERAGED_FILE = "averaged.json"
SHORTLIST_FILE = "shortlist.npz"
LITERT_DIR = "litert"
BEST_DIR, BEST_FILE = "best", "best.json"
CHECKPOINT_PREFIX = "ckpt"  # tf.train.CheckpointManager's names: ckpt-<step>.
SAVE_IN_PROGRESS = "*_temp"  # What tf.train.Checkpoint writes a save into before renaming it.
MODEL = "model"  # The model's name in the checkpoints' object graph.
EMA = "ema"  # The moving averages of its trainable weights, when the run keeps them.
TRAIN_SUMMARIES, EVAL_SUMMARIES = "train", "eval"
# The directories inside a model_dir that the trainer writes and replaces as it goes: nothing
# else may write there (an average in best/ would pass for the best model best.json describes).
TRAINER_DIRS = (BEST_DIR, TRAIN_SUMMARIES, EVAL_SUMMARIES, SAVE_IN_PROGRESS, "workertemp_*")
# What exact resume depends on besides hparams.json, the vocabulary and the packing (the saved
# input iterator restores only into the pipeline it came from): run.json fields that must not
# change.
RESUME_FIELDS = ("vocab_size", "seed", "grad_accum_steps", "num_replicas", "mixed_precision",
                 "ema_decay")


class RunDirError(T2TLiteError, ValueError):
  """A missing, mismatched or unwritable run directory file or checkpoint (one line)."""


def path(model_dir, name):
  return os.path.join(model_dir, name)


def litert_cache_dir(model_dir, weights):
  """Where t2t-lite-decode --engine=litert keeps model_dir's LiteRT export of `quantization`."""
  return path(model_dir, os.path.join(LITERT_DIR, weights))


def worker_temp_dir(model_dir, task_type, task_id):
  """Where a non-chief worker writes its copy of each save (it deletes it afterwards)."""
  return path(model_dir, f"workertemp_{task_type}_{task_id}")


def read_json(file_path):
  import tensorflow as tf
  with tf.io.gfile.GFile(file_path) as f:
    return json.loads(f.read())


@dataclasses.dataclass(frozen=True)
class SavedRun:
  """A run directory's run files, read once (`read_run`)."""
  model_dir: str
  hparams: Optional[HParams]  # None: no hparams.json (a directory of an unfinished start).
  info: dict  # run.json, {} without one.
  data_settings: dict  # The problem settings of its manifest copy, {} without one.

  @property
  def problem(self):
    return self.info.get("problem")

  def require_hparams(self):
    """hparams.json's HParams; a RunDirError naming the file when there is none."""
    if self.hparams is None:
      raise _missing(self.model_dir, HPARAMS_FILE)
    return self.hparams

  def require_problem(self):
    """run.json's problem name; a RunDirError naming the file when there is none."""
    if not self.problem:
      raise _missing(self.model_dir, RUN_FILE)
    return self.problem


def _missing(model_dir, name):
  return RunDirError(f"{path(model_dir, name)} is missing: is {model_dir} a t2t-lite-train "
                     "model_dir?")


def check_run_dir(model_dir):
  """Refuses (RunDirError, as SavedRun.require_hparams and require_problem would after
  loading) a model_dir without the hparams.json and run.json that decoding, scoring, export,
  averaging and attention pictures read: a mistyped --model_dir, refused before TensorFlow
  loads."""
  for name in (HPARAMS_FILE, RUN_FILE):
    if not files.exists(path(model_dir, name)):
      raise _missing(model_dir, name)


def check_data_dir_apart(model_dir, data_dir):
  """Refuses (RunDirError) to train into model_dir when it is data_dir itself (also through a
  symlink or another spelling): the run files, checkpoints and event files would go among the
  data's. A model_dir inside data_dir, or the other way round, passes: the trainer and the data
  preparation each write only their own names. Reads nothing; no TensorFlow."""
  if model_dir and data_dir and files.same_path(model_dir, data_dir):
    raise RunDirError(f"model_dir {model_dir} is the data_dir {data_dir}: the run's files would "
                      "go among the data's; give the run a directory of its own")


def check_average_dir(model_dir, output_dir):
  """Refuses (RunDirError) an output_dir for an average of model_dir's checkpoints that holds or
  belongs to something else: model_dir itself; a directory a run's trainer owns (best/, train/,
  eval/, a save in progress, in any run directory above it); a file; a directory that is not
  empty, unless it holds an earlier average of the same model_dir (its averaged.json says so),
  which the new one replaces. Reads only, without TensorFlow for a local path."""
  model_dir, output_dir = os.fspath(model_dir), os.fspath(output_dir)
  if files.same_path(output_dir, model_dir):
    raise RunDirError(f"output_dir {output_dir} is the model_dir: the average would replace "
                      "its checkpoints")
  owner = _trainer_dir_above(output_dir)
  if owner:
    where = "is" if files.same_path(owner, output_dir) else "is inside"
    raise RunDirError(f"output_dir {output_dir} {where} the {os.path.basename(owner)}/ of the run "
                      f"in {os.path.dirname(owner)}, which t2t-lite-train writes: give a "
                      f"directory of its own (e.g. {model_dir}/avg)")
  files.check_not_a_file(output_dir, "output_dir", RunDirError)
  names = sorted(files.listdir(output_dir)) if files.exists(output_dir) else []
  if not names:
    return
  source = averaged_from(output_dir)
  if source is None:
    raise RunDirError(f"output_dir {output_dir} holds {len(names)} entries (e.g. {names[0]}) and "
                      f"no {AVERAGED_FILE} of an earlier average: give a new or empty directory")
  if not files.same_path(source, model_dir):
    raise RunDirError(f"output_dir {output_dir} holds an average of {source}, not of "
                      f"{model_dir}: give a new or empty directory")


def _trainer_dir_above(directory):
  """The first of TRAINER_DIRS that `directory` is or lies in (its path), None if none."""
  directory = directory if "://" in directory else os.path.realpath(directory)
  child, parent = directory, os.path.dirname(directory)
  while parent != child:
    is_run = files.exists(path(parent, RUN_FILE)) or files.exists(path(parent, HPARAMS_FILE))
    if is_run and any(fnmatch.fnmatch(os.path.basename(child), name) for name in TRAINER_DIRS):
      return child
    child, parent = parent, os.path.dirname(parent)
  return None


def averaged_from(directory):
  """The model_dir whose checkpoints the average in `directory` was made of (averaged.json),
  None when it holds no average or one whose record does not read."""
  record_path = path(directory, AVERAGED_FILE)
  try:
    record = json.loads(files.read_text(record_path)) if files.exists(record_path) else {}
    # Older records name the averaged checkpoints only.
    return record.get("model_dir") or os.path.dirname(record["averaged"][0])
  except (ValueError, KeyError, IndexError, TypeError, AttributeError, OSError):
    return None


def read_run(model_dir):
  """The run files of model_dir (all empty for a new or empty directory)."""
  hparams_path, run_path = path(model_dir, HPARAMS_FILE), path(model_dir, RUN_FILE)
  manifest = data_files.read_manifest(model_dir) or {}
  return SavedRun(
      model_dir, HParams.load(hparams_path) if files.exists(hparams_path) else None,
      read_json(run_path) if files.exists(run_path) else {},
      manifest.get("settings", {}))


def check_resume(saved, hparams, run_info, data_dir=None, data_settings=None):
  """Refuses (RunDirError, naming the first difference) to train into saved.model_dir when it
  holds a run of another problem, other problem settings, other hparams, another seed,
  accumulation, replica count, precision or packing, or another vocabulary than data_dir's.
  Reads only, so that a refused run leaves every byte of the directory as it was. A new or
  empty directory passes. What is not known yet is not checked: without data_dir, the
  vocabulary (and the settings, unless `data_settings` gives them); run.json fields missing
  from run_info."""
  model_dir = saved.model_dir
  problem = run_info["problem"]
  if saved.problem and saved.problem != problem:
    raise RunDirError(f"{model_dir} was trained on problem {saved.problem!r}, not {problem!r}: "
                      "use a new --model_dir")
  settings = data_settings or ((data_files.read_manifest(data_dir) if data_dir else None)
                               or {}).get("settings", {})
  if saved.data_settings and settings and saved.data_settings != settings:
    raise RunDirError(f"{model_dir} was trained on {problem} data prepared with "
                      f"{saved.data_settings}, not {settings}: resume with the run's data_dir "
                      f"({saved.info.get('data_dir')}) or use a new --model_dir")
  if saved.hparams is not None:
    old, new = dataclasses.asdict(saved.hparams), dataclasses.asdict(hparams)
    for key, value in new.items():
      if old.get(key) != value:
        raise RunDirError(
            f"{model_dir} was trained with {key}={old.get(key)!r}{_hparams_set(saved.info)}, "
            f"not {value!r}{_hparams_set(run_info)}: resume with the same hparams (see "
            f"{path(model_dir, HPARAMS_FILE)}) or use a new --model_dir")
  # Against model_dir's own copy (run.json's checksum is only a record): a vocabulary of the
  # same size but other pieces would pass any size check.
  ours = data_files.vocab_checksum(model_dir)
  theirs = data_files.vocab_checksum(data_dir) if data_dir else ours
  if saved.info and ours != theirs:
    raise RunDirError(
        f"the vocabulary of {data_dir} differs from the one {model_dir} was trained with "
        f"(sha256 {theirs[:12] or 'none'} vs {ours[:12] or 'none'}): resume with the data_dir "
        f"of the run ({saved.info.get('data_dir')}) or use a new --model_dir")
  _check_run_fields(saved, run_info)


def _hparams_set(info):
  """" (hparams set transformer_tiny with 'd_model=64')" from run.json's fields, "" when the
  run did not record its set (a run started from the Python API)."""
  name, overrides = info.get("hparams_set"), info.get("hparams_overrides")
  if not name:
    return ""
  return f" (hparams set {name}" + (f" with {overrides!r})" if overrides else ")")


def _check_run_fields(saved, run_info):
  model_dir, run_path = saved.model_dir, path(saved.model_dir, RUN_FILE)
  if (saved.info and "packed" in run_info
      and bool(saved.info.get("packed", False)) != run_info["packed"]):
    packed = "with" if saved.info.get("packed") else "without"
    raise RunDirError(f"{model_dir} was trained {packed} --pack; resume it {packed} --pack or "
                      "use a new --model_dir")
  for key in RESUME_FIELDS:
    if key in saved.info and key in run_info and saved.info[key] != run_info[key]:
      raise RunDirError(
          f"{model_dir} was trained with {key}={saved.info[key]!r}, not {run_info[key]!r}: "
          f"exact resume needs the same {key} (see {run_path}), or use a new --model_dir")


def _copy_vocabulary(source_dir, model_dir):
  """Copies source_dir's vocabulary files into model_dir -> their names, sorted."""
  names = []
  for vocab_path in data_files.vocab_files(source_dir):
    name = os.path.basename(vocab_path)
    files.copy(vocab_path, path(model_dir, name))
    names.append(name)
  return names


def _copy_if_present(name, source_dir, model_dir):
  if files.exists(path(source_dir, name)):
    files.copy(path(source_dir, name), path(model_dir, name))


def write_run_files(model_dir, hparams, run_info, data_dir=None):
  """hparams.json, run.json, and the vocabulary and manifest copied from data_dir."""
  import tensorflow as tf
  tf.io.gfile.makedirs(model_dir)
  hparams.save(path(model_dir, HPARAMS_FILE))
  vocab_files = []
  if data_dir:
    vocab_files = _copy_vocabulary(data_dir, model_dir)
    _copy_if_present(MANIFEST_FILE, data_dir, model_dir)
  info = dict(run_info, vocab_files=vocab_files,
              vocab_sha256=data_files.vocab_checksum(model_dir))
  files.write_text(path(model_dir, RUN_FILE), json.dumps(info, indent=2, sort_keys=True))


def copy_run_files(model_dir, output_dir):
  """Copies model_dir's files other than checkpoints (hparams.json, run.json, manifest.json,
  the vocabulary, a shortlist) into output_dir, which then loads like model_dir (e.g. averaged
  weights)."""
  import tensorflow as tf
  tf.io.gfile.makedirs(output_dir)
  for name in (HPARAMS_FILE, RUN_FILE, MANIFEST_FILE, SHORTLIST_FILE):
    _copy_if_present(name, model_dir, output_dir)
  _copy_vocabulary(model_dir, output_dir)


def write_best_record(model_dir, record):
  """best/best.json (see the layout above)."""
  files.write_text(path(path(model_dir, BEST_DIR), BEST_FILE),
                   json.dumps(record, indent=2, sort_keys=True))


def read_best_record(model_dir):
  """best/best.json of a run, None when it has kept no best model."""
  best = path(path(model_dir, BEST_DIR), BEST_FILE)
  return read_json(best) if files.exists(best) else None
