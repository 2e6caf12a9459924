"""Problem.prepare's worker processes: chunks of pairs tokenized and serialized in order, in
this process or, for a long split, in spawned workers (the main process reads and writes)."""
import collections
import concurrent.futures
import multiprocessing
import os

from t2t_lite import inputs

# Chunks a split encodes in this process before the workers start: starting one (a fresh
# interpreter importing TensorFlow) costs seconds, which only a long split wins back.
INLINE_CHUNKS = 5


def default_workers():
  """The tools' prepare workers: one per core this process may use."""
  return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def encode_pairs(tok, pairs):
  """[(source, target)] -> [(serialized example, source length, target length)], EOS included:
  the per-pair work of prepare, done by its workers."""
  sources = tok.encode_batch([s for s, _ in pairs], add_eos=True)
  targets = tok.encode_batch([t for _, t in pairs], add_eos=True)
  return [(inputs.serialize_example(s, t), len(s), len(t)) for s, t in zip(sources, targets)]


class ChunkEncoder:
  """encode_pairs of chunk after chunk, results in order. The first INLINE_CHUNKS chunks are
  encoded in this process (a short split never pays for starting workers); later ones, with
  workers > 1, in worker processes (the tokenizer travels pickled), at most 2 x workers chunks
  in flight so that memory does not grow with the split. Spawned, not forked: forking a process
  that runs TensorFlow's threads can deadlock."""

  def __init__(self, tok, workers):
    self._tok, self._workers = tok, workers
    self._pool, self._pending = None, collections.deque()  # of futures, oldest first
    self._chunks = 0

  def __enter__(self):
    return self

  def __exit__(self, *exc_info):
    if self._pool:
      self._pool.shutdown(cancel_futures=True)

  def put(self, chunk):
    """Starts encoding `chunk` -> the encoded chunks that are ready to write, in order."""
    self._chunks += 1
    if not chunk:
      return []
    if self._workers <= 1 or self._chunks <= INLINE_CHUNKS:
      return [encode_pairs(self._tok, chunk)]
    if self._pool is None:
      self._pool = concurrent.futures.ProcessPoolExecutor(
          self._workers, mp_context=multiprocessing.get_context("spawn"))
    self._pending.append(self._pool.submit(encode_pairs, self._tok, chunk))
    ready = []
    while len(self._pending) > 2 * self._workers or (self._pending and self._pending[0].done()):
      ready.append(self._pending.popleft().result())
    return ready

  def finish(self):
    """-> every chunk still being encoded, in order."""
    return [self._pending.popleft().result() for _ in range(len(self._pending))]
