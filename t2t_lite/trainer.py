"""Training: one loop for every `tf.distribute` strategy, with XLA, exact resume and evaluation.

The strategy is chosen (`make_strategy`), never forked on: the default strategy (one CPU / GPU),
MirroredStrategy (GPUs of one machine), MultiWorkerMirroredStrategy (TF_CONFIG) and TPUStrategy
(Cloud TPU) all run the same step.

Batch size. `hparams.batch_size` is the GLOBAL number of tokens (per side) of one optimizer
step. Each replica reads micro-batches of batch_size / (replicas * grad_accum_steps) tokens;
an optimizer step consumes grad_accum_steps micro-batches on every replica. The loss of a step
is the label-smoothed cross entropy summed over every target token of all those micro-batches,
divided by their total (global) number of target tokens: 2 replicas, or 1 device accumulating 2
micro-batches, take exactly the same step. Dropout too: before each micro-batch every dropout
seed is set from (step, global micro-batch index), so replicas draw different masks and the
masks do not depend on how the batch is split.

What the run writes into model_dir, and how it is read back: t2t_lite/model_dir.py.
"""
import dataclasses
import math
import os
import re
import time
from typing import Optional

import keras
import tensorflow as tf

from t2t_lite import lease as lease_lib
from t2t_lite import losses, optimization, preemption
from t2t_lite import model_dir as model_dir_lib
from t2t_lite.progress import hms as _hms
from t2t_lite.transformer import build_model
from t2t_lite.errors import RunFailure, T2TLiteError

STRATEGIES = ("auto", "default", "mirrored", "multi_worker", "tpu")
PRECISIONS = {"none": "float32", "bf16": "mixed_bfloat16", "fp16": "mixed_float16"}


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
  log_every: int = 100
  train_minutes: Optional[float] = None  # Also stop (and save) after this wall-clock time.

  def __post_init__(self):
    if self.strategy not in STRATEGIES:
      raise TrainerError(f"unknown strategy {self.strategy!r}; expected one of "
                         f"{', '.join(STRATEGIES)}")
    if self.mixed_precision not in PRECISIONS:
      raise TrainerError(f"unknown mixed_precision {self.mixed_precision!r}; expected one of "
                         f"{', '.join(PRECISIONS)}")
    for name in ("train_steps", "eval_every", "grad_accum_steps", "keep_checkpoints",
                 "log_every"):
      if getattr(self, name) <= 0:
        raise TrainerError(f"{name} must be positive, got {getattr(self, name)}")
    if self.eval_steps < 0 or self.steps_per_execution < 0:
      raise TrainerError("eval_steps and steps_per_execution must be >= 0")
    if self.checkpoint_every_minutes <= 0:
      raise TrainerError(
          f"checkpoint_every_minutes must be positive, got {self.checkpoint_every_minutes}")


# --------------------------------------------------------------------------- strategies
def make_strategy(name="auto", tpu=None):
  """-> (tf.distribute.Strategy, resolved name). `auto`: TPU if `tpu` is given or TPU devices
  are visible, else MirroredStrategy over several GPUs, else the default strategy."""
  if name == "auto":
    if tpu or tf.config.list_physical_devices("TPU"):
      name = "tpu"
    elif len(tf.config.list_physical_devices("GPU")) > 1:
      name = "mirrored"
    else:
      name = "default"
  if name == "default":
    return tf.distribute.get_strategy(), name
  if name == "mirrored":
    return tf.distribute.MirroredStrategy(), name
  if name == "multi_worker":
    # The cluster comes from the TF_CONFIG environment variable, as TensorFlow defines it.
    return tf.distribute.MultiWorkerMirroredStrategy(), name
  if name == "tpu":
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or "local")
    if tpu != "local":
      tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver), name
  raise TrainerError(f"unknown strategy {name!r}; expected one of {', '.join(STRATEGIES)}")


def _is_chief(strategy):
  """Only the chief (or worker 0 when there is none) writes model_dir; the other workers of a
  MultiWorkerMirroredStrategy save their (identical) checkpoints to a temp dir they delete."""
  resolver = getattr(strategy, "cluster_resolver", None)
  if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) or resolver is None:
    return True
  if resolver.task_type in (None, "chief"):
    return True
  has_chief = "chief" in resolver.cluster_spec().as_dict()
  return resolver.task_type == "worker" and resolver.task_id == 0 and not has_chief


# --------------------------------------------------------------------------- the trainer
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
  """

  def __init__(self, problem, hparams, data_dir, config, vocab_size, run_info=None,
               metric_fn=None, log=print, strategy=None):
    self.problem, self.hparams, self.data_dir, self.config = problem, hparams, data_dir, config
    self.metric_fn, self.log = metric_fn, log
    if strategy is None:
      strategy, self.strategy_name = make_strategy(config.strategy, config.tpu)
    else:
      self.strategy_name = type(strategy).__name__
    self.strategy = strategy
    self.is_tpu = isinstance(strategy, tf.distribute.TPUStrategy)
    self.is_chief = _is_chief(strategy)
    self.num_replicas = strategy.num_replicas_in_sync
    accum = config.grad_accum_steps
    self.micro_batch_tokens = hparams.batch_size // (self.num_replicas * accum)
    if self.micro_batch_tokens < hparams.max_length:
      raise TrainerError(
          f"batch_size={hparams.batch_size} global tokens / ({self.num_replicas} replicas x "
          f"{accum} accumulation steps) = {self.micro_batch_tokens} tokens per micro-batch, "
          f"less than max_length={hparams.max_length}: raise batch_size or lower "
          f"grad_accum_steps / max_length")
    # XLA compiles once per input shape: bucket-padded batches keep that to one per bucket.
    self.static_shapes = ((self.is_tpu or config.xla) if config.static_shapes is None
                          else config.static_shapes)
    self.steps_per_execution = config.steps_per_execution or (100 if self.is_tpu else 1)
    self.train_cache = _train_cache_of(config.model_dir, problem)
    self.run_info = dict(run_info or {}, vocab_size=vocab_size, seed=config.seed,
                         train_cache=self.train_cache,
                         grad_accum_steps=accum, num_replicas=self.num_replicas,
                         mixed_precision=config.mixed_precision, data_dir=data_dir)

    keras.utils.set_random_seed(config.seed)
    previous_policy = keras.mixed_precision.global_policy()
    keras.mixed_precision.set_global_policy(PRECISIONS[config.mixed_precision])
    try:
      with strategy.scope():
        self.model = build_model(hparams, vocab_size)
        optimizer = optimization.make_optimizer(hparams)
        if config.mixed_precision == "fp16":
          optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        self.optimizer = optimizer
        self.optimizer.build(self.model.trainable_variables)
    finally:
      keras.mixed_precision.set_global_policy(previous_policy)
    self.schedule = optimization.TransformerSchedule(
        hparams.d_model, hparams.warmup_steps, hparams.learning_rate)

    # The input position is saved with the checkpoint: a plain tf.data iterator per worker
    # (checkpointable) feeds this worker's replicas. TPU input must be a distributed dataset,
    # whose iterator cannot be saved: it skips the batches consumed before a resume instead.
    self.input_context = _input_context(strategy)
    self.local_replicas = self.num_replicas // self.input_context.num_input_pipelines
    if self.is_tpu:
      self.train_iterator = None  # Made in restore(), once the step is known.
    else:
      self.train_iterator = iter(self._train_dataset_fn(self.input_context))
    # Dropout seed states: keras layers hold them as non-trainable variables that
    # tf.train.Checkpoint does not reach through the layers, so they are listed here.
    rng = [v.value for v in self.model.non_trainable_variables]
    objects = {model_dir_lib.MODEL: self.model, "optimizer": self.optimizer, "rng": rng}
    if self.train_iterator is not None:
      objects["train_iterator"] = self.train_iterator
    self.checkpoint = tf.train.Checkpoint(**objects)
    directory = config.model_dir if self.is_chief else _worker_temp_dir(config.model_dir,
                                                                        strategy)
    self.manager = model_dir_lib.checkpoint_manager(self.checkpoint, directory,
                                                    config.keep_checkpoints)
    self._train_fn = self._make_train_fn()
    self.lease = None  # model_dir's lease, held by the chief while train() runs.
    self._eval_fn = None
    self._sum_fn = None

  # ------------------------------------------------------------------ data
  def _train_dataset_fn(self, input_context):
    return self.problem.dataset(
        "train", self.data_dir, self.hparams, training=True,
        batch_tokens=self.micro_batch_tokens, seed=self.config.seed, input_context=input_context,
        static_shapes=self.static_shapes, **({"cache": True} if self.train_cache else {}))

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
  def _micro_gradients(self, batch):
    """One micro-batch on one replica -> (gradients of loss_sum / micro_batch_tokens,
    loss sum, target token count). The division keeps the fp16 loss scale in range."""
    with tf.GradientTape() as tape:
      logits = self.model(batch, training=True)  # [B, T, V]
      loss_sum, count = losses.smoothed_cross_entropy(logits, batch["targets"],
                                                      self.hparams.label_smoothing)
      loss = loss_sum / self.micro_batch_tokens
      if isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer):
        loss = self.optimizer.scale_loss(loss)
    grads = tape.gradient(loss, self.model.trainable_variables)
    return grads, loss_sum, count

  def _make_train_fn(self):
    # A function of its own: traced once however many micro-batches a step accumulates.
    # TPU compiles everything anyway (jit_compile None = the default there).
    micro = tf.function(self._micro_gradients,
                        jit_compile=True if self.config.xla and not self.is_tpu else None)
    variables = self.model.trainable_variables
    num_replicas = self.num_replicas
    scale_dtype = tf.float32

    seed_states = [v for v in self.model.non_trainable_variables
                   if v.path.endswith("seed_generator_state")]
    accum = self.config.grad_accum_steps
    seed_per_batch = not self.is_tpu

    def set_dropout_seeds(k):
      """Dropout of micro-batch k of this replica draws from a counter of (step, global
      micro-batch index): replicas get different masks (keras would give them the same),
      and N replicas or N accumulated micro-batches see the same masks."""
      replica = tf.distribute.get_replica_context().replica_id_in_sync_group
      replica = tf.reshape(tf.cast(replica, tf.int64), [])  # a [1] tensor in multi-worker
      index = (self.optimizer.iterations * num_replicas + replica) * accum + k
      for state in seed_states:  # [layer seed, counter]; a layer draws < 1024 times a pass
        state.assign(tf.stack([state[0], tf.cast(index * 1024, state.dtype)]))

    def replica_step(batches):
      grads, loss_sum, count = None, 0.0, 0.0
      for k, batch in enumerate(batches):  # grad_accum_steps micro-batches
        if seed_per_batch:
          set_dropout_seeds(k)
        g, l, c = micro(batch)
        grads = list(g) if grads is None else [a + b for a, b in zip(grads, g)]
        loss_sum += l
        count += c
      ctx = tf.distribute.get_replica_context()
      loss_sum, count = ctx.all_reduce(tf.distribute.ReduceOp.SUM, [loss_sum, count])
      # grads hold d(sum of losses)/micro_batch_tokens; make them d(mean over ALL tokens).
      scale = tf.cast(self.micro_batch_tokens, scale_dtype) / tf.maximum(count, 1.0)
      grads = [g * tf.cast(scale, g.dtype) for g in grads]
      if num_replicas > 1:
        # The global gradient's norm needs the summed gradient; the optimizer sums again.
        summed = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
        grad_norm = tf.linalg.global_norm(summed)
        grads = [g / num_replicas for g in summed]
      else:
        grad_norm = tf.linalg.global_norm(grads)
      if isinstance(self.optimizer, keras.optimizers.LossScaleOptimizer):
        grad_norm /= self.optimizer.dynamic_scale
      self.optimizer.apply(grads, variables)
      return loss_sum, count, grad_norm

    strategy, local_replicas, is_tpu = self.strategy, self.local_replicas, self.is_tpu

    def next_batches(iterator):
      """-> per replica, a tuple of grad_accum_steps micro-batches."""
      if is_tpu:  # A distributed iterator: each next() gives every replica one batch.
        return tuple(next(iterator) for _ in range(accum))
      elements = [next(iterator) for _ in range(local_replicas * accum)]

      def replica_batches(context):  # Replica r takes elements r*accum ... r*accum+accum-1.
        r = context.replica_id_in_sync_group % local_replicas
        return tuple(elements[r * accum:(r + 1) * accum])

      if local_replicas == 1 and not isinstance(
          strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return tuple(elements)
      return strategy.experimental_distribute_values_from_function(replica_batches)

    @tf.function
    def train_fn(iterator, num_steps):
      loss_sum, count = tf.constant(0.0), tf.constant(0.0)
      grad_norm = tf.constant(0.0)
      for _ in tf.range(num_steps):
        l, c, n = strategy.run(replica_step, args=(next_batches(iterator),))
        # Every replica holds the same all-reduced values.
        loss_sum += strategy.reduce(tf.distribute.ReduceOp.MEAN, l, axis=None)
        count += strategy.reduce(tf.distribute.ReduceOp.MEAN, c, axis=None)
        grad_norm = strategy.reduce(tf.distribute.ReduceOp.MEAN, n, axis=None)
      return loss_sum, count, grad_norm

    return train_fn

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
    writers = {}
    if self.is_chief:
      writers = {name: tf.summary.create_file_writer(os.path.join(config.model_dir, name))
                 for name in ("train", "eval")}
    self.log(f"training {self.run_info.get('problem', '')} on {self.num_replicas} replica(s) "
             f"({self.strategy_name}), {self.hparams.batch_size} tokens a step = "
             f"{self.num_replicas} x {config.grad_accum_steps} micro-batches of "
             f"{self.micro_batch_tokens}; step {start} -> {config.train_steps}")
    history, eval_metrics, eval_step, stopped = [], None, None, None
    last_save = run_start = time.time()
    window = _Window()
    step = start
    while step < config.train_steps:
      n = self._steps_until_event(step)
      loss, tokens, grad_norm = self.train_steps(n)
      if not math.isfinite(loss):
        last = self.manager.latest_checkpoint or "none"
        raise TrainerError(
            f"loss became {loss} between steps {step} and {step + n}; stopped without saving "
            f"(last good checkpoint: {last}). Lower learning_rate or raise warmup_steps")
      step += n
      window.add(loss, tokens, n)
      if step % config.log_every == 0 or step == config.train_steps:
        history.append((step, self._log_progress(step, window, grad_norm, run_start, writers)))
        window = _Window()
      if config.eval_steps and (step % config.eval_every == 0 or step == config.train_steps):
        eval_metrics, eval_step = self._evaluate_and_log(step, writers), step
      if self._any_worker(sigterm.requested):
        stopped = "SIGTERM"
        self.log(f"stopping at step {step}: SIGTERM received; saving a checkpoint")
        break
      out_of_time = bool(config.train_minutes) and (
          time.time() - run_start >= config.train_minutes * 60)
      if self._any_worker(out_of_time):
        stopped = "time"
        self.log(f"stopping at step {step}: the {config.train_minutes} minute budget is spent")
        break
      if self._any_worker(time.time() - last_save >= config.checkpoint_every_minutes * 60):
        self.save()
        last_save = time.time()
    if self.manager.latest_checkpoint is None or self.step != model_dir_lib.checkpoint_step(
        self.manager.latest_checkpoint):
      self.save()
    if stopped == "time" and config.eval_steps and eval_step != step:
      eval_metrics = self._evaluate_and_log(step, writers)  # The final evaluation promised.
    for writer in writers.values():
      writer.flush()
    return {"step": self.step, "losses": history, "stopped": stopped,
            "loss": history[-1][1] if history else None, "eval": eval_metrics}

  def _log_progress(self, step, window, grad_norm, run_start, writers):
    """Logs (and writes to TensorBoard) the window's mean loss and speed -> the mean loss."""
    config = self.config
    elapsed = time.time() - window.start
    rate = window.tokens / max(elapsed, 1e-9)
    mean_loss = window.loss / window.steps
    lr = float(self.schedule(step - 1))
    eta = (config.train_steps - step) * elapsed / window.steps
    if config.train_minutes:  # the run ends at whichever comes first
      eta = min(eta, max(0.0, config.train_minutes * 60 - (time.time() - run_start)))
    self.log(f"step {step}/{config.train_steps}  loss {mean_loss:.4f}  lr {lr:.3e}  "
             f"{rate:,.0f} tok/s  grad_norm {grad_norm:.3f}  ETA {_hms(eta)}")
    if writers:
      with writers["train"].as_default(step=step):
        tf.summary.scalar("loss", mean_loss)
        tf.summary.scalar("learning_rate", lr)
        tf.summary.scalar("tokens_per_second", rate)
        tf.summary.scalar("gradient_norm", grad_norm)
    return mean_loss

  def _evaluate_and_log(self, step, writers):
    metrics = self.evaluate()
    self.log(f"eval at step {step}: " + "  ".join(
        f"{k} {v}" if isinstance(v, str) else f"{k} {v:.4f}"  # str: a BLEU's signature
        for k, v in metrics.items() if k != "tokens"))
    if writers:
      with writers["eval"].as_default(step=step):
        for name, value in metrics.items():
          if not isinstance(value, str):
            tf.summary.scalar(name, value)
    return metrics

  def _any_worker(self, flag):
    """True if `flag` is true on any worker: workers decide together when to save or stop (on
    their own clocks they could differ, and a worker left alone would wait forever)."""
    if self.input_context.num_input_pipelines == 1:
      return flag
    if self._sum_fn is None:
      strategy = self.strategy

      @tf.function
      def sum_fn(x):
        value = strategy.run(lambda: tf.identity(x))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)

      self._sum_fn = sum_fn
    return bool(self._sum_fn(tf.constant(1.0 if flag else 0.0)) > 0)

  def _steps_until_event(self, step):
    """Steps to run in the next host call: steps_per_execution, cut at log / eval / the end."""
    config = self.config
    n = min(self.steps_per_execution, config.train_steps - step)
    for every in (config.log_every, config.eval_every if config.eval_steps else 0):
      if every:
        n = min(n, every - step % every)
    return max(n, 1)


def _train_cache_of(model_dir, problem):
  """Whether the training pipeline keeps examples in memory: only to resume a run started
  before that was dropped. Its checkpoints hold the cache in the iterator's state (why it was
  dropped: bench/checkpoint_size.py), and an iterator state restores only into the same
  pipeline. run.json's "train_cache" says; a
  run.json without it is of that older layout."""
  path = os.path.join(model_dir, model_dir_lib.RUN_FILE)
  if not tf.io.gfile.exists(path):
    return False
  older = getattr(problem, "cache_in_memory", False)
  return bool(model_dir_lib.read_json(path).get("train_cache", older))


class _Window:
  """Loss, target tokens and steps since the last progress line."""

  def __init__(self):
    self.start, self.tokens, self.loss, self.steps = time.time(), 0.0, 0.0, 0

  def add(self, loss, tokens, steps):
    self.tokens += tokens
    self.loss += loss * steps
    self.steps += steps


def _input_context(strategy):
  """This worker's share of the input: one pipeline per worker (MultiWorkerMirroredStrategy),
  else one for all."""
  resolver = getattr(strategy, "cluster_resolver", None)
  if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) or resolver is None:
    return tf.distribute.InputContext(1, 0, strategy.num_replicas_in_sync)
  cluster = resolver.cluster_spec().as_dict()
  num_chiefs = len(cluster.get("chief", []))
  num_workers = num_chiefs + len(cluster.get("worker", []))
  index = 0 if resolver.task_type == "chief" else resolver.task_id + num_chiefs
  return tf.distribute.InputContext(num_workers, index, strategy.num_replicas_in_sync)


def _worker_temp_dir(model_dir, strategy):
  resolver = strategy.cluster_resolver
  return os.path.join(model_dir, f"workertemp_{resolver.task_type}_{resolver.task_id}")


def problem_metric_fn(problem, data_dir, hparams, num_examples=100, batch_size=32):
  """-> metric_fn(model): the problem's own metric (BLEU, bracket F1, accuracy) on the first
  `num_examples` dev pairs, decoded with the problem's beam search settings; None when
  num_examples is 0 or data_dir keeps no dev text."""
  from t2t_lite import decoding, metrics
  from t2t_lite.problem import ProblemError
  if not num_examples:
    return None
  try:
    pairs = problem.text_pairs("dev", data_dir)[:num_examples]
  except ProblemError:
    return None
  sources, references = [s for s, _ in pairs], [t for _, t in pairs]
  settings = problem.decode_settings(hparams)
  translators = {}

  def metric_fn(model):
    if id(model) not in translators:  # One compiled decoder per model, reused every eval.
      translators[id(model)] = decoding.Translator(
          model, problem.tokenizer(data_dir), beam_size=settings["beam_size"],
          alpha=settings["alpha"], extra_length=settings["extra_decode_length"])
    hypotheses, _ = translators[id(model)].translate(sources, batch_size)
    scores = metrics.score(problem, sources, hypotheses, references)
    return {f"dev_{name}": value for name, value in scores.items()
            if isinstance(value, (int, float, str))}

  return metric_fn


def train(problem, hparams, data_dir, config, vocab_size, run_info=None, metric_fn=None,
          log=print):
  """Refuses a model_dir of another run, then builds a Trainer and runs it; see Trainer.train."""
  model_dir_lib.check_saved_hparams(config.model_dir, hparams, (run_info or {}).get("problem"))
  trainer = Trainer(problem, hparams, data_dir, config, vocab_size, run_info, metric_fn, log)
  return trainer.train()
