"""The platform a run trains on: its tf.distribute strategy, and everything about it that the
trainer needs to know, answered here so that the trainer asks instead of testing which one it is.

The default strategy (one CPU / GPU), MirroredStrategy (GPUs of one machine),
MultiWorkerMirroredStrategy (workers described by TF_CONFIG) and TPUStrategy (Cloud TPU) all run
the same step (t2t_lite/train/steps.py). Where they differ, `Platform` says how:
  static shapes   TPU compiles every step: batches must always have static shapes;
  jit_compile     TPU compiles by itself (jit_compile None); elsewhere --xla decides;
  host calls      TPU runs 100 steps a host call by default, the others 1;
  dropout seeds   reseeded from (step, micro-batch) except on TPU, whose masks follow the seeds'
                  own counters;
  precision       --mixed_precision=auto: the fastest on this hardware (TPU, GPUs or this CPU,
                  with or without XLA), or a resumed run's own;
  input position  saved in checkpoints as a tf.data iterator, except on TPU, whose distributed
                  iterator cannot be saved: a resumed TPU run skips the batches already used;
  workers         which one writes (the chief), each one's share of the input, how they vote.
"""
import dataclasses

import tensorflow as tf

from t2t_lite import errors
from t2t_lite.errors import T2TLiteError
from t2t_lite.modeling import mixed_precision
from t2t_lite.rundir import run_files
from t2t_lite.train.train_config import STRATEGIES


class DistributeError(T2TLiteError, ValueError):
  """An unknown strategy, or hardware or a cluster that is not there (one-line message)."""


def _tpu_strategy(tpu):
  try:
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(tpu=tpu or "local")
    if tpu != "local":
      tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
    return tf.distribute.TPUStrategy(resolver)
  except (tf.errors.OpError, ValueError, RuntimeError) as e:
    raise DistributeError(_no_tpu(tpu, e)) from None


def _no_tpu(tpu, error):
  """The one line of a TPU that was asked for and not found: what was looked for, the cause
  in words (not TensorFlow's op and attribute dump) and only advice not already taken."""
  where = tpu or "local"
  if where == "local":
    cause = ("this TensorFlow has no TPU support (it is not a TPU build)"
             if "ConfigureDistributedTPU" in str(error) else errors.reason(error))
    return (f"--strategy=tpu: no TPU on this machine ({cause}); --tpu=local is for a Cloud TPU "
            "VM with TensorFlow's TPU build; for a TPU elsewhere give --tpu=<name or grpc:// "
            "address>")
  return (f"--strategy=tpu: no TPU found at {where} ({errors.reason(error)}); check the name or "
          "address, or on a Cloud TPU VM use --tpu=local")


def _multi_worker_strategy():
  try:
    strategy = tf.distribute.MultiWorkerMirroredStrategy()
  except ValueError as e:  # TF_CONFIG that is not JSON, or a task not in its cluster
    raise DistributeError(f"--strategy=multi_worker: TF_CONFIG is not valid ({e})") from None
  resolver = strategy.cluster_resolver
  if resolver is None or resolver.task_type is None or not resolver.cluster_spec().as_dict():
    raise DistributeError("--strategy=multi_worker found no cluster: set TF_CONFIG to the "
                          "cluster and this worker's task (JSON, as TensorFlow defines it)")
  return strategy


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
    return _multi_worker_strategy(), name
  if name == "tpu":
    return _tpu_strategy(tpu), name
  raise DistributeError(f"unknown strategy {name!r}; expected one of {', '.join(STRATEGIES)}")


def _cluster_resolver(strategy):
  """The resolver of a MultiWorkerMirroredStrategy with a cluster, else None (one worker)."""
  resolver = getattr(strategy, "cluster_resolver", None)
  if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) or resolver is None:
    return None
  return resolver


def _is_chief(resolver):
  """Only the chief (or worker 0 when there is none) writes model_dir."""
  if resolver is None or resolver.task_type in (None, "chief"):
    return True
  has_chief = "chief" in resolver.cluster_spec().as_dict()
  return resolver.task_type == "worker" and resolver.task_id == 0 and not has_chief


def _input_context(strategy, resolver):
  """This worker's share of the input: one pipeline per worker, else one for all."""
  if resolver is None:
    return tf.distribute.InputContext(1, 0, strategy.num_replicas_in_sync)
  cluster = resolver.cluster_spec().as_dict()
  num_chiefs = len(cluster.get("chief", []))
  num_workers = num_chiefs + len(cluster.get("worker", []))
  index = 0 if resolver.task_type == "chief" else resolver.task_id + num_chiefs
  return tf.distribute.InputContext(num_workers, index, strategy.num_replicas_in_sync)


@dataclasses.dataclass
class Platform:
  """What the trainer asks of the hardware it runs on (see the module docstring)."""
  strategy: tf.distribute.Strategy
  name: str
  compiles_everything: bool  # Every step is XLA-compiled by the platform itself (TPU).
  _resolver: object = None

  def __post_init__(self):
    self.is_chief = _is_chief(self._resolver)
    self.input_context = _input_context(self.strategy, self._resolver)
    self.num_replicas = self.strategy.num_replicas_in_sync
    self.num_workers = self.input_context.num_input_pipelines
    self.local_replicas = self.num_replicas // self.num_workers
    self.vote = WorkerVote(self.strategy, self.num_workers)

  @classmethod
  def make(cls, name="auto", tpu=None, strategy=None):
    """The platform of strategy `name` (`make_strategy`), or of a strategy already made."""
    if strategy is None:
      strategy, name = make_strategy(name, tpu)
    else:
      name = type(strategy).__name__
    return cls(strategy, name, isinstance(strategy, tf.distribute.TPUStrategy),
               _cluster_resolver(strategy))

  def static_shapes(self, xla):
    """Whether training batches are padded to their bucket (one XLA compilation a bucket)."""
    return self.compiles_everything or xla

  def jit_compile(self, xla):
    """The step's jit_compile: None leaves it to a platform that compiles everything."""
    return None if self.compiles_everything else bool(xla)

  def precision(self, asked, xla, model_dir):
    """The run's compute precision and XLA -> (name, why, xla, why_xla): the precision as
    asked; for "auto" the run's own when it resumes (exact resume needs the one it trained in),
    else the fastest on this platform with `xla`, or when `xla` is None (not given) without
    it, and then XLA unless that precision is faster without (mixed_precision.training_xla)."""
    resumed = run_files.read_run(model_dir).info.get("mixed_precision")
    if asked == mixed_precision.AUTO and resumed:
      name, why = resumed, "auto: the precision this run was started in"
    else:
      name, why = mixed_precision.resolve(asked, self.jit_compile(xla) is not False,
                                          tpu=self.compiles_everything)
    if xla is not None:
      return name, why, xla, "asked for"
    machine = mixed_precision.Machine.this(self.compiles_everything)
    return (name, why) + mixed_precision.training_xla(name, machine)

  @property
  def steps_per_execution(self):
    """Optimizer steps per host call when the config leaves it to the platform."""
    return 100 if self.compiles_everything else 1

  @property
  def reseeds_dropout(self):
    return not self.compiles_everything

  @property
  def saves_input_position(self):
    """Whether the training input iterator goes into checkpoints (else it skips on resume)."""
    return not self.compiles_everything

  def train_iterator(self, dataset_fn, consumed_batches):
    """The iterator feeding this worker's replicas, past the `consumed_batches` already used: a
    plain tf.data iterator (checkpointable), or a distributed one (see the module doc)."""
    if self.saves_input_position:
      dataset = dataset_fn(self.input_context)
      # No skip op at 0: a saved position restores only into the pipeline it was saved from.
      return iter(dataset.skip(consumed_batches) if consumed_batches else dataset)
    return iter(self.strategy.distribute_datasets_from_function(
        lambda context: dataset_fn(context).skip(consumed_batches)))

  def checkpoint_directory(self, model_dir):
    """Where this worker saves checkpoints: model_dir for the chief, else a temp dir in it that
    it deletes after each save (all workers must take part in a save)."""
    if self.is_chief:
      return model_dir
    return run_files.worker_temp_dir(model_dir, self._resolver.task_type, self._resolver.task_id)

  def micro_batch_splitter(self, grad_accum_steps):
    """-> next_batches(iterator): for each replica, a tuple of grad_accum_steps micro-batches.

    With a plain iterator this worker's replicas take consecutive elements; a distributed
    iterator gives every replica one batch per next()."""
    accum, local_replicas, strategy = grad_accum_steps, self.local_replicas, self.strategy
    distributed_input = not self.saves_input_position
    one_replica = self.num_replicas == 1 and self._resolver is None

    def next_batches(iterator):
      if distributed_input:
        return tuple(next(iterator) for _ in range(accum))
      elements = [next(iterator) for _ in range(local_replicas * accum)]

      def replica_batches(context):  # Replica r takes elements r*accum ... r*accum+accum-1.
        r = context.replica_id_in_sync_group % local_replicas
        return tuple(elements[r * accum:(r + 1) * accum])

      if one_replica:
        return tuple(elements)
      return strategy.experimental_distribute_values_from_function(replica_batches)

    return next_batches


class WorkerVote:
  """vote(flags) -> flags, each True if it is true on any worker: workers decide together when
  to save or stop (on their own clocks they could differ, and a worker left alone would wait
  forever). One all-reduce for all the flags. Every worker must call it at the same points."""

  def __init__(self, strategy, num_workers):
    self.strategy, self.num_workers = strategy, num_workers
    self._sum_fn = None

  def __call__(self, flags):
    flags = [bool(flag) for flag in flags]
    if self.num_workers == 1:
      return flags
    if self._sum_fn is None:
      strategy = self.strategy

      @tf.function
      def sum_fn(x):
        value = strategy.run(lambda: tf.identity(x))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)

      self._sum_fn = sum_fn
    totals = self._sum_fn(tf.constant([1.0 if flag else 0.0 for flag in flags]))
    return [bool(total > 0) for total in totals.numpy()]
