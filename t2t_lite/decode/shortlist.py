"""A vocabulary shortlist (Marian's --shortlist, CTranslate2's use_vmap): the target tokens that a
batch's source tokens make likely, so that each decoding step's pre-softmax projection and
softmax cover a few thousand tokens instead of the whole vocabulary.

The table, built once from the run's training pairs and kept in its run directory
(run_files.SHORTLIST_FILE, written by `for_run`):
  frequent     the FREQUENT most frequent target tokens, and PAD and EOS: always candidates;
  candidates   for each source token s, the PER_SOURCE other target tokens t of highest
               p(t | s) = c(s, t) / c(s), counted over sentence pairs (s in the source, t in the
               target) of the first MAX_PAIRS training pairs: Marian's lexical shortlist (100
               frequent, 100 per source token is its usual setting), with co-occurrence counts
               where Marian reads fast_align's lexical table: no word aligner to install and run;
  known        which source tokens occur in those pairs.
A batch's vocabulary (`batch_vocabulary`) is the union of the frequent tokens and its source
tokens' candidates, in id order, so that PAD and EOS keep their ids 0 and 1 in it. A batch that
holds a source token the table does not know decodes over the whole vocabulary: the exact
fallback. Log-probabilities are renormalised over the batch's vocabulary, as in Marian and
CTranslate2.

Shapes: B sentences, S source length, V vocabulary, C candidates a source token, V' a batch's
vocabulary.
"""
import io
import logging
import zipfile

import numpy as np
import tensorflow as tf

from t2t_lite import errors, files
from t2t_lite.data import data_files, pipeline
from t2t_lite.data.tokenizers import EOS_ID, PAD_ID
from t2t_lite.errors import T2TLiteError
from t2t_lite.rundir import run_files

FREQUENT, PER_SOURCE = 100, 100
MAX_PAIRS = 1_000_000  # Enough to rank a token's candidates; a WMT corpus' table in minutes.
logger = logging.getLogger(__name__)


class ShortlistError(T2TLiteError, ValueError):
  """A shortlist that cannot be built or read (one line)."""


class Shortlist(tf.Module):
  """The table (see the module doc) as variables: a SavedModel keeps it with the weights."""

  def __init__(self, candidates, known, frequent, pairs):
    super().__init__(name="shortlist")
    self.vocab_size = candidates.shape[0]
    self.pairs = int(pairs)  # training pairs counted
    self.candidates = tf.Variable(candidates.astype(np.int32), trainable=False)  # [V, C]
    self.known = tf.Variable(known.astype(bool), trainable=False)  # [V]
    self.frequent = tf.Variable(frequent.astype(np.int32), trainable=False)  # [F]

  def batch_vocabulary(self, inputs, forced=()):
    """inputs int32 [B, S] -> the ids the batch's outputs are searched over, int32 [V'] in
    ascending order (PAD and EOS first); every id when a source token is unknown. forced:
    int tensors of token ids the outputs must have (a target prefix, constraint phrases), added
    to it."""
    ids = tf.concat([tf.reshape(tf.gather(self.candidates, inputs), [-1]),  # [B*S*C]
                     self.frequent] + [tf.reshape(tf.cast(x, tf.int32), [-1]) for x in forced],
                    axis=0)
    chosen = tf.scatter_nd(ids[:, None], tf.ones_like(ids), [self.vocab_size]) > 0  # [V]
    chosen |= ~tf.reduce_all(tf.gather(self.known, inputs))
    return tf.cast(tf.where(chosen)[:, 0], tf.int32)  # [V']

  def to_bytes(self):
    buffer = io.BytesIO()
    np.savez(buffer, candidates=self.candidates.numpy(), known=self.known.numpy(),
             frequent=self.frequent.numpy(), pairs=self.pairs)
    return buffer.getvalue()

  @classmethod
  def from_bytes(cls, data):
    """The table of to_bytes' bytes; one of _NOT_A_TABLE when they are not."""
    arrays = np.load(io.BytesIO(data))
    return cls(arrays["candidates"], arrays["known"], arrays["frequent"], arrays["pairs"])


# What numpy raises for bytes that are not to_bytes' (truncated or overwritten): errors of many
# kinds, one of which speaks of pickles.
_NOT_A_TABLE = (ValueError, KeyError, IndexError, EOFError, zipfile.BadZipFile)


def build(pairs, vocab_size, *, frequent=FREQUENT, per_source=PER_SOURCE):
  """A Shortlist of (source ids, target ids) pairs (iterables of ints; PAD and EOS ignored)."""
  source_count = np.zeros(vocab_size, np.int64)
  target_count = np.zeros(vocab_size, np.int64)
  chunks, keys, n = [], [], 0  # keys: s * V + t of each (s, t) that co-occur in a pair
  for n, (source, target) in enumerate(pairs, 1):
    source = np.unique(np.asarray(source, np.int64))
    target = np.unique(np.asarray(target, np.int64))
    source, target = source[source > EOS_ID], target[target > EOS_ID]
    source_count[source] += 1
    target_count[target] += 1
    keys.append((source[:, None] * vocab_size + target[None, :]).ravel())
    if len(keys) == 10_000:  # Counted in chunks: memory grows with distinct pairs only.
      chunks.append(_count(np.concatenate(keys)))
      keys = []
      if len(chunks) == 10:
        chunks = [_merge(chunks)]
  chunks.append(_count(np.concatenate(keys) if keys else np.zeros([0], np.int64)))
  cooccurring, counts = _merge(chunks)  # distinct keys [P], their counts [P]
  always = np.union1d([PAD_ID, EOS_ID], np.argsort(-target_count, kind="stable")[:frequent])
  sources, targets = cooccurring // vocab_size, cooccurring % vocab_size
  keep = ~np.isin(targets, always)
  sources, targets, counts = sources[keep], targets[keep], counts[keep]
  # Each source token's targets by p(t | s) (c(s) is the same for all of them), then by id.
  order = np.lexsort((targets, -counts, sources))
  sources, targets = sources[order], targets[order]
  first = np.searchsorted(sources, sources)  # where each source token's run starts
  rank = np.arange(len(sources)) - first
  take = rank < per_source
  candidates = np.zeros([vocab_size, per_source], np.int32)  # 0 = PAD, a candidate anyway
  candidates[sources[take], rank[take]] = targets[take]
  known = source_count > 0
  known[[PAD_ID, EOS_ID]] = True
  return Shortlist(candidates, known, always, n)


def _count(keys):
  return np.unique(keys, return_counts=True)


def _merge(chunks):
  keys = np.concatenate([k for k, _ in chunks])
  counts = np.concatenate([c for _, c in chunks])
  distinct, where = np.unique(keys, return_inverse=True)
  return distinct, np.bincount(where, weights=counts).astype(np.int64)


def for_run(model_dir, vocab_size):
  """The shortlist of the run in model_dir: its SHORTLIST_FILE, or built from the training pairs
  of the data_dir its run.json names and written there (a directory that cannot be written to
  gets a warning, and the table is used all the same)."""
  path = run_files.path(model_dir, run_files.SHORTLIST_FILE)
  again = ("remove it, and the next use of --shortlist builds it again from the training data "
           "its run.json names")
  if tf.io.gfile.exists(path):
    try:
      with tf.io.gfile.GFile(path, "rb") as f:
        data = f.read()
    except (OSError, tf.errors.OpError) as e:
      raise ShortlistError(f"{path} does not read ({errors.reason(e)})") from None
    try:
      table = Shortlist.from_bytes(data)
    except _NOT_A_TABLE:  # numpy's reason would only mislead.
      raise ShortlistError(f"{path} is damaged (not the table decoding wrote: truncated or "
                           f"overwritten); {again}") from None
    if table.vocab_size != vocab_size:
      raise ShortlistError(f"{path} is of a vocabulary of {table.vocab_size} ids, the run's has "
                           f"{vocab_size}; {again}")
    return table
  data_dir = run_files.read_run(model_dir).info.get("data_dir")
  records = data_files.record_paths(data_dir, "train") if data_dir else []
  if not records:
    where = (f"its data_dir {data_dir} has no train-*.tfrecord" if data_dir
             else "its run.json names no data_dir")
    raise ShortlistError(f"{model_dir} has no {run_files.SHORTLIST_FILE} and no training data "
                         f"to build one from: {where}")
  examples = pipeline.read_records(records).take(MAX_PAIRS).as_numpy_iterator()
  shortlist = build(((e["inputs"], e["targets"]) for e in examples), vocab_size)
  try:
    files.write_bytes(path, shortlist.to_bytes())
    logger.info("built a vocabulary shortlist from %d training pairs of %s into %s",
                shortlist.pairs, data_dir, path)
  except errors.RunFailure as e:
    logger.warning("built a vocabulary shortlist from %d training pairs of %s; not kept (%s)",
                   shortlist.pairs, data_dir, e)
  return shortlist
