"""A span parser's decoding (modeling/span_parser.py): the best tree by CKY over its span
scores, in the graph, written as the linearized tree a translating parser writes ("(S (NP NNP
NNP )NP (VP VBZ )VP . )S"), so that what follows (trees over the sentence's words, EVALB, the
export) is the same for both parsers.

A tree is a full binary bracketing of the fenceposts 0..n; each node is labelled with its span's
best label when that label is more likely than "no constituent" (its log-odds `score` > 0),
else it is a helper node that the output leaves out (n-ary constituents are binarized that
way); the root (0, n) is always labelled. The best tree maximises score(0, n) plus the other
nodes' max(score, 0): Stern et al. (2017) and Kitaev and Klein (2018) decode the same way.

Every loop is a tf.while_loop over span lengths whose body has the same shapes at every step
(each span length is computed for every start, the ones past the sentence masked): the graph is
small, works for lengths known only at run time, and XLA compiles it (static shapes, a TPU).
Charts are indexed by (start, length), so that a length's spans are one column.

Shapes: B sentences, N1 fenceposts (N + 1), C labels (no constituent first), K brackets of the
longest label, L output tokens.
"""
import tensorflow as tf

from t2t_lite.data.tokenizers import EOS_ID, PAD_ID
from t2t_lite.decode.beam_search import NEG_INF


def best_trees(span_log_probs, lengths, offset=0.0):
  """span_log_probs float [B, N1, N1, C] (entry [b, i, j] the span (i, j), class 0 no
  constituent; only 0 <= i < j <= lengths[b] are read), lengths int32 [B] (words; 0 for a
  padding row) -> (labels int32 [B, N1, N1]: each labelled node's class, 0 elsewhere; scores
  float32 [B]: the best tree's objective). offset: added to every span's log-odds (> 0: more
  brackets). Ties: the smallest label, the shortest left child."""
  log_probs = tf.cast(span_log_probs, tf.float32)
  best = tf.reduce_max(log_probs[..., 1:], axis=-1)
  label = tf.argmax(log_probs[..., 1:], axis=-1, output_type=tf.int32) + 1  # [B, N1, N1]
  score = best - log_probs[..., 0] + offset  # [B, N1, N1] log-odds, by (i, j)
  n1 = tf.shape(score)[1]
  lengths = tf.cast(lengths, tf.int32)
  score_by_length = _by_length(score, n1)  # [B, N1 (i), N1 (length)]
  chart, split = _fill(score_by_length, lengths, n1)
  in_tree = _nodes(split, lengths, n1)  # [B, N1, N1] by (i, length)
  root = tf.logical_and(tf.equal(tf.range(n1)[None, :, None], 0),
                        tf.equal(tf.range(n1)[None, None, :], lengths[:, None, None]))
  labelled = in_tree & ((score_by_length > 0) | root) & (lengths[:, None, None] > 0)
  labels = tf.where(_by_span(labelled, n1), label, 0)
  scores = tf.where(lengths > 0, tf.gather(chart[:, 0], lengths, batch_dims=1), 0.0)
  return labels, scores


def _by_length(x, n1):
  """[B, N1, N1] by (i, j) -> [B, N1, N1] by (i, j - i) (0 past the last fencepost)."""
  i, length = tf.range(n1)[:, None], tf.range(n1)[None, :]
  j = i + length
  flat = tf.reshape(x, [tf.shape(x)[0], -1])
  taken = tf.gather(flat, i * n1 + tf.minimum(j, n1 - 1), axis=1)  # [B, N1, N1]
  return tf.where(j < n1, taken, tf.zeros_like(taken))


def _by_span(x, n1):
  """[B, N1, N1] by (i, length) -> by (i, j) (False / 0 where j < i)."""
  i, j = tf.range(n1)[:, None], tf.range(n1)[None, :]
  flat = tf.reshape(x, [tf.shape(x)[0], -1])
  taken = tf.gather(flat, i * n1 + tf.maximum(j - i, 0), axis=1)
  return tf.where(j >= i, taken, tf.zeros_like(taken))


def _fill(score, lengths, n1):
  """CKY bottom-up: score [B, N1 (i), N1 (length)] -> (chart float32, split int32, both by
  (i, length)): the best subtree's objective of each span and its left child's length."""
  batch = tf.shape(score)[0]
  i = tf.range(n1)[:, None]  # [N1, 1]
  m = tf.range(1, n1)[None, :]  # [1, N1 - 1]: a left child's length
  own_root = tf.equal(tf.range(n1)[None, :], 0)  # [1, N1]: spans starting at 0

  def body(length, chart, split):
    # Left child (i, m), right child (i + m, length - m), for 1 <= m < length.
    valid = (m < length) & (i + m < n1)  # [N1, N1 - 1]
    right_index = tf.minimum(i + m, n1 - 1) * n1 + tf.maximum(length - m, 0)
    flat = tf.reshape(chart, [batch, -1])
    inner = chart[:, :, 1:] + tf.gather(flat, right_index, axis=1)  # [B, N1, N1 - 1]
    inner = tf.where(valid[None], inner, NEG_INF)
    children = tf.where(length > 1, tf.reduce_max(inner, axis=-1), 0.0)  # [B, N1]
    best_m = tf.argmax(inner, axis=-1, output_type=tf.int32) + 1
    own = score[:, :, length]  # [B, N1]
    is_root = own_root & tf.equal(length, lengths[:, None])
    value = tf.where(is_root, own, tf.maximum(own, 0.0)) + children
    column = tf.one_hot(length, n1, dtype=tf.float32)[None, None, :]  # [1, 1, N1]
    chart += value[:, :, None] * column
    split += best_m[:, :, None] * tf.cast(column, tf.int32)
    return length + 1, chart, split

  zeros = tf.zeros([batch, n1, n1])
  _, chart, split = tf.while_loop(
      lambda length, *_: length <= tf.reduce_max(lengths), body,
      (tf.constant(1), zeros, tf.zeros([batch, n1, n1], tf.int32)))
  return chart, split


def _nodes(split, lengths, n1):
  """Top-down from each root (0, n): bool [B, N1 (i), N1 (length)], the best tree's nodes."""
  batch = tf.shape(split)[0]
  size = batch * n1 * n1
  rows = tf.range(batch)[:, None] * n1 * n1  # [B, 1]
  i = tf.range(n1)[None, :]  # [1, N1]
  start = tf.one_hot(lengths, n1, on_value=True, off_value=False)[:, None, :]  # (0, n)
  start = tf.logical_and(start, tf.equal(tf.range(n1), 0)[None, :, None])

  def body(length, nodes):
    active = nodes[:, :, length] & (length > 1)  # [B, N1]
    m = split[:, :, length]  # [B, N1]
    flat = tf.reshape(tf.cast(nodes, tf.int32), [-1])
    flat = tf.concat([flat, [0]], axis=0)  # one slot more: where inactive spans write
    for start_i, child_length in ((i, m), (i + m, length - m)):
      index = rows + tf.minimum(start_i, n1 - 1) * n1 + tf.clip_by_value(child_length, 0, n1 - 1)
      index = tf.where(active, index, size)
      flat = tf.tensor_scatter_nd_max(flat, tf.reshape(index, [-1, 1]),
                                      tf.ones([batch * n1], tf.int32))
    return length - 1, tf.ensure_shape(tf.reshape(flat[:size], tf.shape(nodes)) > 0, nodes.shape)

  _, nodes = tf.while_loop(lambda length, _: length > 1, body,
                           (tf.reduce_max(lengths), start))
  return nodes


def linearize(labels, tags, lengths, open_ids, close_ids, max_length=None):
  """labels int32 [B, N1, N1] (best_trees'), tags int32 [B, N] (each word's slot token id),
  lengths int32 [B], open_ids / close_ids int32 [C, K] (each label's opening brackets outermost
  first and closing ones innermost first, 0-padded; row 0 unused) -> ids int32 [B, L]: the
  linearized trees, each ending in EOS, 0-padded. At each fencepost p = 0..n: the brackets
  closing there (the shortest span first), those opening there (the longest first), then word
  p's tag. L: the longest tree's tokens + 1, or `max_length` (static shapes): a longer tree is
  then cut to max_length - 1 tokens before its EOS (not a tree any more; the repair of outputs
  makes one of it)."""
  labels, lengths = tf.convert_to_tensor(labels, tf.int32), tf.convert_to_tensor(lengths, tf.int32)
  batch, n1 = tf.shape(labels)[0], tf.shape(labels)[1]
  depth = tf.shape(open_ids)[1]
  n = tf.shape(tags)[1]
  i = tf.range(n1)[:, None, None]  # [N1, 1, 1]
  j = tf.range(n1)[None, :, None]
  r = tf.range(depth)[None, None, :]  # [1, 1, K]
  width = (n1 * 3 + 3) * n1 * depth  # every key below it

  def brackets(ids, fencepost, group, order):
    token = tf.gather(ids, labels)  # [B, N1, N1, K]
    valid = (labels[..., None] > 0) & (token > 0)
    key = ((fencepost * 3 + group) * n1 + order) * depth + r
    key = tf.where(valid, tf.broadcast_to(key, tf.shape(token)), width)
    return tf.reshape(token, [batch, -1]), tf.reshape(key, [batch, -1])

  closing = brackets(close_ids, j, 0, j - i)  # at j, shortest first
  opening = brackets(open_ids, i, 1, n1 - (j - i))  # at i, longest first
  words = tf.range(n)[None, :]
  tag_key = tf.where(words < lengths[:, None], ((words * 3 + 2) * n1) * depth, width)
  tokens = tf.concat([closing[0], opening[0], tags], axis=1)  # [B, E]
  keys = tf.concat([closing[1], opening[1], tf.broadcast_to(tag_key, tf.shape(tags))], axis=1)
  order = tf.argsort(keys, axis=1, stable=True)
  tokens = tf.gather(tokens, order, batch_dims=1)
  count = tf.reduce_sum(tf.cast(keys < width, tf.int32), axis=1)  # [B]
  size = tf.reduce_max(count) + 1 if max_length is None else max_length
  tokens = tf.pad(tokens, [[0, 0], [0, tf.maximum(size - tf.shape(tokens)[1], 0)]])[:, :size]
  count = tf.minimum(count, size - 1)
  position = tf.range(size)[None, :]
  return tf.where(position < count[:, None], tokens,
                  tf.where(tf.equal(position, count[:, None]), EOS_ID, PAD_ID))
