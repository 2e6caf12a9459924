"""Loading a trained run directory back for decoding: its problem, hparams, vocabulary and the
weights of one checkpoint, in the compute precision asked for. What decode, `translate()`,
export, attention pictures and averaging start from."""
import dataclasses
import logging
from typing import Any, Optional

from t2t_lite import registry
from t2t_lite.data import data_files
from t2t_lite.decode import ensemble
from t2t_lite.hyperparams import HParams
from t2t_lite.modeling import mixed_precision
from t2t_lite.modeling.transformer import build_model
from t2t_lite.rundir import checkpoints, run_files
from t2t_lite.rundir.run_files import RunDirError

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class LoadedModel:
  """What a model_dir holds, restored: the model (weights from `checkpoint`) and its vocabulary.
  Of an ensemble: the Ensemble, the first member's hparams, and every member's directory and
  checkpoint."""
  model: Any
  hparams: HParams
  problem: Any
  tokenizer: Any
  checkpoint: str
  model_dirs: list = dataclasses.field(default_factory=list)
  checkpoints: list = dataclasses.field(default_factory=list)


def load(model_dir, checkpoint_path: Optional[str] = None, precision="none"):
  """Builds the model of model_dir/hparams.json, restores its checkpoint (`checkpoint_path`, or
  the newest that reads) and the vocabulary, and makes it a model for decoding in `precision`
  (mixed_precision.inference_model). model_dir may be a list of run directories: their models
  decoded as one (ensemble.Ensemble), refused unless they share problem and vocabulary."""
  if isinstance(model_dir, (list, tuple)):
    return _load_ensemble(list(model_dir), checkpoint_path, precision)
  saved = run_files.read_run(model_dir)
  hparams = saved.require_hparams()
  # The settings its data was prepared with: e.g. wsj_parsing's target_tags decide how its
  # outputs read as trees.
  problem = registry.get_problem(saved.require_problem(), **saved.data_settings)
  tokenizer = problem.tokenizer(model_dir)
  mixed_precision.check(precision)
  with mixed_precision.building("none"):  # checkpoints hold float32 weights
    model = build_model(hparams, tokenizer.vocab_size)
  if checkpoint_path:  # Asked for by name: no other one will do.
    checkpoint = checkpoints.find_checkpoint(model_dir, checkpoint_path)
    try:
      checkpoints.restore_model(model, checkpoint)
    except checkpoints.UNREADABLE as e:
      raise RunDirError(
          f"checkpoint {checkpoint} does not read ({checkpoints.reason(e)})") from None
  else:
    checkpoint = checkpoints.restore_newest_readable(
        lambda prefix: checkpoints.restore_model(model, prefix), model_dir, logger.warning)
    if checkpoint is None:
      checkpoints.find_checkpoint(model_dir)  # Raises, naming the directory.
  model = mixed_precision.inference_model(model, precision)
  return LoadedModel(model, hparams, problem, tokenizer, checkpoint, [model_dir], [checkpoint])


def _load_ensemble(model_dirs, checkpoint_path, precision):
  if checkpoint_path:
    raise RunDirError("an ensemble takes each member's newest checkpoint: give each member as "
                      "a model_dir of its own (e.g. an averaged one), not --checkpoint_path")
  members = [load(directory, None, precision) for directory in model_dirs]
  first = members[0]
  vocabulary = data_files.vocab_checksum(model_dirs[0])
  for directory, member in zip(model_dirs[1:], members[1:]):
    if member.problem.name != first.problem.name:
      raise RunDirError(f"{directory} is a {member.problem.name} model, {model_dirs[0]} a "
                        f"{first.problem.name} one: an ensemble needs one problem")
    checksum = data_files.vocab_checksum(directory)
    if (checksum, member.tokenizer.vocab_size) != (vocabulary, first.tokenizer.vocab_size):
      raise RunDirError(f"the vocabulary of {directory} differs from {model_dirs[0]}'s (sha256 "
                        f"{checksum[:12] or 'none'} vs {vocabulary[:12] or 'none'}): an ensemble "
                        "needs one vocabulary")
  model = ensemble.Ensemble([m.model for m in members]) if len(members) > 1 else first.model
  return LoadedModel(model, first.hparams, first.problem, first.tokenizer, first.checkpoint,
                     model_dirs, [m.checkpoint for m in members])
