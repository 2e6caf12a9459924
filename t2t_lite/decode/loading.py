"""Loading a trained run directory back for decoding: its problem, hparams, vocabulary and the
weights of one checkpoint, in the compute precision asked for. What decode, `translate()`,
export, attention pictures and averaging start from."""
import dataclasses
import logging
from typing import Any, Optional

from t2t_lite import registry
from t2t_lite.hyperparams import HParams
from t2t_lite.modeling import mixed_precision
from t2t_lite.modeling.transformer import build_model
from t2t_lite.rundir import checkpoints, run_files
from t2t_lite.rundir.run_files import RunDirError

logger = logging.getLogger(__name__)


@dataclasses.dataclass
class LoadedModel:
  """What a model_dir holds, restored: the model (weights from `checkpoint`) and its vocabulary."""
  model: Any
  hparams: HParams
  problem: Any
  tokenizer: Any
  checkpoint: str


def load(model_dir, checkpoint_path: Optional[str] = None, precision="none"):
  """Builds the model of model_dir/hparams.json, restores its checkpoint (`checkpoint_path`, or
  the newest that reads) and the vocabulary, and makes it a model for decoding in `precision`
  (mixed_precision.inference_model)."""
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
  return LoadedModel(model, hparams, problem, tokenizer, checkpoint)
