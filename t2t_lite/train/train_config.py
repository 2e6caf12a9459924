"""How a run trains (its hparams say what it trains): `TrainConfig`. Each field is a flag of
t2t-lite-train of the same name, whose help and choices are declared once, beside the field:
bin/train.py makes the flags from these fields (a boolean `--x` also takes `--nox` / `--no-x`).
Imports no TensorFlow, so that `t2t-lite-train --help` is quick.
"""
import dataclasses
from typing import Optional

from t2t_lite.errors import T2TLiteError
from t2t_lite.modeling.mixed_precision import CHOICES

# The tf.distribute strategies t2t_lite/train/distribute.py makes (the --strategy choices).
STRATEGIES = ("auto", "default", "mirrored", "multi_worker", "tpu")
# What a run keeps its best model by (t2t_lite/train/model_selection.py): the problem's metric
# on decoded dev sentences, the dev loss, "auto" (the first when evaluations decode, else the
# second), or nothing.
SELECTION_METRICS = ("auto", "dev_metric", "loss", "none")


class TrainerError(T2TLiteError, ValueError):
  """A training option out of its range, a configuration the platform cannot run, or a
  diverged run. str() is one line."""


def _option(default, help, choices=None):
  return dataclasses.field(default=default, metadata={"help": help, "choices": choices})


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """How to train; see each field's help (t2t-lite-train --help prints them all)."""
  model_dir: str = dataclasses.field(metadata={"help": (
      "checkpoints, hparams.json, run.json, vocabulary and TensorBoard logs; any tf.io.gfile "
      "path (local, gs://, ram://). An existing run is resumed. Default: "
      "$T2T_LITE_HOME/runs/<problem>-<hparams>")})
  train_steps: int = _option(100000, "total optimizer steps (a resumed run continues up to "
                                     "this number)")
  train_minutes: Optional[float] = _option(
      None, "also stop (with a checkpoint) after this many minutes of this process's wall-clock "
            "time (None = no limit)")
  # Not in the paper: over the last cooldown_minutes of train_minutes the learning rate falls
  # linearly to 0 by wall time, so that a run of a fixed budget ends at a rate of 0.
  cooldown_minutes: Optional[float] = _option(
      None, "not in the paper: over the last this many minutes of --train_minutes the learning "
            "rate falls linearly to 0 (by wall time; one worker)")
  # Not in the paper (Marian's --lr-decay-strategy stalled, fairseq's reduce_lr_on_plateau): a
  # run that stops improving is cooled down then, rather than trained on at full rate until its
  # budget ends; a larger budget then cannot end worse.
  cooldown_patience: Optional[int] = _option(
      None, "with --cooldown_minutes: start the cooldown when the best_metric has not improved "
            "in this many evaluations; the run then ends cooldown_minutes later (or at its "
            "budget, if sooner), and a resume does not train on (None = only at the budget)")
  eval_every: int = _option(1000, "evaluate on the dev split every this many steps (and at the "
                                  "end)")
  eval_steps: int = _option(20, "dev batches (per replica) per evaluation; 0 = no evaluation")
  eval_decode_examples: int = _option(
      100, "at each evaluation, decode this many dev sentences with beam search and report the "
           "problem's metric (BLEU, bracket F1, accuracy); 0 = off")
  best_metric: str = _option(
      "auto", "keep the best model in model_dir/best by: dev_metric = the problem's metric on "
              "the decoded dev sentences (BLEU as the paper computed it, bracket F1, accuracy), "
              "loss = dev loss, auto = dev_metric when evaluations decode sentences, else loss; "
              "none = keep no best model", SELECTION_METRICS)
  patience: Optional[int] = _option(
      None, "stop after this many evaluations without improvement of the best_metric (None = "
            "never); a stopped run does not train on when resumed")
  init_from: Optional[str] = _option(
      None, "fine-tune: a new run starts from the weights of this run directory (its newest "
            "checkpoint; a run's best/ is one too) or checkpoint, not from its optimizer state "
            "or step; the architecture must be the same, the vocabulary may differ (shared "
            "tokens keep their rows)")
  ema_decay: Optional[float] = _option(
      None, "keep an exponential moving average of the weights with this decay (e.g. 0.999), "
            "which evaluation, the best model, decode and export then use (None = off)")
  strategy: str = _option(
      "auto", "tf.distribute strategy: auto = TPU if one is found, else mirrored over all GPUs "
              "if more than one, else default (one device); multi_worker reads the cluster from "
              "TF_CONFIG", STRATEGIES)
  tpu: Optional[str] = _option(None, "TPU name or grpc:// address for TPUStrategy ('local' on a "
                                     "TPU VM)")
  xla: Optional[bool] = _option(
      None, "compile the training step with XLA (jit_compile); default: on, except for a "
            "bf16 step on a CPU (AMX, AMD's AVX-512 bf16), which is faster without it")
  mixed_precision: str = _option(
      "auto", "auto = the fastest on this machine (printed; a resumed run keeps its own); none = "
              "float32; bf16 = bfloat16 compute (TPU, recent GPUs, CPUs with AMX or AMD's "
              "AVX-512 bf16); fp16 = float16 compute with dynamic loss scaling (GPUs). One slow "
              "on this machine (fp16 on a CPU, bf16 without bfloat16 instructions) gets a "
              "WARNING line first",
      CHOICES)
  checkpoint_every_minutes: float = _option(
      10.0, "save a checkpoint every this many minutes (the paper: 10) and at the end")
  keep_checkpoints: int = _option(
      20, "how many recent checkpoints to keep (the paper averages the last 5 for base and 20 "
          "for big)")
  grad_accum_steps: int = _option(
      1, "micro-batches accumulated per optimizer step: hparams.batch_size is the GLOBAL token "
         "count per step, each replica reads batch_size / (replicas x grad_accum_steps) tokens "
         "at a time")
  seed: int = _option(1, "seed of weights, dropout and data order (same seed = same run)")
  steps_per_execution: int = _option(
      0, "optimizer steps per host call (0 = the platform's: 1, or 100 on TPU)")
  static_shapes: Optional[bool] = _option(
      None, "pad batches to their bucket's length so only a few shapes exist (fewer XLA "
            "compilations; required on TPU); default: on for TPU and XLA")
  pack: bool = _option(
      False, "pack several examples into each row of a training batch (tensor2tensor's packed "
             "problems): one static shape, little padding; attention stays inside examples")
  log_every: int = _option(100, "print a progress line (and write summaries) every this many "
                                "steps")

  def __post_init__(self):
    """Every field is checked here, so that a bad value is refused before anything is written
    or trained."""
    for field in dataclasses.fields(self):
      choices = field.metadata.get("choices")
      if choices and getattr(self, field.name) not in choices:
        raise TrainerError(f"unknown {field.name} {getattr(self, field.name)!r}; expected one of "
                          f"{', '.join(choices)}")
    if not self.model_dir:
      raise TrainerError("model_dir is required")
    if self.tpu and self.strategy not in ("auto", "tpu"):
      raise TrainerError(f"--tpu={self.tpu} asks for a TPU, but --strategy={self.strategy} "
                         "trains without one: use --strategy=tpu (or auto), or leave out --tpu")
    for name in ("train_steps", "eval_every", "grad_accum_steps", "keep_checkpoints",
                 "log_every"):
      if getattr(self, name) <= 0:
        raise TrainerError(f"{name} must be positive, got {getattr(self, name)}")
    for name in ("eval_steps", "eval_decode_examples", "steps_per_execution"):
      if getattr(self, name) < 0:
        raise TrainerError(f"{name} must be >= 0, got {getattr(self, name)}")
    for name in ("checkpoint_every_minutes", "train_minutes"):
      value = getattr(self, name)
      if value is not None and not value > 0:  # NaN too
        raise TrainerError(f"{name} must be positive, got {value}")
    if self.cooldown_patience is not None and not (
        self.cooldown_patience >= 1 and self.cooldown_minutes and self.eval_steps
        and self.best_metric != "none"):
      raise TrainerError(f"cooldown_patience must be >= 1 and needs cooldown_minutes, "
                         f"evaluations and a best_metric, got {self.cooldown_patience}")
    if self.patience is not None and self.patience < 1:
      raise TrainerError(f"patience must be >= 1, got {self.patience}")
    if self.ema_decay is not None and not 0 < self.ema_decay < 1:
      raise TrainerError(f"ema_decay must be in (0, 1), got {self.ema_decay}")
    if self.patience is not None and (self.best_metric == "none" or not self.eval_steps):
      raise TrainerError("patience needs evaluations (eval_steps > 0) and a best_metric")
    if self.best_metric in ("dev_metric", "loss") and not self.eval_steps:
      raise TrainerError(f"best_metric={self.best_metric} needs evaluations (eval_steps > 0)")
    if self.best_metric == "dev_metric" and not self.eval_decode_examples:
      raise TrainerError("best_metric=dev_metric needs evaluations that decode dev sentences "
                         "(eval_decode_examples > 0)")
    if self.cooldown_minutes is not None and not (
        self.train_minutes and 0 < self.cooldown_minutes <= self.train_minutes):
      raise TrainerError(f"cooldown_minutes must be > 0 and at most train_minutes "
                        f"({self.train_minutes}), got {self.cooldown_minutes}")
