"""Packed batches (tensor2tensor's `_packed` problems): several examples per row, for static shapes.

A padded static-shape batch of short sentences is mostly padding; packing fills each row with
whole examples, one after another, on both sides at once (rows of S source and T target tokens:
Problem.packed_lengths gives the side with fewer tokens a shorter row, so both fill alike).
Each packed row carries, per side, the token ids and two more int32 [S] or [T] features:

  *_segmentation: 1, 2, 3, ... for the row's 1st, 2nd, 3rd example; 0 on padding;
  *_position:     the token's position inside its own example (restarts at 0 for each one).

The model reads them (transformer.py): attention never crosses examples, positions restart, and
the decoder starts every example from the start symbol, so a packed row gives the same logits as
its examples run one by one.

How: examples come in chunks of `chunk` (ragged). A best-fit pass over the chunk's lengths
places each example in the fullest of `open_rows` rows being filled where both its sides fit;
when none has room, the fullest row is closed and the example starts a new one in its place.
Several open rows let later short examples fill the gaps, which one open row (next-fit) cannot.
That pass is a loop over small integers in Python (tf.numpy_function: input pipelines run on
the host); the tokens are then written with one scatter per feature. (The same loop as a
tf.while_loop dispatched ~25 graph ops an example through TensorFlow's executor, whose per-op
cost dominated, and a tf.data `scan` that moved the tokens example by example was slower
still: which is why tensor2tensor packs with a C++ op.) Each chunk's rows are emitted
whole, the last open ones partly filled; no example is dropped.
"""
import numpy as np
import tensorflow as tf

FEATURES = ("inputs", "targets")
OPEN_ROWS = 16
CHUNK = 16384


def _best_fit(sizes, lengths, open_rows):
  """sizes int [N, 2] (tokens per side), lengths (S, T) -> (row [N], offset [N, 2], segment [N]),
  numpy int32: where each example goes. Rows are numbered in the order they were opened."""
  fill = [[0, 0] for _ in range(open_rows)]  # tokens placed per side in each open row
  count = [0] * open_rows  # examples in each open row
  slot_row = list(range(open_rows))  # the row each open slot is filling
  next_row = open_rows
  row, offset, segment = [], [], []
  for source, target in sizes.tolist():
    # Best fit: the fullest row with room (the first of equals); none has room: the fullest
    # row is closed and its slot opens row `next_row`.
    used = [s + t for s, t in fill]
    fits = [k for k, (s, t) in enumerate(fill)
            if s + source <= lengths[0] and t + target <= lengths[1]]
    slot = max(fits or range(open_rows), key=used.__getitem__)  # max keeps the first of equals
    if not fits:
      fill[slot], count[slot], slot_row[slot] = [0, 0], 0, next_row
      next_row += 1
    row.append(slot_row[slot])
    offset.append(tuple(fill[slot]))
    count[slot] += 1
    segment.append(count[slot])
    fill[slot] = [fill[slot][0] + source, fill[slot][1] + target]
  return (np.array(row, np.int32), np.array(offset, np.int32).reshape([-1, 2]),
          np.array(segment, np.int32))


def _pack_chunk(chunk, lengths, open_rows):
  """Ragged {"inputs", "targets"} [N, None] -> packed rows, int32 [R, S] and [R, T]."""
  sizes = tf.stack([tf.cast(chunk[side].row_lengths(), tf.int32) for side in FEATURES], axis=1)
  row, offset, segment = tf.numpy_function(
      lambda s: _best_fit(s, lengths, open_rows), [sizes], [tf.int32] * 3, stateful=False)
  row.set_shape([None])  # [N]
  offset.set_shape([None, 2])  # [N, 2]
  segment.set_shape([None])  # [N]
  num_rows = tf.reduce_max(row) + 1
  packed = {}
  for i, side in enumerate(FEATURES):
    ids = chunk[side]  # [N, None]
    example = tf.cast(ids.value_rowids(), tf.int32)  # [tokens]: which example each token is of
    position = tf.cast(tf.range(tf.size(ids.flat_values)), tf.int32) - tf.gather(
        tf.cast(ids.row_starts(), tf.int32), example)
    at = tf.stack([tf.gather(row, example), tf.gather(offset[:, i], example) + position], 1)
    shape = tf.stack([num_rows, lengths[i]])
    for name, values in ((side, ids.flat_values), (f"{side}_segmentation",
                                                   tf.gather(segment, example)),
                         (f"{side}_position", position)):
      packed[name] = tf.scatter_nd(at, tf.cast(values, tf.int32), shape)
  # Slots opened but never written (a short chunk) stay empty: drop them.
  used = tf.reduce_any(packed["targets_segmentation"] > 0, axis=1)
  return {name: tf.boolean_mask(value, used) for name, value in packed.items()}


def pack(ds, lengths, open_rows=OPEN_ROWS, chunk=CHUNK):
  """Examples {"inputs", "targets"}, each side within `lengths` (S, T), -> packed rows
  {"inputs", "inputs_segmentation", "inputs_position": int32 [S], "targets", ...: int32 [T]}
  (see the module docstring)."""
  ds = ds.map(lambda ex: {side: ex[side] for side in FEATURES})
  ds = ds.ragged_batch(chunk)
  ds = ds.map(lambda c: _pack_chunk(c, lengths, open_rows), num_parallel_calls=tf.data.AUTOTUNE)
  return ds.unbatch()


def batch_packed(ds, batch_tokens, lengths, open_rows=OPEN_ROWS, chunk=CHUNK):
  """Examples -> batches of batch_tokens // max(S, T) packed rows, features int32 [B, S] and
  [B, T]: one static shape, at most batch_tokens tokens a side."""
  if batch_tokens < max(lengths):
    raise ValueError(f"batch_tokens={batch_tokens} is smaller than the packed row length "
                     f"{max(lengths)}: a batch could not hold one row")
  rows = batch_tokens // max(lengths)
  return pack(ds, lengths, open_rows, chunk).batch(rows, drop_remainder=True)
