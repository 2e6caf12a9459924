"""Forced decoding: what the model says of given outputs. Their log-probability, and the score
beam search gives an output, log P(Y) / lp(|Y|) with section 6.1's length penalty: the one
formula that t2t-lite-score writes and that the search's own scores are checked against.

Shapes: B sentences, S source and T output length, V vocabulary.
"""
import tensorflow as tf

from t2t_lite.data.tokenizers import PAD_ID
from t2t_lite.decode import beam_search, search


def scores(model, inputs, outputs, alpha):
  """inputs int32 [B, S]; outputs int32 [B, T], each ending in EOS (0s after it) ->
  {"logprob": log P(outputs | inputs) float32 [B] (PAD excluded from the softmax, as in the
  search), "tokens": int32 [B] (EOS included), "score": logprob / lp(tokens) float32 [B]}."""
  outputs = tf.convert_to_tensor(outputs, tf.int32)
  logits = search.without_pad(model({"inputs": inputs, "targets": outputs}, training=False))
  logprobs = tf.gather(tf.nn.log_softmax(logits), outputs, batch_dims=2)  # [B, T]
  real = tf.not_equal(outputs, PAD_ID)
  logprob = tf.reduce_sum(tf.where(real, logprobs, 0.0), axis=1)  # [B]
  tokens = tf.reduce_sum(tf.cast(real, tf.int32), axis=1)  # [B]
  return {"logprob": logprob, "tokens": tokens,
          "score": logprob / beam_search.length_penalty(tokens, alpha)}
