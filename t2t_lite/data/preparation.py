"""Preparing a data_dir (what `Problem.prepare` and t2t-lite-datagen do): a problem's raw pairs ->
its vocabulary, tokenized TFRecords, the dev / test text and, last, the manifest.

This process reads the raw pairs and writes the records; the pairs of a long split are tokenized
and serialized in order by spawned worker processes. A preparation that fails (bad raw data, a
vocabulary that cannot be learned, a full disk, Ctrl-C) removes what it wrote, so that the
data_dir is as it was and the next attempt starts clean.
"""
import collections
import concurrent.futures
import json
import logging
import multiprocessing
import os

import tensorflow as tf

from t2t_lite import files
from t2t_lite.errors import reason
from t2t_lite.data import data_files, pipeline
from t2t_lite.data.progress import Progress

logger = logging.getLogger(__name__)

SPLITS = ("train", "dev", "test")
FORMAT_VERSION = 1
_CHUNK = 10000  # Pairs tokenized at once.
_MAX_REPORTED = 10  # Pair numbers of empty pairs kept in the manifest.
# Chunks a split encodes in this process before the workers start: starting one (a fresh
# interpreter importing TensorFlow) costs seconds, which only a long split wins back.
INLINE_CHUNKS = 5


def prepare(problem, data_dir, raw_dir, progress_seconds, workers, make_error):
  """Builds `problem`'s vocabulary, records and manifest in data_dir (not prepared yet) ->
  {split: stats} (see Problem.prepare). `make_error(message)` is the exception a data_dir that
  cannot be created raises. On any failure, what this call wrote is removed before the error
  goes on (a raw/ download inside data_dir is kept)."""
  existed = tf.io.gfile.exists(data_dir)
  files.make_dirs(data_dir, "data_dir", make_error)
  try:
    logger.info("%s: building the vocabulary in %s", problem.name, data_dir)
    problem.build_vocab(data_dir, raw_dir)
    tok = problem.tokenizer(data_dir)
    stats = {split: write_split(problem, split, tok, data_dir, raw_dir, progress_seconds,
                                workers) for split in SPLITS}
    if not stats["train"]["examples"]:
      raise problem.no_training_text(raw_dir)
    for split in ("dev", "test"):
      if not stats[split]["examples"]:
        logger.warning("%s %s: no examples; training with evaluation (--eval_steps > 0) "
                       "will refuse this data_dir", problem.name, split)
    data_files.write_manifest(data_dir, {
        "problem": problem.name, "format": FORMAT_VERSION, "settings": problem.settings(),
        "vocab_size": tok.vocab_size, "splits": stats,
        "record_bytes": {os.path.basename(path): tf.io.gfile.stat(path).length
                         for path in data_files.record_paths(data_dir)}})
    return stats
  except BaseException:
    _remove_attempt(data_dir, existed)
    raise


def _remove_attempt(data_dir, existed):
  """Removes what a failed preparation wrote into data_dir, and data_dir itself if this
  preparation created it and nothing else is left in it."""
  try:
    for path in data_files.prepared_files(data_dir):
      tf.io.gfile.remove(path)
    if not existed and not tf.io.gfile.listdir(data_dir):
      tf.io.gfile.rmtree(data_dir)
  except tf.errors.OpError as e:  # Report the original error, not this one.
    logger.warning("could not remove the partial preparation in %s: %s", data_dir,
                   reason(e))


def write_split(problem, split, tok, data_dir, raw_dir, progress_seconds, workers):
  """Tokenizes and writes one split's records (and its text, for dev and test) -> its stats:
  {"pairs", "examples", "empty", "empty_pairs", "lengths", "tokens", "longest"}."""
  num_files = problem.train_shards if split == "train" else 1
  paths = [data_files.record_path(data_dir, split, i, num_files) for i in range(num_files)]
  writers = [tf.io.TFRecordWriter(path) for path in paths]
  text_file = (tf.io.gfile.GFile(data_files.pairs_path(data_dir, split), "w")
               if split != "train" else None)
  stats = {"pairs": 0, "examples": 0, "empty": 0, "empty_pairs": [], "lengths": {},
           "tokens": [0, 0], "longest": [0, 0]}  # per side: source, target
  chunk = []
  progress = Progress(f"{problem.name} {split}", "pairs",
                      total=problem.split_size(split, raw_dir), every_seconds=progress_seconds,
                      log=logger.info)

  def write(encoded):  # [(serialized example, source length, target length)]
    for record, source_length, target_length in encoded:
      writers[stats["examples"] % num_files].write(record)
      length = str(max(source_length, target_length))
      stats["lengths"][length] = stats["lengths"].get(length, 0) + 1
      for side, count in enumerate((source_length, target_length)):
        stats["tokens"][side] += count
        stats["longest"][side] = max(stats["longest"][side], count)
      stats["examples"] += 1

  with ChunkEncoder(tok, workers) as encoder:
    for source, target in problem.raw_pairs(split, raw_dir):
      stats["pairs"] += 1
      progress.update()
      if not source.strip() or not target.strip():
        stats["empty"] += 1
        if len(stats["empty_pairs"]) < _MAX_REPORTED:
          stats["empty_pairs"].append(stats["pairs"])
        continue
      if text_file:
        text_file.write(json.dumps([source, target], ensure_ascii=False) + "\n")
      chunk.append((source, problem.record_target(source, target)))
      if len(chunk) == _CHUNK:
        for encoded in encoder.put(chunk):
          write(encoded)
        chunk = []
    for encoded in encoder.put(chunk) + encoder.finish():
      write(encoded)
  progress.done()
  for writer in writers:
    writer.close()
  if text_file:
    text_file.close()
  if stats["empty"]:
    logger.warning("%s %s: skipped %d of %d pairs with an empty side (pair numbers %s%s)",
                   problem.name, split, stats["empty"], stats["pairs"], stats["empty_pairs"],
                   ", ..." if stats["empty"] > _MAX_REPORTED else "")
  logger.info("%s %s: %d examples", problem.name, split, stats["examples"])
  return stats


def default_workers():
  """The tools' prepare workers: one per core this process may use."""
  return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def encode_pairs(tok, pairs):
  """[(source, target)] -> [(serialized example, source length, target length)], EOS included:
  the per-pair work of prepare, done by its workers."""
  sources = tok.encode_batch([s for s, _ in pairs], add_eos=True)
  targets = tok.encode_batch([t for _, t in pairs], add_eos=True)
  return [(pipeline.serialize_example(s, t), len(s), len(t)) for s, t in zip(sources, targets)]


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
