"""Training: `train(problem, hparams, data_dir, config)` is the one way in (t2t-lite-train, the
Python API and the tests call it). It checks the run directory, prepares the data, then a
`Trainer` runs one loop on any platform (t2t_lite/train/distribute.py), with XLA, exact resume
and evaluation.

  from t2t_lite.train.trainer import TrainConfig, train
  result = train(t2t_lite.get_problem("algorithmic_reverse"),
                 t2t_lite.get_hparams("transformer_tiny"), "/tmp/data",
                 TrainConfig(model_dir="/tmp/run", train_steps=1000))

Batch size. `hparams.batch_size` is the GLOBAL number of tokens (per side) of one optimizer
step. Each replica reads micro-batches of batch_size / (replicas * grad_accum_steps) tokens;
an optimizer step consumes grad_accum_steps micro-batches on every replica (see steps.py for
how their losses, gradients and dropout masks combine).

Who owns what: the training state and its checkpoints, train_state.py; when to evaluate, save
and stop, run_schedule.py; evaluation and the best model, evaluation.py; the run directory's
files, t2t_lite/rundir/. The Trainer leaves process-wide state as it found it: the seed of its
weights and the mixed precision policy are set only while the model is built.
"""
import contextlib
import dataclasses
import math

import tensorflow as tf

from t2t_lite.rundir import lease, run_files
from t2t_lite.train import distribute, evaluation, run_schedule, steps, training_log
from t2t_lite.train.train_config import TrainConfig, TrainerError
from t2t_lite.train.train_state import TrainState

__all__ = ["TrainConfig", "Trainer", "TrainerError", "train"]


def train(problem, hparams, data_dir, config, *, raw_dir=None, progress_seconds=10.0,
          workers=1, run_info=None, log=print, strategy=None):
  """Checks that config.model_dir can take this run, prepares data_dir for `problem` (or
  checks that it was prepared with the problem's settings), refuses a dev split with nothing
  to evaluate on when the run evaluates, and trains `hparams` on it under `config` ->
  Trainer.train's summary.

  raw_dir, progress_seconds, workers: Problem.prepare's. run_info: more fields for run.json
  (the tools record the hparams set's name and overrides). strategy: a tf.distribute strategy
  already made, instead of config.strategy's."""
  # First what needs no data: a cluster or a TPU that is not there, a model_dir of another run.
  platform = distribute.Platform.make(config.strategy, config.tpu, strategy)
  run_files.check_data_dir_apart(config.model_dir, data_dir)
  run_files.check_resume(run_files.read_run(config.model_dir), hparams,
                         dict(run_info or {}, problem=problem.name),
                         data_settings=problem.settings())
  _model_tables(problem, hparams)
  problem.check_word_dropout(hparams)
  if not problem.is_prepared(data_dir):
    log(f"preparing {problem.name} in {data_dir}")
  problem.prepare(data_dir, raw_dir, progress_seconds, workers)
  if config.eval_steps:
    evaluation.check_dev_split(problem, data_dir, hparams)
  trainer = Trainer(problem, hparams, data_dir, config, problem.tokenizer(data_dir).vocab_size,
                    run_info, evaluation.problem_metric_fn(
                        problem, data_dir, hparams, config.eval_decode_examples),
                    log, platform)
  try:
    return trainer.train()
  except tf.errors.OpError as e:  # A record file damaged, gone or unreadable while training.
    raise problem.reading_error(data_dir, e) from None


def _model_tables(problem, hparams, data_dir=None):
  """What building the model takes from its problem's vocabulary (architectures.build_model's
  keywords): with hparams source_pointer the ids of the tokens that place a source word, for a
  span parser its SpanVocabulary. Without data_dir, only checks that the problem has them."""
  if hparams.architecture == "span_parser":
    if not problem.predicts_spans:
      raise TrainerError(f"hparams architecture=span_parser: {problem.name}'s targets are not "
                         "span labels (wsj_parsing_spans' are)")
    return {"spans": problem.span_vocabulary(data_dir)} if data_dir else {}
  if problem.predicts_spans:
    raise TrainerError(f"{problem.name}'s targets are span labels: train it with hparams "
                       "architecture=span_parser (e.g. --hparams=transformer_parsing_spans)")
  if not hparams.source_pointer:
    return {}
  if not problem.places_source_words:
    raise TrainerError(f"hparams source_pointer=True: the outputs of {problem.name} do not "
                       "place its source words one token each (wsj_parsing's do, with its "
                       "vocabulary of words)")
  return {"source_slots": problem.source_slots(data_dir)} if data_dir else {}


class Trainer:
  """Builds the training state, its evaluations and steps on one platform; `train()` runs.

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
    self.platform = platform or distribute.Platform.make(config.strategy, config.tpu)
    precision, why, xla, why_xla = self.platform.precision(
        config.mixed_precision, config.xla, config.model_dir)
    config = dataclasses.replace(config, mixed_precision=precision, xla=xla)
    log(f"computing in {precision} ({why})")
    if not self.platform.compiles_everything:
      log(f"XLA {'on' if xla else 'off'} ({why_xla})")
    self.problem, self.hparams, self.data_dir, self.config = problem, hparams, data_dir, config
    self.log = log
    self.is_chief, self.num_replicas = self.platform.is_chief, self.platform.num_replicas
    self.micro_batch_tokens = self._micro_batch_tokens()
    # XLA compiles once per input shape: bucket-padded batches keep that to one per bucket.
    self.static_shapes = (self.platform.static_shapes(config.xla)
                          if config.static_shapes is None else config.static_shapes)
    self.steps_per_execution = config.steps_per_execution or self.platform.steps_per_execution
    if config.cooldown_minutes and self.platform.num_workers > 1:
      # Each worker would read its own clock, and replicas would step at different rates.
      raise TrainerError("cooldown_minutes needs one worker; with multi_worker use the hparams "
                         "cooldown_start and cooldown_steps (a step budget)")
    self.evaluator = evaluation.Evaluator(problem, hparams, data_dir, config, self.platform,
                                          self.micro_batch_tokens, metric_fn, log)
    self.run_info = dict({"problem": problem.name}, **(run_info or {}), vocab_size=vocab_size,
                         seed=config.seed, packed=config.pack,
                         grad_accum_steps=config.grad_accum_steps,
                         num_replicas=self.num_replicas,
                         mixed_precision=config.mixed_precision, ema_decay=config.ema_decay,
                         selection_metric=self.evaluator.selection and
                         self.evaluator.selection.metric,
                         data_dir=data_dir)
    self.state = TrainState(hparams, vocab_size, config, self.platform,
                            self.evaluator.selection,
                            lease.Lease(config.model_dir) if self.is_chief else None,
                            _model_tables(problem, hparams, data_dir))
    self._train_fn = steps.make_train_loop(
        self.platform.strategy, steps.make_train_step(
            self.model, self.state.optimizer, label_smoothing=hparams.label_smoothing,
            grad_accum_steps=config.grad_accum_steps, num_replicas=self.num_replicas,
            jit_compile=self.platform.jit_compile(config.xla),
            reseed_dropout=self.platform.reseeds_dropout, ema=self.state.ema or None,
            rdrop=hparams.rdrop),
        self.platform.micro_batch_splitter(config.grad_accum_steps))

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

  model = property(lambda self: self.state.model)
  optimizer = property(lambda self: self.state.optimizer)
  ema = property(lambda self: self.state.ema)
  step = property(lambda self: self.state.step)

  def _train_dataset_fn(self, input_context):
    return self.problem.dataset(
        "train", self.data_dir, self.hparams, training=True,
        batch_tokens=self.micro_batch_tokens, seed=self.config.seed, input_context=input_context,
        static_shapes=self.static_shapes, pack=self.config.pack,
        **({"cache": True} if self.run_info.get("train_cache") else {}))

  def run_steps(self, num_steps):
    """Runs `num_steps` optimizer steps in one host call -> (mean loss, target tokens, grad
    norm of the last step) as Python floats."""
    loss_sum, count, grad_norm = self._train_fn(self.state.iterator, tf.constant(num_steps))
    count = float(count)
    return float(loss_sum) / max(count, 1.0), count, float(grad_norm)

  # ------------------------------------------------------------------ the run
  def train(self):
    """Trains to config.train_steps, resuming the run directory's newest readable checkpoint
    -> a summary dict: {"step", "loss" (last logged train loss), "eval" (last eval metrics),
    "losses" (every logged (step, loss)), "stopped" (None, "time", "early" or "SIGTERM"),
    "best" (best.json's record, or None)}.

    In order: the run is checked against the one the run directory holds, reading only (a
    refused run leaves every byte of it as it was, and takes no lease); the chief takes the
    directory's lease (rundir/lease.py) and holds it throughout; the state is restored or
    started (train_state.py); the loop runs until the schedule stops it (run_schedule.py:
    budgets, early stopping, SIGTERM); the last step is saved. Raises TrainerError when the
    loss becomes NaN or Inf."""
    source = self._check_resume()
    with self.state.lease or contextlib.nullcontext():
      if self.is_chief:
        run_files.write_run_files(self.config.model_dir, self.hparams, self.run_info,
                                  self.data_dir)
      self.state.restore_or_start(source, self.log)
      summary = self._loop()
      self.state.save()
    return summary

  def _check_resume(self):
    """Everything a resume needs, read only, before anything is written -> the fine-tuning
    source (or None). Data that does not read is refused here too."""
    saved = run_files.read_run(self.config.model_dir)
    self.run_info["train_cache"] = _train_cache_of(saved, self.problem)
    run_files.check_resume(saved, self.hparams, self.run_info, self.data_dir)
    source = self.state.fine_tuning_source(
        self.config.init_from, self.problem.tokenizer(self.data_dir).pieces(), self.log)
    if source is not None:
      self.run_info["init_from"] = source.checkpoint
    elif "init_from" in saved.info:  # A fine-tuned run resumed: its record stays.
      self.run_info["init_from"] = saved.info["init_from"]
    self.state.open_input(self._train_dataset_fn)
    return source

  def _loop(self):
    """Host calls of steps_until_event steps, evaluations and saves, until the schedule stops
    the run -> train()'s summary."""
    config, state, evaluator = self.config, self.state, self.evaluator
    with run_schedule.RunSchedule(config, self.steps_per_execution, self.platform.vote,
                                  evaluator.selection) as schedule:
      progress = training_log.TrainingLog(
          schedule, lambda step: float(state.lr_schedule(step - 1)), self.log,
          training_log.summary_writers(config.model_dir) if self.is_chief else None)
      step = state.step
      self.log(f"training {self.problem.name} on {self.num_replicas} replica(s) "
               f"({self.platform.name}), {self.hparams.batch_size} tokens a step = "
               f"{self.num_replicas} x {config.grad_accum_steps} micro-batches of "
               f"{self.micro_batch_tokens}; step {step} -> {config.train_steps}")
      stop = schedule.stop_at_start(step)
      while not stop and step < config.train_steps:
        n = schedule.steps_until_event(step)
        if state.lr_scale is not None:
          state.lr_scale.assign(schedule.learning_rate_factor())
        loss, tokens, grad_norm = self.run_steps(n)
        if not math.isfinite(loss):
          raise TrainerError(
              f"loss became {loss} between steps {step} and {step + n}; stopped without "
              f"saving (last good checkpoint: {state.latest_checkpoint or 'none'}). Lower "
              "learning_rate or raise warmup_steps")
        step += n
        progress.add(step, n, loss, tokens, grad_norm)
        if schedule.evaluates_at(step):
          evaluator.evaluate_at(step, state, progress)
        stop, save = schedule.after(step)
        if save:
          state.save()
      if stop:
        self.log(stop.line)
        if stop.by_clock and config.eval_steps and progress.eval_step != step:
          evaluator.evaluate_at(step, state, progress)  # The final evaluation promised.
        stop = schedule.ended(step, stop)
      progress.close()
    return {"step": state.step, "losses": progress.history, "stopped": stop and stop.kind,
            "loss": progress.history[-1][1] if progress.history else None,
            "eval": progress.eval_metrics,
            "best": evaluator.selection.record() if evaluator.selection else None}


def _train_cache_of(saved, problem):
  """Whether the training pipeline keeps examples in memory: only to resume a run started
  before that was dropped. Its checkpoints hold the cache in the iterator's state (why it was
  dropped: bench/checkpoint_size.py), and an iterator state restores only into the same
  pipeline. run.json's "train_cache" says; a run.json without it is of that older layout."""
  if not saved.info:
    return False
  return bool(saved.info.get("train_cache", getattr(problem, "cache_in_memory", False)))
