"""The state of a training run, with one owner: the model, the optimizer, the moving averages of
the weights, the dropout seed states, the best-model record and the input's position. It is
built once (`TrainState(...)`), restored or started once (`restore_or_start`) and saved through
one call (`save`), like flax's TrainState with its restore_checkpoint and OpenNMT-tf's
Checkpoint restored before its Trainer runs.

A checkpoint is tf.train.Checkpoint(model, optimizer, rng, [train_iterator], [selection],
[ema]) written by the run directory's CheckpointManager (t2t_lite/rundir/checkpoints.py, which
owns the files: their names, the newest that reads, a save that failed). The model is built
under the strategy's scope in the run's precision; its weights and the averages stay float32.

Why here and not in t2t_lite/rundir/: what it holds is the training's own (the optimizer, the
averages, the fine-tuning source read back through decoding), and the run directory's layer
sits below both decoding and training.
"""
import contextlib
import os
import re

import keras
import tensorflow as tf

from t2t_lite import errors
from t2t_lite.modeling import mixed_precision
from t2t_lite.modeling.architectures import build_model
from t2t_lite.rundir import checkpoints, run_files
from t2t_lite.train import ema, optimization, warm_start
from t2t_lite.train.train_config import TrainerError


class TrainState:
  """Everything a training run's checkpoints hold, and the two ways to make it current.

  Args:
    hparams: the run's HParams; vocab_size: its vocabulary's size.
    config: the TrainConfig (model_dir, seed, mixed_precision, ema_decay, keep_checkpoints,
      cooldown_minutes, grad_accum_steps).
    platform: the distribute.Platform it trains on (strategy, which worker writes, whether the
      input's position can be checkpointed).
    selection: the run's model_selection.ModelSelection (its record is saved too), or None.
    lease: the model_dir's lease.Lease, checked before every save (None: a worker that does
      not write).
    tables: what the model is built with from its problem's vocabulary (source_slots or spans,
      architectures.build_model's keywords).
  """

  def __init__(self, hparams, vocab_size, config, platform, selection=None, lease=None,
               tables=None):
    self.config, self.platform, self.selection, self.lease = config, platform, selection, lease
    with mixed_precision.building(config.mixed_precision), platform.strategy.scope():
      self.model = build_model(hparams, vocab_size, seed=config.seed, **(tables or {}))
      self.ema = config.ema_decay and ema.WeightAverage(self.model.trainable_variables,
                                                         config.ema_decay)
      # The wall-clock cooldown's factor of the learning rate (RunSchedule sets it).
      self.lr_scale = (tf.Variable(1.0, trainable=False, name="lr_scale")
                       if config.cooldown_minutes else None)
      self.lr_schedule = optimization.TransformerSchedule.of(hparams, self.lr_scale)
      optimizer = optimization.make_optimizer(hparams, self.lr_schedule)
      if config.mixed_precision == "fp16":
        optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
      self.optimizer = optimizer
      self.optimizer.build(self.model.trainable_variables)
    self.hparams = hparams
    self.iterator = self._input_fn = self._checkpoint = self._manager = None

  @property
  def step(self):
    """Optimizer steps taken (what a checkpoint is numbered by)."""
    return int(self.optimizer.iterations.numpy())

  @property
  def latest_checkpoint(self):
    return self._manager.latest_checkpoint if self._manager else None

  def open_input(self, input_fn):
    """The training input, from its start: input_fn(input_context) -> tf.data.Dataset. Made
    before anything is written, so that data that does not read is refused first."""
    self._input_fn = input_fn
    self.iterator = self.platform.train_iterator(input_fn, 0)

  def fine_tuning_source(self, init_from, pieces, log=print):
    """What restore_or_start starts from besides a checkpoint: the run (or checkpoint)
    `init_from` checked against this run's architecture, read only (warm_start.load_source);
    `pieces`: this run's vocabulary. None when there is nothing to fine-tune from, or when
    model_dir has checkpoints already: a fine-tuned run resumes like any other, and says so. A
    source inside model_dir itself is refused: the run would start from its own weights."""
    model_dir = self.config.model_dir
    if not init_from:
      return None
    inside = os.path.normpath(init_from)
    if inside == os.path.normpath(model_dir) or inside.startswith(
        os.path.join(os.path.normpath(model_dir), "")):
      raise TrainerError(
          f"--init_from {init_from} is inside --model_dir {model_dir}: to resume the run, "
          "leave out --init_from; to fine-tune from it, give a new --model_dir")
    if checkpoints.list_checkpoints(model_dir):
      log(f"--init_from {init_from} is not used: {model_dir} has checkpoints and the run "
          "resumes from them (a fine-tuned run starts from its source once)")
      return None
    return warm_start.load_source(init_from, self.hparams, pieces)

  # ------------------------------------------------------------------ restore or start
  def restore_or_start(self, source=None, log=print):
    """Makes the state current: model_dir's newest checkpoint that reads (one that does not is
    named in a warning and the previous one tried), else the fine-tuning `source`'s weights
    (fine_tuning_source; step 0, a new optimizer), else the fresh weights built with the seed.
    Restored, the input goes on where the checkpoint left it: its saved position or, on a
    platform that cannot save it (or when the data files that position names have moved),
    past the batches the restored steps used. Logs what it did -> the step the run goes on
    from. Call it once, with the lease held."""
    config, platform = self.config, self.platform
    weights = {run_files.MODEL: self.model, "optimizer": self.optimizer,
               # Dropout seed states: keras layers hold them as non-trainable variables that
               # tf.train.Checkpoint does not reach through the layers.
               "rng": [v.value for v in self.model.non_trainable_variables]}
    # What a run of an earlier t2t-lite did not save: restored where the checkpoint has it.
    optional = {"selection": self.selection.checkpoint_objects()} if self.selection else {}
    averages = {run_files.EMA: self.ema.averages} if self.ema else {}
    position = {"train_iterator": self.iterator} if platform.saves_input_position else {}
    lost_position = []

    def restore(path):
      tf.train.Checkpoint(**weights).restore(path).assert_existing_objects_matched()
      tf.train.Checkpoint(**optional).restore(path).expect_partial()
      if self.ema and not checkpoints.restore_averages(self.ema.averages, path):
        self.ema.reset()  # A run that kept no averages before: they start here.
      del lost_position[:]
      try:
        tf.train.Checkpoint(**position).restore(path).assert_existing_objects_matched()
      except tf.errors.NotFoundError as e:  # A data file the saved position names is gone.
        gone = re.search(r"iterator from checkpoint: (.+?); No such file", str(e))
        lost_position.append(gone.group(1) if gone else errors.reason(e))

    if platform.is_chief:
      checkpoints.remove_stale_temp_dirs(config.model_dir, log)
    restored = checkpoints.restore_newest_readable(
        restore, config.model_dir, lambda message: log(f"WARNING: {message}"))
    if restored is not None:
      log(f"restored {restored} (step {self.step})")
      if self.step and (lost_position or not position):
        # Each step took grad_accum_steps batches per replica of this host's pipeline.
        consumed = self.step * platform.local_replicas * config.grad_accum_steps
        if lost_position:
          log(f"WARNING: the input's position saved in {restored} names data that is gone "
              f"({lost_position[0]}; did the data_dir move?): the input skips the {consumed} "
              "batches its steps used instead")
        self.iterator = platform.train_iterator(self._input_fn, consumed)
        position = {"train_iterator": self.iterator} if position else {}
    elif source is not None:
      log(warm_start.apply(self.model, source))
      if self.ema:
        self.ema.reset()
    self._checkpoint = tf.train.Checkpoint(**weights, **position, **optional, **averages)
    self._manager = checkpoints.manager(
        self._checkpoint, platform.checkpoint_directory(config.model_dir),
        config.keep_checkpoints)
    return self.step

  # ------------------------------------------------------------------ save
  def save(self):
    """Saves ckpt-<step> unless the newest checkpoint is of this step already -> its path.
    Never over another trainer's checkpoints (the lease is checked first); a full disk (or
    any write error) is a one-line RunFailure naming the directory and what a checkpoint of
    this run takes, the last good checkpoint left as it was."""
    step, last = self.step, self._manager.latest_checkpoint
    if last is not None and checkpoints.checkpoint_step(last) == step:
      return last
    if self.lease is not None:
      self.lease.check()
    try:
      path = self._manager.save(checkpoint_number=step)
    except tf.errors.OpError as e:
      checkpoints.remove_stale_temp_dirs(self._manager.directory, lambda line: None)
      raise checkpoints.save_failure(e, step, self._manager.directory, last,
                                     self._checkpoint) from None
    if not self.platform.is_chief:
      tf.io.gfile.rmtree(self._manager.directory)
    return path

  def averaged(self):
    """While entered, the model's weights are what evaluation and the best model use: the
    moving averages when the run keeps them."""
    return self.ema.swapped() if self.ema else contextlib.nullcontext()

  def save_weights(self, directory):
    """The weights `averaged()` gives as directory/ckpt-<step> (a best model). Every worker
    takes part in a save; the chief's is the one kept."""
    target = self.platform.checkpoint_directory(directory)
    with self.averaged():
      checkpoints.save_model(self.model, target, self.step)
    if not self.platform.is_chief:
      tf.io.gfile.rmtree(target)
