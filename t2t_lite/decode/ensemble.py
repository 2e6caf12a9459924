"""Several models decoded as one (fairseq's --path a:b, Marian's --models): at every step the
search reads the average of their next-token distributions, log(mean_m P_m(y | prefix)), each
model running on its own key/value cache. Models must share the vocabulary (checked where they
are loaded, t2t_lite/decode/loading.py).

`Ensemble` has the methods of a Transformer that decoding calls (encode, init_cache,
output_rows, decode_step, alignment_attention, and the call that scores targets), so the
search, sampling, forced decoding and alignments take one model or an ensemble alike. Its
"logits" are log-probabilities, which a softmax maps back to the averaged distribution.
"""
import math

import tensorflow as tf


class Ensemble:
  """The models of `models` (built Transformers of one vocabulary), as one."""

  def __init__(self, models):
    self.models = list(models)
    first = self.models[0]
    self.vocab_size, self.compute_dtype = first.vocab_size, first.compute_dtype
    # Output positions: the most any member can take (learned positions end at max_length).
    self.hparams = min((m.hparams for m in self.models),
                       key=lambda hp: hp.max_length if hp.position_encoding == "learned"
                       else math.inf)

  def _average(self, logits):
    """[M] logits [..., V] -> log of the mean of their softmaxes, float32 [..., V]."""
    logprobs = tf.stack([tf.nn.log_softmax(tf.cast(x, tf.float32)) for x in logits])
    return tf.reduce_logsumexp(logprobs, axis=0) - math.log(len(logits))

  def encode(self, inputs, training=False):
    """-> ([M] encoder outputs [B, S, D], padding mask bool [B, S])."""
    encoded = [m.encode(inputs, training=training) for m in self.models]
    return [output for output, _ in encoded], encoded[0][1]

  def init_cache(self, encoder_outputs, inputs_mask, max_decode_length=None):
    return [m.init_cache(e, inputs_mask, max_decode_length)
            for m, e in zip(self.models, encoder_outputs)]

  def output_rows(self, ids):
    """Each member's pre-softmax rows of a shortlist."""
    return [m.output_rows(ids) for m in self.models]

  def decode_step(self, ids, index, cache, cache_rows=None, output_rows=None):
    """ids [B] -> (averaged log-probabilities [B, V], each model's updated cache)."""
    rows = output_rows or [None] * len(self.models)
    steps = [m.decode_step(ids, index, c, cache_rows=cache_rows, output_rows=r)
             for m, c, r in zip(self.models, cache, rows)]
    return self._average([logits for logits, _ in steps]), [c for _, c in steps]

  def alignment_attention(self, targets, encoder_outputs, inputs_mask):
    """The members' mean of Transformer.alignment_attention: float32 [B, T, S]."""
    weights = [m.alignment_attention(targets, e, inputs_mask)
               for m, e in zip(self.models, encoder_outputs)]
    return tf.add_n(weights) / len(weights)

  def __call__(self, features, training=False):
    """{"inputs", "targets"} -> averaged log-probabilities [B, T, V] (teacher forcing)."""
    return self._average([m(features, training=training) for m in self.models])
