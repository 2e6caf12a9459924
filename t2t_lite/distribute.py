"""Distribution: which tf.distribute strategy runs, which worker writes, and how input and
decisions are shared between workers.

The strategy is chosen, never forked on: the default strategy (one CPU / GPU),
MirroredStrategy (GPUs of one machine), MultiWorkerMirroredStrategy (TF_CONFIG) and TPUStrategy
(Cloud TPU) all run the same step (t2t_lite/train_step.py).
"""
import os

import tensorflow as tf

from t2t_lite.errors import T2TLiteError

STRATEGIES = ("auto", "default", "mirrored", "multi_worker", "tpu")


class DistributeError(T2TLiteError, ValueError):
  """An unknown strategy name (one-line message)."""


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
  raise DistributeError(f"unknown strategy {name!r}; expected one of {', '.join(STRATEGIES)}")


def _cluster_resolver(strategy):
  """The resolver of a MultiWorkerMirroredStrategy with a cluster, else None (one worker)."""
  resolver = getattr(strategy, "cluster_resolver", None)
  if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy) or resolver is None:
    return None
  return resolver


def is_chief(strategy):
  """Only the chief (or worker 0 when there is none) writes model_dir; the other workers of a
  MultiWorkerMirroredStrategy save their (identical) checkpoints to a temp dir they delete."""
  resolver = _cluster_resolver(strategy)
  if resolver is None or resolver.task_type in (None, "chief"):
    return True
  has_chief = "chief" in resolver.cluster_spec().as_dict()
  return resolver.task_type == "worker" and resolver.task_id == 0 and not has_chief


def checkpoint_directory(model_dir, strategy):
  """Where this worker saves checkpoints: model_dir for the chief, else a temp dir in it."""
  if is_chief(strategy):
    return model_dir
  resolver = strategy.cluster_resolver
  return os.path.join(model_dir, f"workertemp_{resolver.task_type}_{resolver.task_id}")


def input_context(strategy):
  """This worker's share of the input: one pipeline per worker (MultiWorkerMirroredStrategy),
  else one for all."""
  resolver = _cluster_resolver(strategy)
  if resolver is None:
    return tf.distribute.InputContext(1, 0, strategy.num_replicas_in_sync)
  cluster = resolver.cluster_spec().as_dict()
  num_chiefs = len(cluster.get("chief", []))
  num_workers = num_chiefs + len(cluster.get("worker", []))
  index = 0 if resolver.task_type == "chief" else resolver.task_id + num_chiefs
  return tf.distribute.InputContext(num_workers, index, strategy.num_replicas_in_sync)


def micro_batch_splitter(strategy, local_replicas, grad_accum_steps):
  """-> next_batches(iterator): for each replica, a tuple of grad_accum_steps micro-batches.

  `iterator` is this worker's plain tf.data iterator (its replicas take consecutive elements),
  or on TPU a distributed iterator (each next() gives every replica one batch)."""
  accum = grad_accum_steps
  is_tpu = isinstance(strategy, tf.distribute.TPUStrategy)
  multi_worker = isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy)

  def next_batches(iterator):
    if is_tpu:
      return tuple(next(iterator) for _ in range(accum))
    elements = [next(iterator) for _ in range(local_replicas * accum)]

    def replica_batches(context):  # Replica r takes elements r*accum ... r*accum+accum-1.
      r = context.replica_id_in_sync_group % local_replicas
      return tuple(elements[r * accum:(r + 1) * accum])

    if local_replicas == 1 and not multi_worker:
      return tuple(elements)
    return strategy.experimental_distribute_values_from_function(replica_batches)

  return next_batches


class WorkerVote:
  """vote(flag) -> True if `flag` is true on any worker: workers decide together when to save
  or stop (on their own clocks they could differ, and a worker left alone would wait forever).
  Every worker must call it at the same points."""

  def __init__(self, strategy, num_workers):
    self.strategy, self.num_workers = strategy, num_workers
    self._sum_fn = None

  def __call__(self, flag):
    if self.num_workers == 1:
      return flag
    if self._sum_fn is None:
      strategy = self.strategy

      @tf.function
      def sum_fn(x):
        value = strategy.run(lambda: tf.identity(x))
        return strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)

      self._sum_fn = sum_fn
    return bool(self._sum_fn(tf.constant(1.0 if flag else 0.0)) > 0)
