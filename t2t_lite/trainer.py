"""Training: one loop for every `tf.distribute` strategy, with XLA, exact resume and evaluation.

The strategy (t2t_lite/distribute.py) is chosen, never forked on; every strategy runs the same
step (t2t_lite/train_step.py).

Batch size. `hparams.batch_size` is the GLOBAL number of tokens (per side) of one optimizer
step. Each replica reads micro-batches of batch_size / (replicas * grad_accum_steps) tokens;
an optimizer step consumes grad_accum_steps micro-batches on every replica (see train_step.py
for how their losses, gradients and dropout masks combine).

What the run writes into model_dir, and how it is read back: t2t_lite/model_dir.py. The
Trainer leaves process-wide state as it found it: the seed of its weights and the mixed
precision policy are set only while the model is built.
"""
import contextlib
import dataclasses
import math
import os
import random
import re
import time
from typing import Optional

import keras
import tensorflow as tf

from t2t_lite import distribute, losses, optimization, preemption, train_step, training_log
from t2t_lite import lease as lease_lib
from t2t_lite import model_dir as model_dir_lib
from t2t_lite import precision as precision_lib
from t2t_lite.errors import RunFailure, T2TLiteError
from t2t_lite.transformer import build_model


class TrainerError(T2TLiteError, ValueError):
  """A bad configuration, an incompatible model_dir or a diverged run. str() is one line."""


@dataclasses.dataclass(frozen=True)
class TrainConfig:
  """How to train (the hparams say what). See t2t_lite/bin/train.py for each field's meaning."""
  model_dir: str
  train_steps: int
  eval_every: int = 1000
  eval_steps: int = 20
  strategy: str = "auto"
  tpu: Optional[str] = None
  xla: bool = True
  mixed_precision: str = "none"
  checkpoint_every_minutes: float = 10.0
  keep_checkpoints: int = 20
  grad_accum_steps: int = 1
  seed: int = 1
  steps_per_execution: int = 0  # Optimizer steps per host call; 0 = auto (1, 100 on TPU).
  static_shapes: Optional[bool] = None  # None = on for TPU and XLA (bounds recompilations).
  pack: bool = False  # Packed training batches (packing.py): one static shape.
  log_every: int = 100
  train_minutes: Optional[float] = None  # Also stop (and save) after this wall-clock time.
  # Not in the paper: over the last cooldown_minutes of train_minutes the learning rate falls
  # linearly to 0 by wall time, so that a run of a fixed budget ends at a rate of 0.
  cooldown_minutes: Optional[float] = None

  def __post_init__(self):
    if self.strategy not in distribute.STRATEGIES:
      raise TrainerError(f"unknown strategy {self.strategy!r}; expected one of "
                         f"{', '.join(distribute.STRATEGIES)}")
    precision_lib.check(self.mixed_precision, TrainerError)
    for name in ("train_steps", "eval_every", "grad_accum_steps", "keep_checkpoints",
                 "log_every"):
      if getattr(self, name) <= 0:
        raise TrainerError(f"{name} must be positive, got {getattr(self, name)}")
    if self.eval_steps < 0 or self.steps_per_execution < 0:
      raise TrainerError("eval_steps and steps_per_execution must be >= 0")
    if self.checkpoint_every_minutes <= 0:
      raise TrainerError(
          f"checkpoint_every_minutes must be positive, got {self.checkpoint_every_minutes}")
    if self.cooldown_minutes is not None and not (
        self.train_minutes and 0 < self.cooldown_minutes <= self.train_minutes):
      raise TrainerError(f"cooldown_minutes must be > 0 and at most train_minutes "
                         f"({self.train_minutes}), got {self.cooldown_minutes}")


# --------------------------------------------------------------------------- the trainer
@contextlib.contextmanager
def _building(seed, precision):
  """While building: weights and dropout layer seeds drawn from `seed` (Keras draws unseeded
  initializers' seeds from Python's `random`), and the mixed precision policy `precision`.
  Both are put back afterwards."""
  random_state = random.getstate()
  random.seed(seed)
  try:
    with precision_lib.building(precision):
      yield
  finally:
    random.setstate(random_state)


class Trainer:
  """Builds the model, optimizer, data and checkpoint under one strategy; `train()` runs.

  Args:
    problem: a Problem; its `dataset(split, data_dir, hparams, training, ...)` feeds the run.
    hparams: HParams (batch_size = GLOBAL tokens per optimizer step).
    data_dir: the prepared data.
    config: TrainConfig.
    vocab_size: the model's vocabulary size (the problem's tokenizer's).
    run_info: extra fields for run.json (problem and hparams names).
    metric_fn: optional `metric_fn(model) -> {name: value}` run at each evaluation (the
      problem's own metric on a dev subset, e.g. BLEU from beam search).
    log: where progress lines go (print by default).
  The model_dir is not checked against an earlier run here: `train` (or the CLI) does it.
  """

  def __init__(self, problem, hparams, data_dir, config, vocab_size, run_info=None,
               metric_fn=None, log=print, strategy=None):
    self.problem, self.hparams, self.data_dir, self.config = problem, hparams, data_dir, config
    self.metric_fn, self.log = metric_fn, log
    self.strategy_name = type(strategy).__name__
    if strategy is None:
      strategy, self.strategy_name = distribute.make_strategy(config.strategy, config.tpu)
    self.strategy = strategy
    self.is_tpu = isinstance(strategy, tf.distribute.TPUStrategy)
    self.is_chief = distribute.is_chief(strategy)
    self.num_replicas = strategy.num_replicas_in_sync
    self.micro_batch_tokens = self._micro_batch_tokens()
    # XLA compiles once per input shape: bucket-padded batches keep that to one per bucket.
    self.static_shapes = ((self.is_tpu or config.xla) if config.static_shapes is None
                          else config.static_shapes)
    self.steps_per_execution = config.steps_per_execution or (100 if self.is_tpu else 1)
    # run.json of the run being resumed ({} for a new one): its input pipeline must be kept.
    started = _started_run_info(config.model_dir)
    self.train_cache = _train_cache_of(started, problem)
    _check_same_packing(started, config.model_dir, config.pack)
    self.run_info = dict(run_info or {}, vocab_size=vocab_size, seed=config.seed,
                         train_cache=self.train_cache, packed=config.pack,
                         grad_accum_steps=config.grad_accum_steps,
                         num_replicas=self.num_replicas,
                         mixed_precision=config.mixed_precision, data_dir=data_dir)
    multi_worker = isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)
    if config.cooldown_minutes and multi_worker:
      # Each worker would read its own clock, and replicas would step at different rates.
      raise TrainerError("cooldown_minutes needs one worker; with multi_worker use the hparams "
                         "cooldown_start and cooldown_steps (a step budget)")
    with _building(config.seed, config.mixed_precision), strategy.scope():
      self.model = build_model(hparams, vocab_size)
      # The wall-clock cooldown's factor, set before each host call (_train_loop).
      self.lr_scale = (tf.Variable(1.0, trainable=False, name="lr_scale")
                       if config.cooldown_minutes else None)
      self.schedule = optimization.TransformerSchedule.of(hparams, self.lr_scale)
      optimizer = optimization.make_optimizer(hparams, self.schedule)
      if config.mixed_precision == "fp16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
      self.optimizer = optimizer
      self.optimizer.build(self.model.trainable_variables)
    # The input position is saved with the checkpoint: a plain tf.data iterator per worker
    # (checkpointable) feeds this worker's replicas. TPU input must be a distributed dataset,
    # whose iterator cannot be saved: it skips the batches consumed before a resume instead.
    self.input_context = distribute.input_context(strategy)
    self.local_replicas = self.num_replicas // self.input_context.num_input_pipelines
    self.any_worker = distribute.WorkerVote(strategy, self.input_context.num_input_pipelines)
    self.train_iterator = None  # On TPU, made in restore() once the step is known.
    if not self.is_tpu:
      self.train_iterator = iter(self._train_dataset_fn(self.input_context))
    self.checkpoint = self._make_checkpoint()
    self.manager = model_dir_lib.checkpoint_manager(
        self.checkpoint, distribute.checkpoint_directory(config.model_dir, strategy),
        config.keep_checkpoints)
    self._train_fn = self._make_train_fn()
    self.lease = None  # model_dir's lease, held by the chief while train() runs.
    self._eval_fn = None

  def _micro_batch_tokens(self):
    accum, hparams = self.config.grad_accum_steps, self.hparams
    tokens = hparams.batch_size // (self.num_replicas * accum)
    if tokens < hparams.max_length:
      raise TrainerError(
          f"batch_size={hparams.batch_size} global tokens / ({self.num_replicas} replicas x "
          f"{accum} accumulation steps) = {tokens} tokens per micro-batch, "
          f"less than max_length={hparams.max_length}: raise batch_size or lower "
          f"grad_accum_steps / max_length")
    return tokens

  def _make_checkpoint(self):
    # Dropout seed states: keras layers hold them as non-trainable variables that
    # tf.train.Checkpoint does not reach through the layers, so they are listed here.
    rng = [v.value for v in self.model.non_trainable_variables]
    objects = {model_dir_lib.MODEL: self.model, "optimizer": self.optimizer, "rng": rng}
    if self.train_iterator is not None:
      objects["train_iterator"] = self.train_iterator
    return tf.train.Checkpoint(**objects)

  # ------------------------------------------------------------------ data
  def _train_dataset_fn(self, input_context):
    return self.problem.dataset(
        "train", self.data_dir, self.hparams, training=True,
        batch_tokens=self.micro_batch_tokens, seed=self.config.seed, input_context=input_context,
        static_shapes=self.static_shapes, pack=self.config.pack,
        **({"cache": True} if self.train_cache else {}))

  def _eval_dataset_fn(self, input_context):
    ds = self.problem.dataset(
        "dev", self.data_dir, self.hparams, training=False,
        batch_tokens=self.micro_batch_tokens, input_context=input_context,
        static_shapes=self.is_tpu)  # Evaluation is not XLA-compiled: keep partial batches.
    return ds.take(self.config.eval_steps)

  @property
  def step(self):
    return int(self.optimizer.iterations.numpy())

  # ------------------------------------------------------------------ the step
  def _make_train_fn(self):
    step = train_step.make_train_step(
        self.model, self.optimizer, label_smoothing=self.hparams.label_smoothing,
        micro_batch_tokens=self.micro_batch_tokens,
        grad_accum_steps=self.config.grad_accum_steps, num_replicas=self.num_replicas,
        # TPU compiles everything anyway (jit_compile None = the default there).
        jit_compile=True if self.config.xla and not self.is_tpu else None,
        reseed_dropout=not self.is_tpu)
    next_batches = distribute.micro_batch_splitter(self.strategy, self.local_replicas,
                                                   self.config.grad_accum_steps)
    return train_step.make_train_loop(self.strategy, step, next_batches)

  def train_steps(self, num_steps):
    """Runs `num_steps` optimizer steps in one host call -> (mean loss, target tokens, grad
    norm of the last step) as Python floats."""
    loss_sum, count, grad_norm = self._train_fn(self.train_iterator, tf.constant(num_steps))
    count = float(count)
    return float(loss_sum) / max(count, 1.0), count, float(grad_norm)

  # ------------------------------------------------------------------ evaluation
  def _make_eval_fn(self, element_spec):
    model, strategy = self.model, self.strategy

    def replica_eval(batch):
      logits = model(batch, training=False)
      ce_sum, count = losses.smoothed_cross_entropy(logits, batch["targets"], 0.0)
      correct, _ = losses.token_accuracy(logits, batch["targets"])
      return ce_sum, correct, count

    @tf.function(input_signature=[element_spec], autograph=False)  # one trace for all shapes
    def eval_fn(batch):
      values = strategy.run(replica_eval, args=(batch,))
      return [strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None) for v in values]

    return eval_fn

  def evaluate(self):
    """Loss (unsmoothed cross entropy per target token), perplexity and token accuracy on at
    most eval_steps batches (per replica) of the dev split, plus metric_fn's metrics."""
    dataset = self.strategy.distribute_datasets_from_function(self._eval_dataset_fn)
    if self._eval_fn is None:
      self._eval_fn = self._make_eval_fn(dataset.element_spec)
    ce_sum = correct = count = 0.0
    for batch in dataset:
      c, k, n = self._eval_fn(batch)
      ce_sum, correct, count = ce_sum + float(c), correct + float(k), count + float(n)
    if not count:
      raise TrainerError(f"the dev split of {self.data_dir} gave no batch to evaluate")
    loss = ce_sum / count
    metrics = {"loss": loss, "perplexity": math.exp(min(loss, 700.0)),
               "accuracy": correct / count, "tokens": count}
    if self.metric_fn is not None:
      metrics.update(self.metric_fn(self.model))
    return metrics

  # ------------------------------------------------------------------ the loop
  def restore(self):
    """Restores model_dir's newest checkpoint that reads (warning about any that does not)
    -> the step restored (0 if none)."""
    restored = model_dir_lib.restore_newest_readable(
        lambda path: self.checkpoint.restore(path).assert_existing_objects_matched(),
        self.config.model_dir, lambda message: self.log(f"WARNING: {message}"))
    if restored is not None:
      self.log(f"restored {restored} (step {self.step})")
    if self.is_tpu:
      # Each step took grad_accum_steps batches per replica of this host's pipeline.
      skip = self.step * self.local_replicas * self.config.grad_accum_steps

      def dataset_fn(context):
        return self._train_dataset_fn(context).skip(skip)

      self.train_iterator = iter(self.strategy.distribute_datasets_from_function(dataset_fn))
    return self.step

  def save(self):
    """Saves ckpt-<step>; a full disk (or any write error) is a one-line RunFailure naming the
    directory and the size of a checkpoint, with the last good checkpoint left as it was."""
    step, directory = self.step, self.manager.directory
    if self.lease is not None:
      self.lease.check()  # Never write over another trainer's checkpoints.
    last = self.manager.latest_checkpoint
    try:
      path = self.manager.save(checkpoint_number=step)
    except tf.errors.OpError as e:
      model_dir_lib.remove_stale_temp_dirs(directory, self.log)  # Free what the save took.
      size = model_dir_lib.checkpoint_bytes(last) if last else 0
      needed = f" (a checkpoint takes {size / 1e6:.1f} MB)" if size else ""
      # The op's message starts with the wrapped function's name: not for the user.
      reason = re.sub(r"^\{\{function_node [^}]*\}\}\s*", "", str(e.message).strip())
      intact = (f"the last good checkpoint, {last}, is intact" if last
                else "no checkpoint was saved before")
      raise RunFailure(f"saving the step {step} checkpoint in {directory} failed: "
                       f"{reason.splitlines()[0]}{needed}; {intact}") from None
    if not self.is_chief:
      tf.io.gfile.rmtree(self.manager.directory)
    return path

  def train(self):
    """Trains to config.train_steps (resuming model_dir's newest readable checkpoint) -> a
    summary dict: {"step", "loss" (last logged train loss), "eval" (last eval metrics),
    "losses" (every logged (step, loss)), "stopped" (None, "time" or "SIGTERM")}.

    The chief holds model_dir's lease throughout (lease.py) and checks the resume (run.json,
    vocabulary) before writing anything. SIGTERM saves and returns (preemption.py). Raises
    TrainerError when the loss becomes NaN or Inf."""
    config = self.config
    self.lease = lease_lib.Lease(config.model_dir) if self.is_chief else None
    if self.lease is not None:
      self.lease.acquire()
    try:
      if self.is_chief:  # hparams were checked by `train` (or the CLI) before building this.
        model_dir_lib.check_resume(config.model_dir, self.run_info, self.data_dir)
        model_dir_lib.remove_stale_temp_dirs(config.model_dir, self.log)
        model_dir_lib.write_run_files(config.model_dir, self.hparams, self.run_info,
                                      self.data_dir)
      with preemption.StopOnSigterm() as sigterm:
        return self._train_loop(sigterm)
    finally:
      if self.lease is not None:
        self.lease.release()

  def _train_loop(self, sigterm):
    config = self.config
    start = self.restore()
    progress = training_log.TrainingLog(self)
    self.log(f"training {self.run_info.get('problem', '')} on {self.num_replicas} replica(s) "
             f"({self.strategy_name}), {self.hparams.batch_size} tokens a step = "
             f"{self.num_replicas} x {config.grad_accum_steps} micro-batches of "
             f"{self.micro_batch_tokens}; step {start} -> {config.train_steps}")
    last_save, stopped = time.time(), None
    step = start
    while step < config.train_steps:
      n = self._steps_until_event(step)
      if self.lr_scale is not None:
        self.lr_scale.assign(progress.cooldown_factor())
      loss, tokens, grad_norm = self.train_steps(n)
      if not math.isfinite(loss):
        last = self.manager.latest_checkpoint or "none"
        raise TrainerError(
            f"loss became {loss} between steps {step} and {step + n}; stopped without saving "
            f"(last good checkpoint: {last}). Lower learning_rate or raise warmup_steps")
      step += n
      progress.add(step, n, loss, tokens, grad_norm)
      if config.eval_steps and (step % config.eval_every == 0 or step == config.train_steps):
        progress.evaluated(step, self.evaluate())
      if self.any_worker(sigterm.requested):
        stopped = "SIGTERM"
        self.log(f"stopping at step {step}: SIGTERM received; saving a checkpoint")
        break
      if self.any_worker(progress.out_of_time()):
        stopped = "time"
        self.log(f"stopping at step {step}: the {config.train_minutes} minute budget is spent")
        break
      if self.any_worker(time.time() - last_save >= config.checkpoint_every_minutes * 60):
        self.save()
        last_save = time.time()
    latest = self.manager.latest_checkpoint
    if latest is None or self.step != model_dir_lib.checkpoint_step(latest):
      self.save()
    if stopped == "time" and config.eval_steps and progress.eval_step != step:
      progress.evaluated(step, self.evaluate())  # The final evaluation promised.
    progress.close()
    return {"step": self.step, "losses": progress.history, "stopped": stopped,
            "loss": progress.history[-1][1] if progress.history else None,
            "eval": progress.eval_metrics}

  def _steps_until_event(self, step):
    """Steps to run in the next host call: steps_per_execution, cut at log / eval / the end."""
    config = self.config
    n = min(self.steps_per_execution, config.train_steps - step)
    for every in (config.log_every, config.eval_every if config.eval_steps else 0):
      if every:
        n = min(n, every - step % every)
    return max(n, 1)


def _started_run_info(model_dir):
  """run.json of the run in model_dir, or {} when none was started there."""
  path = os.path.join(model_dir, model_dir_lib.RUN_FILE)
  return model_dir_lib.read_json(path) if tf.io.gfile.exists(path) else {}


def _train_cache_of(started, problem):
  """Whether the training pipeline keeps examples in memory: only to resume a run started
  before that was dropped. Its checkpoints hold the cache in the iterator's state (why it was
  dropped: bench/checkpoint_size.py), and an iterator state restores only into the same
  pipeline. run.json's "train_cache" says; a run.json without it is of that older layout."""
  if not started:
    return False
  return bool(started.get("train_cache", getattr(problem, "cache_in_memory", False)))


def _check_same_packing(started, model_dir, pack):
  """A run resumes with the pipeline it started with: the iterator state saved in its
  checkpoints restores only into that one (run.json's "packed")."""
  packed = bool(started.get("packed", False))
  if started and packed != pack:
    raise TrainerError(f"{model_dir} was trained {'with' if packed else 'without'} --pack; "
                       f"resume it {'with' if packed else 'without'} --pack or use a new "
                       "--model_dir")


def train(problem, hparams, data_dir, config, vocab_size, run_info=None, metric_fn=None,
          log=print):
  """Refuses a model_dir of another run, then builds a Trainer and runs it; see Trainer.train."""
  model_dir_lib.check_saved_hparams(config.model_dir, hparams, (run_info or {}).get("problem"))
  trainer = Trainer(problem, hparams, data_dir, config, vocab_size, run_info, metric_fn, log)
  return trainer.train()
