"""What one training step and one evaluation step compute, as functions of their own: the trainer
runs them on every replica, and bench/train_throughput.py times this same training step.

Batch size. A step consumes `grad_accum_steps` micro-batches on every replica. Its loss is the
label-smoothed cross entropy summed over every target token of all those micro-batches, divided
by their total (global) number of target tokens: 2 replicas, or 1 device accumulating 2
micro-batches, take exactly the same step. Dropout too: before each micro-batch every dropout
seed is set from (step, global micro-batch index), so replicas draw different masks and the
masks do not depend on how the batch is split.

Shapes: B sentences, T target length, V vocabulary.
"""
import functools

import keras
import tensorflow as tf

from t2t_lite.modeling import dropout
from t2t_lite.modeling import losses


def _is_loss_scaled(optimizer):
  return isinstance(optimizer, keras.optimizers.LossScaleOptimizer)


def make_micro_gradients(model, optimizer, label_smoothing, jit_compile, rdrop=0.0):
  """-> micro_gradients(batch, tokens): (gradients of loss_sum / tokens, cross-entropy sum) of
  one micro-batch, `tokens` the step's target tokens over all micro-batches and replicas: the
  gradients summed over them are the mean's, with no pass over the gradients to rescale them,
  and the fp16 loss scale sees a mean. With rdrop > 0 the micro-batch runs twice in one forward
  pass (the two copies draw different dropout masks) and the loss is losses.rdrop_loss. A
  tf.function of its own: traced once however many micro-batches a step accumulates."""
  xla_loss = jit_compile is False
  if rdrop:
    loss_fn = functools.partial(losses.xla_rdrop_loss if xla_loss else losses.rdrop_loss,
                                weight=rdrop)
  else:
    loss_fn = losses.xla_smoothed_cross_entropy if xla_loss else losses.smoothed_cross_entropy

  def micro_gradients(batch, tokens):
    if rdrop:
      batch = {key: tf.concat([value, value], 0) for key, value in batch.items()}  # [2B, ...]
    with tf.GradientTape() as tape:
      logits = model(batch, training=True)  # [B, T, V] ([2B, T, V] with rdrop)
      loss_sum, ce_sum = loss_fn(logits, batch["targets"], label_smoothing)
      if not rdrop:
        ce_sum = loss_sum  # the other value is the token count
      loss = loss_sum / tokens
      if _is_loss_scaled(optimizer):
        loss = optimizer.scale_loss(loss)
    return tape.gradient(loss, model.trainable_variables), ce_sum

  return tf.function(micro_gradients, jit_compile=jit_compile, autograph=False)


def make_train_step(model, optimizer, *, label_smoothing, grad_accum_steps=1, num_replicas=1,
                    jit_compile=True, reseed_dropout=True, ema=None, rdrop=0.0):
  """-> step(batches): one optimizer step on this replica -> (loss sum, target tokens, global
  gradient norm), the first two summed over all replicas (the loss: the cross entropy, without
  R-Drop's divergence term).

  Args:
    batches: a tuple of `grad_accum_steps` micro-batches {"inputs", "targets"} for this replica.
    jit_compile: XLA for the forward and backward pass (None: the default, e.g. on TPU).
    reseed_dropout: set the dropout seeds from (step, micro-batch) before each micro-batch
      (the trainer turns it off on TPU; masks then follow the seeds' own counters).
    ema: optional moving averages of the weights (ema.WeightAverage), updated after the step.
    rdrop: R-Drop's weight of the divergence term (hparams rdrop; 0: off).
  Call it inside `strategy.run` (or in a tf.function, for one device). The optimizer must be
  built for model.trainable_variables.
  """
  micro = make_micro_gradients(model, optimizer, label_smoothing, jit_compile, rdrop)
  variables = model.trainable_variables
  seed_states = dropout.seed_states(model) if reseed_dropout else []

  def micro_batch_index(k):
    """Global index of micro-batch k of this replica in the run: (step, replica, k)."""
    replica = tf.distribute.get_replica_context().replica_id_in_sync_group
    replica = tf.reshape(tf.cast(replica, tf.int64), [])  # a [1] tensor in multi-worker
    return (optimizer.iterations * num_replicas + replica) * grad_accum_steps + k

  def step(batches):
    ctx = tf.distribute.get_replica_context()
    # The mean is over ALL target tokens of the step, known before any forward pass.
    count = tf.add_n([tf.reduce_sum(losses.target_weights(batch["targets"]))
                      for batch in batches])
    count = ctx.all_reduce(tf.distribute.ReduceOp.SUM, count)
    grads, loss_sum = None, 0.0
    for k, batch in enumerate(batches):  # grad_accum_steps micro-batches
      if seed_states:
        dropout.reseed(seed_states, micro_batch_index(k))
      g, l = micro(batch, tf.maximum(count, 1.0))
      grads = list(g) if grads is None else [a + b for a, b in zip(grads, g)]
      loss_sum += l
    loss_sum = ctx.all_reduce(tf.distribute.ReduceOp.SUM, loss_sum)
    if num_replicas > 1:
      # The global gradient's norm needs the summed gradient; the optimizer sums again.
      summed = ctx.all_reduce(tf.distribute.ReduceOp.SUM, grads)
      grad_norm = tf.linalg.global_norm(summed)
      grads = [g / num_replicas for g in summed]
    else:
      grad_norm = tf.linalg.global_norm(grads)
    if _is_loss_scaled(optimizer):
      grad_norm /= optimizer.dynamic_scale
    optimizer.apply(grads, variables)
    if ema is not None:
      ema.update(optimizer.iterations)
    return loss_sum, count, grad_norm

  return step


def make_train_loop(strategy, step, next_batches):
  """-> train_fn(iterator, num_steps): `num_steps` steps in one host call -> (loss sum, target
  tokens, gradient norm of the last step). `next_batches(iterator)` gives each replica its
  tuple of micro-batches (see distribute.micro_batch_splitter)."""

  # autograph=False here and in the micro-batch's function: the loop is a tf.while_loop as
  # written, and converting the model's Python to graph code would cost seconds at every
  # start for nothing (it has no tensor-dependent Python control flow).
  @tf.function(autograph=False)
  def train_fn(iterator, num_steps):
    def one_step(i, loss_sum, count, grad_norm):
      l, c, n = strategy.run(step, args=(next_batches(iterator),))
      # Every replica holds the same all-reduced values.
      return (i + 1, loss_sum + strategy.reduce(tf.distribute.ReduceOp.MEAN, l, axis=None),
              count + strategy.reduce(tf.distribute.ReduceOp.MEAN, c, axis=None),
              strategy.reduce(tf.distribute.ReduceOp.MEAN, n, axis=None))

    zero = tf.constant(0.0)
    _, loss_sum, count, grad_norm = tf.while_loop(
        lambda i, *_: i < num_steps, one_step, (tf.constant(0), zero, zero, zero))
    return loss_sum, count, grad_norm

  return train_fn


def make_eval_step(model, strategy, element_spec):
  """-> eval_fn(batch): (unsmoothed cross entropy sum, correct tokens, target tokens) of one
  distributed dev batch, summed over replicas. One trace for every batch shape."""

  def replica_eval(batch):
    logits = model(batch, training=False)  # [B, T, V]
    ce_sum, count = losses.smoothed_cross_entropy(logits, batch["targets"], 0.0)
    correct, _ = losses.token_accuracy(logits, batch["targets"])
    return ce_sum, correct, count

  @tf.function(input_signature=[element_spec], autograph=False)
  def eval_fn(batch):
    values = strategy.run(replica_eval, args=(batch,))
    return [strategy.reduce(tf.distribute.ReduceOp.SUM, v, axis=None) for v in values]

  return eval_fn
