"""The input pipeline: cached TFRecords of token ids -> token-bucketed batches.

Shapes: B = examples in a batch, S = source length, T = target length (both padded with 0).

  files -> shard by worker -> parse -> [cache] -> drop longer than max_length -> shuffle
        -> repeat -> group by length into geometric buckets -> pad -> prefetch

Bucketing follows tensor2tensor's `data_reader`: bucket upper bounds 8, 9, 10, ... growing by
x1.1 up to `max_length`; a batch of bucket `u` holds `batch_tokens // u` examples, so every batch
has at most `batch_tokens` source tokens and at most `batch_tokens` target tokens (padding
included). An example's length is max(source length, target length), EOS included.

`static_shapes=True` (TPU / XLA) pads both sides to the bucket's upper bound and drops partial
batches, so only one shape per bucket is ever produced. `packed_lengths` replaces buckets by
packed rows (packing.py): one shape, several examples per row.
"""
import tensorflow as tf

from t2t_lite.data import packing
from t2t_lite.errors import reason

_FEATURES = ("inputs", "targets")


def serialize_example(inputs, targets):
  """Two lists of ids -> a serialized tf.train.Example."""
  feature = {
      name: tf.train.Feature(int64_list=tf.train.Int64List(value=ids))
      for name, ids in zip(_FEATURES, (inputs, targets))}
  # deterministic: map entries in key order, so that the bytes are the same in every process.
  return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString(
      deterministic=True)


def _parse(serialized):
  """A serialized example -> {"inputs": int32 [S], "targets": int32 [T]}."""
  spec = {name: tf.io.VarLenFeature(tf.int64) for name in _FEATURES}
  parsed = tf.io.parse_single_example(serialized, spec)
  return {name: tf.cast(tf.sparse.to_dense(parsed[name]), tf.int32) for name in _FEATURES}


def read_records(files, num_shards=1, shard_index=0):
  """Examples {"inputs": int32 [S], "targets": int32 [T]} from TFRecord files, in file order.

  With several workers (`num_shards` > 1) each reads whole files when there are enough of them,
  otherwise every `num_shards`-th record; the shards are disjoint and cover all the data.
  """
  files = sorted(files)
  if not 0 <= shard_index < num_shards:
    raise ValueError(f"shard_index={shard_index} is not in [0, num_shards={num_shards})")
  by_file = len(files) >= num_shards
  ds = tf.data.Dataset.from_tensor_slices(files)
  if by_file:
    ds = ds.shard(num_shards, shard_index)
  ds = ds.interleave(tf.data.TFRecordDataset, cycle_length=min(len(files), 4),
                     num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  if not by_file:
    ds = ds.shard(num_shards, shard_index)
  return ds.map(_parse, num_parallel_calls=tf.data.AUTOTUNE)


def first_damaged_file(files):
  """(path, reason) of the first TFRecord file that does not read to its end with valid
  checksums and examples, or (None, None). Reads everything: for error paths only."""
  for path in files:
    try:
      for _ in tf.data.TFRecordDataset(path).map(_parse):
        pass
    except (tf.errors.DataLossError, tf.errors.InvalidArgumentError) as e:
      return path, reason(e)
  return None, None


def example_length(example):
  """max(len(inputs), len(targets)): the length an example is bucketed and filtered by."""
  return tf.maximum(tf.shape(example["inputs"])[0], tf.shape(example["targets"])[0])


def bucket_upper_bounds(max_length, min_length=8, step=1.1):
  """tensor2tensor's geometric buckets: [8, 9, ..., max_length], each ~x1.1 the previous."""
  bounds, x = [], min_length
  while x < max_length:
    bounds.append(x)
    x = max(x + 1, int(x * step))
  return bounds + [max_length]


def batch_by_length(ds, batch_tokens, max_length, static_shapes=False, drop_remainder=False):
  """Examples (none longer than max_length) -> batches of at most `batch_tokens` per side."""
  if batch_tokens < max_length:
    raise ValueError(f"batch_tokens={batch_tokens} is smaller than max_length={max_length}: "
                     "a batch could not hold the longest example")
  bounds = bucket_upper_bounds(max_length)
  batch_sizes = [batch_tokens // u for u in bounds]
  # tf.data buckets are [boundary[i-1], boundary[i]); the last one (above max_length) stays empty.
  return ds.bucket_by_sequence_length(
      example_length, bucket_boundaries=[u + 1 for u in bounds],
      bucket_batch_sizes=batch_sizes + [1], pad_to_bucket_boundary=static_shapes,
      drop_remainder=static_shapes or drop_remainder)


def pipeline(files, batch_tokens, max_length, training, *, seed=None, num_shards=1,
             shard_index=0, static_shapes=False, cache=False, shuffle_buffer=20000,
             packed_lengths=None, example_fn=None):
  """The full pipeline over cached TFRecord `files`: batches {"inputs": int32 [B, S],
  "targets": int32 [B, T]}.

  Args:
    batch_tokens: token budget of one batch (per replica / micro-batch; the caller divides the
      global batch size).
    max_length: examples longer than this are dropped (the caller reports how many).
    training: shuffle and repeat forever; otherwise one pass in file order.
    seed: set for a deterministic order (also makes tf.data deterministic); None = fastest.
    num_shards, shard_index: this worker's share for multi-worker training.
    static_shapes: pad to bucket bounds and drop partial batches (TPU / XLA).
    cache: keep the parsed examples in memory after the first pass (small datasets).
    packed_lengths: (S, T) for packed batches instead of buckets (training only, see
      packing.py): batch_tokens // T rows, each example within both lengths.
    example_fn: fn(index, example) -> example, applied to each training example after the
      shuffle, with its index in the stream (e.g. word_dropout.py's, whose draws are stateless).
  """
  ds = read_records(files, num_shards, shard_index)
  if cache:
    ds = ds.cache()
  ds = ds.filter(lambda ex: example_length(ex) <= max_length)
  if packed_lengths:
    if not training:
      raise ValueError("packed batches are for training only (evaluation keeps examples apart)")
    # Problem.packed_lengths keeps each side's longest example within its length.
    ds = ds.filter(lambda ex: tf.logical_and(
        tf.shape(ex["inputs"])[0] <= packed_lengths[0],
        tf.shape(ex["targets"])[0] <= packed_lengths[1]))
  if training:
    ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True).repeat()
    if example_fn:
      ds = ds.enumerate().map(example_fn, num_parallel_calls=tf.data.AUTOTUNE)
  if packed_lengths:
    ds = packing.batch_packed(ds, batch_tokens, packed_lengths)
  else:
    ds = batch_by_length(ds, batch_tokens, max_length, static_shapes)
  options = tf.data.Options()
  options.deterministic = seed is not None or not training
  return ds.with_options(options).prefetch(tf.data.AUTOTUNE)
