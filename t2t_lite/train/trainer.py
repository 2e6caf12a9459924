"""Training: `train(problem, hparams, data_dir, config)` is the one way in (t2t-lite-train, the
Python API and the tests call it). It prepares the data, then a `Trainer` runs one loop on any
platform (t2t_lite/train/distribute.py), with XLA, exact resume and evaluation.

  from t2t_lite.train.trainer import TrainConfig, train
  result = train(t2t_lite.get_problem("algorithmic_reverse"),
                 t2t_lite.get_hparams("transformer_tiny"), "/tmp/data",
                 TrainConfig(model_dir="/tmp/run", train_steps=1000))

Batch size. `hparams.batch_size` is the GLOBAL number of tokens (per side) of one optimizer
step. Each replica reads micro-batches of batch_size / (replicas * grad_accum_steps) tokens;
an optimizer step consumes grad_accum_steps micro-batches on every replica (see steps.py for
how their losses, gradients and dropout masks combine).

What the run writes into its run directory, and how it is read back: t2t_lite/rundir/. The
Trainer leaves process-wide state as it found it: the seed of its weights and the mixed
precision policy are set only while the model is built.
"""
import contextlib
import math

import keras
import tensorflow as tf

from t2t_lite.decode import translation
from t2t_lite.errors import RunFailure
from t2t_lite.modeling import mixed_precision
from t2t_lite.modeling.transformer import build_model
from t2t_lite.rundir import checkpoints, lease, run_files
from t2t_lite.train import (distribute, ema, model_selection, optimization, preemption,
                            run_schedule, steps, training_log, warm_start)
from t2t_lite.train.train_config import TrainConfig, TrainerError

__all__ = ["TrainConfig", "Trainer", "TrainerError", "train"]


def train(problem, hparams, data_dir, config, *, raw_dir=None, progress_seconds=10.0,
          workers=1, run_info=None, log=print, strategy=None):
  """Prepares data_dir for `problem` (or checks that it was prepared with the problem's
  settings), refuses a dev split with nothing to evaluate on when the run evaluates, and trains
  `hparams` on it under `config` -> Trainer.train's summary.

  raw_dir, progress_seconds, workers: Problem.prepare's. run_info: more fields for run.json
  (the tools record the hparams set's name and overrides). strategy: a tf.distribute strategy
  already made, instead of config.strategy's."""
  # First the platform: a cluster or a TPU that is not there is refused before data is written.
  platform = distribute.Platform.make(config.strategy, config.tpu, strategy)
  if not problem.is_prepared(data_dir):
    log(f"preparing {problem.name} in {data_dir}")
  problem.prepare(data_dir, raw_dir, progress_seconds, workers)
  if config.eval_steps:
    _check_dev_split(problem, data_dir, hparams)
  trainer = Trainer(problem, hparams, data_dir, config, problem.tokenizer(data_dir).vocab_size,
                    run_info, translation.problem_metric_fn(
                        problem, data_dir, hparams, config.eval_decode_examples),
                    log, platform)
  try:
    return trainer.train()
  except tf.errors.DataLossError as e:  # A record file damaged after the size check passed.
    raise problem.damaged_data_error(data_dir, e) from None
  except (tf.errors.NotFoundError, tf.errors.PermissionDeniedError) as e:  # data_dir changed
    raise RunFailure(f"reading {data_dir} failed while training: "
                     f"{checkpoints.reason(e)}") from None


def _check_dev_split(problem, data_dir, hparams):
  """Evaluation needs dev records that read and examples within max_length: refused before
  anything is trained."""
  problem.dataset("dev", data_dir, hparams, training=False)  # Checks its files.
  examples = problem.manifest(data_dir)["splits"]["dev"]["examples"]
  if examples - problem.count_overlong("dev", data_dir, hparams.max_length) <= 0:
    raise TrainerError(
        f"the dev split of {data_dir} has no example of at most max_length={hparams.max_length} "
        f"tokens ({examples} examples) to evaluate on: prepare a data_dir with dev data, or "
        "train without evaluation (--eval_steps=0)")


class Trainer:
  """Builds the model, optimizer and steps on one platform; `train()` runs.

  Args:
    problem: a Problem; its `dataset(split, data_dir, hparams, training, ...)` feeds the run.
    hparams: HParams (batch_size = GLOBAL tokens per optimizer step).
    data_dir: the prepared data.
    config: TrainConfig.
    vocab_size: the model's vocabulary size (the problem's tokenizer's).
    run_info: extra fields for run.json (the hparams set's name and overrides).
    metric_fn: optional `metric_fn(model) -> {name: value}` run at each evaluation (the
      problem's own metric on a dev subset, e.g. BLEU from beam search).
    log: where progress lines go (print by default).
    platform: a distribute.Platform already made (default: config.strategy's).
  Nothing is written before `train()`, which checks the run directory first.
  """

  def __init__(self, problem, hparams, data_dir, config, vocab_size, run_info=None,
               metric_fn=None, log=print, platform=None):
    self.problem, self.hparams, self.data_dir, self.config = problem, hparams, data_dir, config
    self.metric_fn, self.log = metric_fn, log
    self.platform = platform or distribute.Platform.make(config.strategy, config.tpu)
    self.strategy, self.is_chief = self.platform.strategy, self.platform.is_chief
    self.num_replicas = self.platform.num_replicas
    self.micro_batch_tokens = self._micro_batch_tokens()
    # XLA compiles once per input shape: bucket-padded batches keep that to one per bucket.
    self.static_shapes = (self.platform.static_shapes(config.xla)
                          if config.static_shapes is None else config.static_shapes)
    self.steps_per_execution = config.steps_per_execution or self.platform.steps_per_execution
    if config.cooldown_minutes and self.platform.num_workers > 1:
      # Each worker would read its own clock, and replicas would step at different rates.
      raise TrainerError("cooldown_minutes needs one worker; with multi_worker use the hparams "
                         "cooldown_start and cooldown_steps (a step budget)")
    metric = model_selection.metric_name(config, problem, decodes=metric_fn is not None)
    if metric and metric.startswith("dev_") and metric_fn is None:
      raise TrainerError(f"best_metric={config.best_metric} needs decoded dev sentences, and "
                         f"{data_dir} keeps no dev text")
    self.selection = metric and model_selection.ModelSelection(
        metric, config.patience, config.model_dir, self.is_chief, log, config.cooldown_patience)
    self.run_info = dict({"problem": problem.name}, **(run_info or {}), vocab_size=vocab_size,
                         seed=config.seed, packed=config.pack,
                         grad_accum_steps=config.grad_accum_steps,
                         num_replicas=self.num_replicas,
                         mixed_precision=config.mixed_precision, ema_decay=config.ema_decay,
                         selection_metric=metric, data_dir=data_dir)
    with mixed_precision.building(config.mixed_precision), self.strategy.scope():
      self.model = build_model(hparams, vocab_size, seed=config.seed)
      self.ema = config.ema_decay and ema.WeightAverage(self.model.trainable_variables,
                                                         config.ema_decay)
      # The wall-clock cooldown's factor, set before each host call (_train_loop).
      self.lr_scale = (tf.Variable(1.0, trainable=False, name="lr_scale")
                       if config.cooldown_minutes else None)
      self.lr_schedule = optimization.TransformerSchedule.of(hparams, self.lr_scale)
      optimizer = optimization.make_optimizer(hparams, self.lr_schedule)
      if config.mixed_precision == "fp16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
      self.optimizer = optimizer
      self.optimizer.build(self.model.trainable_variables)
    self._train_fn = steps.make_train_loop(
        self.strategy, steps.make_train_step(
            self.model, self.optimizer, label_smoothing=hparams.label_smoothing,
            micro_batch_tokens=self.micro_batch_tokens,
            grad_accum_steps=config.grad_accum_steps, num_replicas=self.num_replicas,
            jit_compile=self.platform.jit_compile(config.xla),
            reseed_dropout=self.platform.reseeds_dropout, ema=self.ema or None),
        self.platform.micro_batch_splitter(config.grad_accum_steps))
    self._eval_fn = None
    # Made by train(): the lease (chief only), the input iterator, the checkpoint, the run
    # fine-tuning starts from.
    self.lease = self.train_iterator = self.checkpoint = self.manager = self.source = None

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

  @property
  def step(self):
    return int(self.optimizer.iterations.numpy())

  # ------------------------------------------------------------------ data
  def _train_dataset_fn(self, input_context):
    return self.problem.dataset(
        "train", self.data_dir, self.hparams, training=True,
        batch_tokens=self.micro_batch_tokens, seed=self.config.seed, input_context=input_context,
        static_shapes=self.static_shapes, pack=self.config.pack,
        **({"cache": True} if self.run_info.get("train_cache") else {}))

  def _eval_dataset_fn(self, input_context):
    ds = self.problem.dataset(
        "dev", self.data_dir, self.hparams, training=False,
        batch_tokens=self.micro_batch_tokens, input_context=input_context,
        # Evaluation is not XLA-compiled where the platform leaves it to us: keep partial
        # batches.
        static_shapes=self.platform.static_shapes(xla=False))
    return ds.take(self.config.eval_steps)

  # ------------------------------------------------------------------ steps
  def train_steps(self, num_steps):
    """Runs `num_steps` optimizer steps in one host call -> (mean loss, target tokens, grad
    norm of the last step) as Python floats."""
    loss_sum, count, grad_norm = self._train_fn(self.train_iterator, tf.constant(num_steps))
    count = float(count)
    return float(loss_sum) / max(count, 1.0), count, float(grad_norm)

  def _averaged(self):
    """The weights evaluated and kept as the best: the moving averages when the run has them."""
    return self.ema.swapped() if self.ema else contextlib.nullcontext()

  def evaluate(self):
    """Loss (unsmoothed cross entropy per target token), perplexity and token accuracy on at
    most eval_steps batches (per replica) of the dev split, plus metric_fn's metrics; of the
    moving averages of the weights when the run keeps them."""
    with self._averaged():
      return self._evaluate()

  def _evaluate(self):
    dataset = self.strategy.distribute_datasets_from_function(self._eval_dataset_fn)
    if self._eval_fn is None:
      self._eval_fn = steps.make_eval_step(self.model, self.strategy, dataset.element_spec)
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

  # ------------------------------------------------------------------ checkpoints
  def restore(self):
    """Makes the checkpoint and restores the run directory's newest checkpoint that reads
    (warning about any that does not) -> the step restored (0 if none). The input's position
    is restored with it or, on a platform that cannot save it, the batches consumed before are
    skipped."""
    platform, config = self.platform, self.config
    # Dropout seed states: keras layers hold them as non-trainable variables that
    # tf.train.Checkpoint does not reach through the layers, so they are listed here.
    objects = {run_files.MODEL: self.model, "optimizer": self.optimizer,
               "rng": [v.value for v in self.model.non_trainable_variables]}
    if platform.saves_input_position:
      objects["train_iterator"] = self.train_iterator
    # Objects a run of an earlier t2t-lite did not save: restored where the checkpoint has them.
    optional = {"selection": self.selection.checkpoint_objects()} if self.selection else {}
    averages = {run_files.EMA: self.ema.averages} if self.ema else {}
    self.checkpoint = tf.train.Checkpoint(**objects, **optional, **averages)
    self.manager = checkpoints.manager(
        self.checkpoint, platform.checkpoint_directory(config.model_dir), config.keep_checkpoints)

    def restore(path):
      tf.train.Checkpoint(**objects).restore(path).assert_existing_objects_matched()
      tf.train.Checkpoint(**optional).restore(path).expect_partial()
      if self.ema and not checkpoints.restore_averages(self.ema.averages, path):
        self.ema.reset()  # A run that kept no averages before: they start here.

    restored = checkpoints.restore_newest_readable(
        restore, config.model_dir, lambda message: self.log(f"WARNING: {message}"))
    if restored is not None:
      self.log(f"restored {restored} (step {self.step})")
    elif self.source is not None:
      self.log(warm_start.apply(self.model, self.source,
                                self.problem.tokenizer(self.data_dir).pieces()))
      if self.ema:
        self.ema.reset()
    if not platform.saves_input_position and self.step:
      # Each step took grad_accum_steps batches per replica of this host's pipeline.
      consumed = self.step * platform.local_replicas * config.grad_accum_steps
      self.train_iterator = platform.train_iterator(self._train_dataset_fn, consumed)
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
      checkpoints.remove_stale_temp_dirs(directory, self.log)  # Free what the save took.
      raise checkpoints.save_failure(
          e, step, directory, last, self.model.weights + list(self.optimizer.variables)
      ) from None
    if not self.is_chief:
      tf.io.gfile.rmtree(self.manager.directory)
    return path

  # ------------------------------------------------------------------ the loop
  def train(self):
    """Trains to config.train_steps (resuming the run directory's newest readable checkpoint)
    -> a summary dict: {"step", "loss" (last logged train loss), "eval" (last eval metrics),
    "losses" (every logged (step, loss)), "stopped" (None, "time", "early" or "SIGTERM")}.

    First the run is checked against the one the run directory holds (run_files.check_resume),
    reading only: a refused run leaves every byte of it as it was, and takes no lease. Then the
    chief holds the directory's lease throughout (lease.py); a run that passed the check but
    finds another trainer there is refused by the lease. SIGTERM saves and returns
    (preemption.py). Raises TrainerError when the loss becomes NaN or Inf."""
    config = self.config
    saved = run_files.read_run(config.model_dir)
    self.run_info["train_cache"] = _train_cache_of(saved, self.problem)
    run_files.check_resume(saved, self.hparams, self.run_info, self.data_dir)
    if config.init_from and not warm_start.has_checkpoint(config.model_dir):
      self.source = warm_start.load_source(config.init_from, self.hparams)
      self.run_info["init_from"] = self.source.checkpoint
    elif "init_from" in saved.info:  # A fine-tuned run resumed: its record stays.
      self.run_info["init_from"] = saved.info["init_from"]
    # The input is made before anything is written: data that does not read is refused.
    self.train_iterator = self.platform.train_iterator(self._train_dataset_fn, 0)
    self.lease = lease.Lease(config.model_dir) if self.is_chief else None
    if self.lease is not None:
      self.lease.acquire()
    try:
      if self.is_chief:
        checkpoints.remove_stale_temp_dirs(config.model_dir, self.log)
        run_files.write_run_files(config.model_dir, self.hparams, self.run_info, self.data_dir)
      with preemption.StopOnSigterm() as sigterm:
        return self._train_loop(sigterm)
    finally:
      if self.lease is not None:
        self.lease.release()

  def _train_loop(self, sigterm):
    config, vote = self.config, self.platform.vote
    start = self.restore()
    schedule = run_schedule.RunSchedule(config, self.steps_per_execution)
    progress = training_log.TrainingLog(
        schedule, lambda step: float(self.lr_schedule(step - 1)), self.log,
        training_log.summary_writers(config.model_dir) if self.is_chief else None)
    self.log(f"training {self.problem.name} on {self.num_replicas} replica(s) "
             f"({self.platform.name}), {self.hparams.batch_size} tokens a step = "
             f"{self.num_replicas} x {config.grad_accum_steps} micro-batches of "
             f"{self.micro_batch_tokens}; step {start} -> {config.train_steps}")
    stopped, step = None, start
    if self.selection and self.selection.should_stop:
      stopped = "early"
      self.log(f"{config.model_dir} stopped early at step {step}: "
               f"{self.selection.stop_reason()}; nothing to train (fine-tune from it with "
               "--init_from, or use a new --model_dir)")
    if self.selection:
      self.selection.steer(schedule)  # A resumed run that had stalled: its cooldown again.
    while not stopped and step < config.train_steps:
      n = schedule.steps_until_event(step)
      if self.lr_scale is not None:
        self.lr_scale.assign(schedule.learning_rate_factor())
      loss, tokens, grad_norm = self.train_steps(n)
      if not math.isfinite(loss):
        last = self.manager.latest_checkpoint or "none"
        raise TrainerError(
            f"loss became {loss} between steps {step} and {step + n}; stopped without saving "
            f"(last good checkpoint: {last}). Lower learning_rate or raise warmup_steps")
      step += n
      progress.add(step, n, loss, tokens, grad_norm)
      if schedule.evaluates_at(step):
        self._evaluate_at(step, progress)
      if vote(bool(self.selection) and self.selection.should_stop):
        stopped = "early"
        self.log(f"stopping at step {step}: {self.selection.stop_reason()}")
        break
      if vote(sigterm.requested):
        stopped = "SIGTERM"
        self.log(f"stopping at step {step}: SIGTERM received; saving a checkpoint")
        break
      if vote(schedule.out_of_time()):
        stopped = "time"
        self.log(f"stopping at step {step}: {schedule.end_reason}")
        break
      if vote(schedule.checkpoint_due()):
        self.save()
        schedule.saved()
    if stopped == "time" and config.eval_steps and progress.eval_step != step:
      self._evaluate_at(step, progress)  # The final evaluation promised, before the save.
    if stopped == "time" and self.selection and self.selection.cooled_down(step):
      stopped = "early"  # After the cooldown the stalled metric started: done.
    latest = self.manager.latest_checkpoint
    if latest is None or self.step != checkpoints.checkpoint_step(latest):
      self.save()
    progress.close()
    return {"step": self.step, "losses": progress.history, "stopped": stopped,
            "loss": progress.history[-1][1] if progress.history else None,
            "eval": progress.eval_metrics,
            "best": self.selection.record() if self.selection else None}

  def _evaluate_at(self, step, progress):
    """Evaluates, and keeps the weights evaluated in best/ when the selection metric improved
    (the record in best/best.json says so, and why the run stops when it does)."""
    metrics = self.evaluate()
    progress.evaluated(step, metrics)
    if self.selection is not None:
      self.selection.evaluated(step, metrics, self._save_weights)
      self.selection.steer(progress.schedule)

  def _save_weights(self, directory):
    """The weights evaluated (the averages, when kept) as directory/ckpt-<step>. Every worker
    takes part in a save; the chief's is the one kept."""
    target = self.platform.checkpoint_directory(directory)
    with self._averaged():
      checkpoints.save_model(self.model, target, self.step)
    if not self.is_chief:
      tf.io.gfile.rmtree(target)


def _train_cache_of(saved, problem):
  """Whether the training pipeline keeps examples in memory: only to resume a run started
  before that was dropped. Its checkpoints hold the cache in the iterator's state (why it was
  dropped: bench/checkpoint_size.py), and an iterator state restores only into the same
  pipeline. run.json's "train_cache" says; a run.json without it is of that older layout."""
  if not saved.info:
    return False
  return bool(saved.info.get("train_cache", getattr(problem, "cache_in_memory", False)))
