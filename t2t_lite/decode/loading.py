"""Loading a trained run directory back for decoding: its problem, hparams, vocabulary and the
weights of one checkpoint, in the compute precision asked for. What decode, `translate()`,
export, attention pictures and averaging start from.

Which checkpoint (`checkpoint_path`), decided here and nowhere else:
  None       the run's best model (model_dir/best/, kept by the trainer's --best_metric) when it
             kept one, else its newest checkpoint that reads;
  "best"     the run's best model (refused when it kept none);
  "newest"   its newest checkpoint that reads (an older one, with a warning, if it does not);
  a path     exactly that checkpoint prefix, or the latest checkpoint of that directory.
Each is loaded with why it was chosen (`LoadedModel.which`), which the tools say first, and
with the decoding plan it was made for (plan.py; `LoadedModel.computing` names it).
"""
import dataclasses
import logging
import os
from typing import Any, Optional

from t2t_lite import errors, registry
from t2t_lite.data import data_files
from t2t_lite.decode import ensemble
from t2t_lite.decode import plan as decoding_plan
from t2t_lite.hyperparams import HParams
from t2t_lite.modeling import mixed_precision
from t2t_lite.modeling.architectures import build_model
from t2t_lite.rundir import checkpoints, run_files
from t2t_lite.rundir.run_files import RunDirError

logger = logging.getLogger(__name__)
BEST, NEWEST = "best", "newest"  # The words checkpoint_path takes beside a path.


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
  reasons: list = dataclasses.field(default_factory=list)  # why each checkpoint was chosen
  plan: decoding_plan.DecodingPlan = decoding_plan.DecodingPlan("none", "asked for")

  def which(self):
    """"<checkpoint> (<why>)" for each model, comma-separated: what a tool's first line says."""
    return ", ".join(f"{c} ({why})" for c, why in zip(self.checkpoints, self.reasons))

  def computing(self):
    """The decoding plan in one line, ending "precision <name> (<why>)": what the tools' first
    line names."""
    return self.plan.describe()


def load(model_dir, checkpoint_path: Optional[str] = None, precision="auto", xla=False,
         planner=decoding_plan.elsewhere):
  """Builds the model of model_dir/hparams.json, restores the checkpoint `checkpoint_path`
  names (see the module doc) and the vocabulary, and makes it a model for decoding in
  `precision` (mixed_precision.inference_model; "auto": the fastest on this machine for a
  search with or without `xla`), as the decoding plan `planner` decides it (plan.here: for
  searching on this machine, by the narrowest model's width; plan.elsewhere, the default: for
  a graph served elsewhere or the weights alone). model_dir may be a list of run directories:
  their models decoded as one (ensemble.Ensemble), each from its own best model or newest
  checkpoint, refused unless they share problem and vocabulary.
  """
  ensemble = isinstance(model_dir, (list, tuple))
  runs = [run_files.read_run(d) for d in (model_dir if ensemble else [model_dir])]
  decided = planner(precision, xla, min(run.require_hparams().d_model for run in runs))
  if ensemble:
    return _load_ensemble(runs, checkpoint_path, decided)
  return _load_one(runs[0], checkpoint_path, decided)


def _load_one(saved, checkpoint_path, decided):
  """The model of one run directory (`saved`: its run_files.read_run) -> LoadedModel."""
  model_dir = saved.model_dir
  hparams = saved.require_hparams()
  # The settings its data was prepared with: e.g. wsj_parsing's target_tags decide how its
  # outputs read as trees.
  problem = registry.get_problem(saved.require_problem(), **saved.data_settings)
  tokenizer = problem.tokenizer(model_dir)
  with mixed_precision.building("none"):  # checkpoints hold float32 weights
    model = build_model(hparams, tokenizer.vocab_size, spans=problem.span_vocabulary(model_dir)
                        if hparams.architecture == "span_parser" else None)
  checkpoint, why = _restore(model, model_dir, checkpoint_path)
  model = mixed_precision.inference_model(model, decided.precision, decided.compiled_matmuls)
  return LoadedModel(model, hparams, problem, tokenizer, checkpoint, [model_dir], [checkpoint],
                     [why], decided)


def _restore(model, model_dir, checkpoint_path):
  """Restores the checkpoint `checkpoint_path` names (see the module doc) into `model` -> (its
  prefix, why it was chosen)."""
  best = best_model(model_dir) if checkpoint_path in (None, BEST) else None
  if best:
    prefix, record = best
    why = f"the run's best {record['metric']}, {round(record['value'], 4)} at step " + str(
        record["step"])
    newest = checkpoints.list_checkpoints(model_dir)
    if checkpoint_path is None and newest:
      why += f"; --checkpoint_path={NEWEST} for {os.path.basename(newest[-1])}"
    return _restore_exactly(model, prefix), why
  if checkpoint_path == BEST:
    raise RunDirError(f"checkpoint_path {BEST!r}: {model_dir} kept no best model (no "
                      f"{run_files.BEST_FILE} and checkpoint in "
                      f"{run_files.path(model_dir, run_files.BEST_DIR)})")
  if checkpoint_path in (None, NEWEST):
    checkpoint = checkpoints.restore_newest_readable(
        lambda prefix: checkpoints.restore_model(model, prefix), model_dir, logger.warning)
    if checkpoint is None:
      checkpoints.find_checkpoint(model_dir)  # Raises, naming the directory.
    return checkpoint, "its newest checkpoint that reads" + (
        "; the run kept no best model" if checkpoint_path is None else "")
  # Asked for by name: no other one will do.
  return (_restore_exactly(model, checkpoints.find_checkpoint(model_dir, checkpoint_path)),
          "given by --checkpoint_path")


def best_model(model_dir):
  """(checkpoint prefix, best.json's record) of the best model a run kept, or None."""
  best_dir = run_files.path(model_dir, run_files.BEST_DIR)
  try:
    record = run_files.read_best_record(model_dir)
  except ValueError as e:  # Not JSON.
    raise RunDirError(f"{run_files.path(best_dir, run_files.BEST_FILE)} does not read "
                      f"({errors.reason(e)})") from None
  prefixes = checkpoints.list_checkpoints(best_dir) if record else []
  return (prefixes[-1], record) if prefixes else None


def _restore_exactly(model, prefix):
  """Restores `prefix` into `model` -> prefix; one that does not read is an error."""
  try:
    checkpoints.restore_model(model, prefix)
  except checkpoints.UNREADABLE as e:
    raise RunDirError(f"checkpoint {prefix} does not read ({errors.reason(e)})") from None
  return prefix


def _load_ensemble(runs, checkpoint_path, decided):
  model_dirs = [run.model_dir for run in runs]
  if checkpoint_path not in (None, BEST, NEWEST):
    raise RunDirError(f"an ensemble takes each member's best model or newest checkpoint "
                      f"(--checkpoint_path={BEST} or {NEWEST}): give each member as a model_dir "
                      "of its own (e.g. an averaged one), not a --checkpoint_path")
  members = [_load_one(run, checkpoint_path, decided) for run in runs]
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
  if len(members) > 1 and first.hparams.architecture != "transformer":
    raise RunDirError(f"{model_dirs[0]} is a {first.hparams.architecture}: an ensemble decodes "
                      "Transformers (their next-token distributions averaged)")
  model = ensemble.Ensemble([m.model for m in members]) if len(members) > 1 else first.model
  return LoadedModel(model, first.hparams, first.problem, first.tokenizer, first.checkpoint,
                     model_dirs, [m.checkpoint for m in members],
                     [why for m in members for why in m.reasons], decided)
