"""Ancestral sampling from a Transformer (e.g. for back-translation): the decoding strategy
beside beam search (OpenNMT-tf keeps its Sampler apart from its BeamSearch), over the same
model, key/value cache and output constraint as `search.beams`.

Shapes: B sentences, N samples a sentence, S source length, L longest output, V vocabulary.
"""
import tensorflow as tf

from t2t_lite.data.tokenizers import EOS_ID, PAD_ID
from t2t_lite.decode import beam_search, processors, search


def sample(model, inputs, *, num_samples, temperature, top_k, top_p, seed, extra_length,
           max_lengths=None, constraint=None, static_shapes=False):
  """Ancestral sampling: inputs int32 [B, S] -> (ids int32 [B, N, L], log P float32 [B, N]).

  Each of the N samples of a sentence draws token after token from the model's distribution,
  its logits divided by `temperature` (towards 0: greedy), restricted to the `top_k` most
  likely tokens (0: all) and to the smallest set of most likely tokens whose probability
  reaches `top_p` (nucleus sampling; 1: all), after the constraint's mask. The draws are
  stateless: the same seed and inputs give the same samples. Scores are log P(Y) of the
  sample under the model (no temperature, no length penalty). Ids end in EOS (or at the
  sentence's maximum length), 0-padded, as in `search.beams`. static_shapes: fixed-size
  key/value buffers, as in `search.beams` (for XLA); a sample never changes rows, so each
  reads its own.
  """
  inputs = tf.convert_to_tensor(inputs, tf.int32)
  batch, n = tf.shape(inputs)[0], num_samples
  rows = tf.repeat(inputs, n, axis=0)  # [B*N, S]: sentence b's samples are rows b*N .. b*N+N-1
  encoder_output, inputs_mask = model.encode(rows, training=False)
  length = search.output_length(model, inputs, extra_length)  # L
  cache = (model.init_cache(encoder_output, inputs_mask, length) if static_shapes
           else model.init_cache(encoder_output, inputs_mask))
  if max_lengths is None:
    max_lengths = tf.reduce_sum(tf.cast(inputs_mask, tf.int32), axis=1) + extra_length
  else:
    max_lengths = tf.repeat(tf.convert_to_tensor(max_lengths, tf.int32), n, axis=0)
  # The beam search's grammar processor, over samples instead of beams (its state [B*N, ...]).
  grammar = None if constraint is None else processors.Grammar(
      constraint.mask_logits, constraint.initial_state(rows, max_lengths))
  mask_state = () if grammar is None else grammar.initial_state(batch * n, 1)

  def body(i, ids, logprobs, done, cache, mask_state):
    previous = tf.gather(ids, tf.maximum(i - 1, 0), axis=1) * tf.cast(i > 0, tf.int32)  # [B*N]
    logits, cache = model.decode_step(previous, i, cache)  # [B*N, V]
    logits = search.without_pad(logits)
    if grammar is not None:
      logits, mask_state = grammar.adjust_logits(previous, i, mask_state, logits)
    token = _draw(logits, temperature, top_k, top_p, tf.stack([seed, i]))  # [B*N]
    token = tf.where(done, PAD_ID, token)
    logprob = tf.gather(tf.nn.log_softmax(logits), token, batch_dims=1)
    logprobs += tf.where(done, 0.0, logprob)
    ids = tf.tensor_scatter_nd_update(  # position i of every row
        ids, tf.stack([tf.range(tf.shape(ids)[0]), tf.fill(tf.shape(token), i)], axis=1), token)
    done = done | tf.equal(token, EOS_ID) | (i + 1 >= max_lengths)
    return i + 1, ids, logprobs, done, cache, mask_state

  count = batch * n
  state = (tf.constant(0), tf.zeros([count, length], tf.int32), tf.zeros([count]),
           tf.zeros([count], tf.bool), cache, mask_state)
  _, ids, logprobs, _, _, _ = tf.while_loop(
      lambda i, ids, logprobs, done, *_: (i < length) & ~tf.reduce_all(done), body, state)
  return (tf.reshape(ids, [batch, n, length]), tf.reshape(logprobs, [batch, n]))


def _draw(logits, temperature, top_k, top_p, seed):
  """One token a row of logits float32 [N, V] -> int32 [N] (see `sample`)."""
  logits = logits / tf.maximum(tf.cast(temperature, tf.float32), 1e-6)
  if top_k:
    kth = tf.math.top_k(logits, top_k).values[:, -1:]  # [N, 1]
    logits = tf.where(logits < kth, beam_search.NEG_INF, logits)
  if top_p < 1.0:
    probs = tf.sort(tf.nn.softmax(logits), direction="DESCENDING")  # [N, V]
    before = tf.cumsum(probs, axis=1, exclusive=True)  # mass of the tokens ranked above
    least = tf.reduce_min(tf.where(before < top_p, probs, 2.0), axis=1, keepdims=True)
    logits = tf.where(tf.nn.softmax(logits) < least, beam_search.NEG_INF, logits)
  return tf.cast(tf.random.stateless_categorical(logits, 1, seed)[:, 0], tf.int32)
