"""Data preparation at WMT scale: multi30k_ende's `prepare` on synthetic corpora of N pairs.

  python bench/datagen_scale.py                            # 250,000 and 1,000,000 pairs
  python bench/datagen_scale.py --sizes=200000,1000000 [--workdir=/tmp] [--workers=1,2]
  python bench/datagen_scale.py --quick                    # 2,000 and 8,000 pairs (smoke run)

What is measured: the real `Problem.prepare(data_dir, raw_dir)` of the registered problem
multi30k_ende (vocabulary, tokenization, TFRecords, manifest), on raw files in exactly the
format it reads (`train.en.gz` / `train.de.gz`, ...), at each size. Each synthetic training
pair is, chosen with a seeded RNG, a random Multi30k training pair or (half the time) two of
them concatenated, the English and the German sides alike, so the text stays parallel and
averages ~19 words a side (WMT14 EN-DE: ~23). dev and test are Multi30k's own val and
test_2016_flickr (1,014 and 1,000 pairs).

The vocabulary is learned from the same number of pairs at every size (`vocab_sample_size`,
default 100,000, a problem setting), so its SentencePiece training costs the same everywhere and
the differences between sizes are the per-pair costs (reading, tokenizing, writing).

Each size is prepared once per --workers count (default: 1, and one per core), each time in a
fresh subprocess, which reports its own peak RSS (ru_maxrss), so one run's memory does not hide
in another's, and the largest of its prepare workers' peaks (`worker_peak_rss_mib`: each worker
is a process of its own, holding TensorFlow and the tokenizer); `rss_after_import_mib` is the
child's RSS before `prepare` (TensorFlow, SentencePiece), the floor under every peak. The train
records must be byte-identical for every worker count (else the bench exits with an error).
`seconds` times the prepare call alone (`vocab_seconds` is its build_vocab part);
`build_seconds`, the time to write the synthetic raw corpus, is reported beside it and not
counted in pairs/s. pairs/s = training pairs / prepare seconds. With the most workers:
`extrapolated_seconds` scales the larger size's pairs/s linearly to WMT14 EN-DE (4.5M pairs)
and EN-FR (36M); `rss_growth` (and `worker_rss_growth`) is the larger size's peak over the
smaller's: within 1.2, memory does not grow with the corpus. `workers_speedup`: the larger
size's pairs/s with the most workers over that with the fewest.

Prints ONE JSON line on stdout; progress (the children's prepare log) goes to stderr. The
corpora live in a temporary directory under --workdir (default: the system's, /tmp), removed
afterwards.
"""
import argparse
import gzip
import hashlib
import json
import logging
import os
import pathlib
import resource
import shutil
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

_SHARED = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
PROBLEM = "multi30k_ende"
WMT_PAIRS = {"wmt14_ende_4.5M": 4_500_000, "wmt14_enfr_36M": 36_000_000}
_HELD_OUT = ("val", "test_2016_flickr")  # Multi30k's dev and test files, used as they are.
_WRITE_CHUNK = 50_000  # Synthetic pairs drawn and written at once: bounded memory at any N.


def read_gz_lines(path):
  """Lines split at "\n" only, as the problem's reader does (not str.splitlines, which also
  splits at U+2028 and the like and could put the two sides out of step)."""
  with gzip.open(path, "rb") as f:
    return [line.decode("utf-8").rstrip("\r") for line in f.read().split(b"\n")[:-1]]


def build_corpus(raw_dir, source_dir, pairs, seed):
  """Writes train.{en,de}.gz of `pairs` synthetic pairs to raw_dir (links dev / test) -> s."""
  start = time.perf_counter()
  en = read_gz_lines(os.path.join(source_dir, "train.en.gz"))
  de = read_gz_lines(os.path.join(source_dir, "train.de.gz"))
  assert len(en) == len(de) == 29_000, (len(en), len(de))
  os.makedirs(raw_dir)
  rng = np.random.default_rng(seed)
  # Level 1: the raw files are read back the same at any level; writing is not what we time.
  with gzip.open(os.path.join(raw_dir, "train.en.gz"), "wt", encoding="utf-8",
                 compresslevel=1) as en_file, \
       gzip.open(os.path.join(raw_dir, "train.de.gz"), "wt", encoding="utf-8",
                 compresslevel=1) as de_file:
    for begin in range(0, pairs, _WRITE_CHUNK):
      n = min(_WRITE_CHUNK, pairs - begin)
      first, second = rng.integers(len(en), size=n), rng.integers(len(en), size=n)
      joined = rng.random(n) < 0.5
      # The same indices on both sides: line i of train.de is the translation of line i of en.
      for side, out in ((en, en_file), (de, de_file)):
        out.write("".join(
            f"{side[i]} {side[j]}\n" if join else f"{side[i]}\n"
            for i, j, join in zip(first.tolist(), second.tolist(), joined.tolist())))
  for name in _HELD_OUT:  # Links: the shared data is read, never copied.
    for lang in ("en", "de"):
      os.symlink(os.path.join(source_dir, f"{name}.{lang}.gz"),
                 os.path.join(raw_dir, f"{name}.{lang}.gz"))
  return time.perf_counter() - start


def child(args):
  """In the fresh subprocess: prepare once, print one JSON line of timings and peak RSS."""
  logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="  %(message)s")
  import t2t_lite  # Imported here: the parent stays small and its imports are not timed.
  problem = t2t_lite.get_problem(PROBLEM, vocab_sample_size=args.vocab_sample_size)
  rss_after_import = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
  vocab_seconds = []
  build_vocab = problem.build_vocab

  def timed_build_vocab(*a, **k):  # Instance attribute: the class's code runs unchanged.
    start = time.perf_counter()
    build_vocab(*a, **k)
    vocab_seconds.append(time.perf_counter() - start)

  problem.build_vocab = timed_build_vocab
  start, cpu_start = time.perf_counter(), time.process_time()
  stats = problem.prepare(args.data_dir, args.raw_dir, progress_seconds=args.progress_seconds,
                          workers=int(args.workers))
  seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
  workers = resource.getrusage(resource.RUSAGE_CHILDREN)  # prepare's worker processes, if any
  print(json.dumps({
      "pairs": stats["train"]["pairs"], "examples": stats["train"]["examples"],
      "seconds": seconds, "cpu_seconds": cpu_seconds,
      "workers_cpu_seconds": workers.ru_utime + workers.ru_stime,
      "vocab_seconds": vocab_seconds[0], "rss_after_import_kib": rss_after_import,
      # KiB on Linux; RUSAGE_CHILDREN's is the largest worker's.
      "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
      "worker_peak_rss_kib": workers.ru_maxrss}))


def measure_size(args, workdir, pairs, worker_counts):
  """Builds the corpus of `pairs` pairs and prepares it in a subprocess with each worker count
  -> [result dict per worker count]; the records must be the same for every count."""
  size_dir = os.path.join(workdir, f"pairs_{pairs}")
  raw_dir = os.path.join(size_dir, "raw")
  print(f"{pairs:,} pairs: building the raw corpus in {raw_dir}", file=sys.stderr, flush=True)
  build_seconds = build_corpus(raw_dir, args.raw_dir, pairs, args.seed)
  results, records = [], set()
  for workers in worker_counts:
    data_dir = os.path.join(size_dir, f"data_{workers}")
    print(f"{pairs:,} pairs: built in {build_seconds:.1f} s; preparing in a subprocess "
          f"with {workers} worker(s)", file=sys.stderr, flush=True)
    command = [sys.executable, os.path.abspath(__file__), "--child",
               f"--raw_dir={raw_dir}", f"--data_dir={data_dir}",
               f"--vocab_sample_size={args.vocab_sample_size}",
               f"--progress_seconds={args.progress_seconds}", f"--workers={workers}"]
    # stderr passes through (progress); stdout is the child's one JSON line.
    out = subprocess.run(command, stdout=subprocess.PIPE, text=True, check=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    data_bytes = sum(f.stat().st_size for f in pathlib.Path(data_dir).iterdir())
    with open(os.path.join(data_dir, "train-00000-of-00001.tfrecord"), "rb") as f:
      records.add(hashlib.sha256(f.read()).hexdigest())
    shutil.rmtree(data_dir)
    mib = 1 / 1024
    results.append({
        "pairs": result["pairs"], "workers": workers, "seconds": round(result["seconds"], 1),
        "pairs_per_second": round(result["pairs"] / result["seconds"]),
        "peak_rss_mib": round(result["peak_rss_kib"] * mib, 1),
        # With 1 worker there are none: RUSAGE_CHILDREN would show some library's forked helper.
        "worker_peak_rss_mib": (round(result["worker_peak_rss_kib"] * mib, 1)
                                if workers > 1 else None),
        "rss_after_import_mib": round(result["rss_after_import_kib"] * mib, 1),
        "cpu_seconds": round(result["cpu_seconds"], 1),
        "workers_cpu_seconds": round(result["workers_cpu_seconds"], 1),
        "vocab_seconds": round(result["vocab_seconds"], 1),
        "build_seconds": round(build_seconds, 1),
        "data_dir_mib": round(data_bytes / 2**20, 1)})
  shutil.rmtree(size_dir)  # Before the next size: disk use stays that of one size.
  if len(records) != 1:
    sys.exit(f"datagen_scale: {pairs:,} pairs gave different records with workers "
             f"{worker_counts}")
  return results


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--sizes", default="250000,1000000",
                      help="comma-separated corpus sizes in pairs, smaller first")
  parser.add_argument("--workdir", default=None,
                      help="where the temporary directory goes (default: the system's, /tmp)")
  parser.add_argument("--quick", action="store_true",
                      help="smoke run: 2,000 and 8,000 pairs, vocabulary from 2,000")
  parser.add_argument("--vocab_sample_size", type=int, default=100_000,
                      help="pairs the vocabulary is learned from, the same at every size")
  parser.add_argument("--raw_dir", default=str(_SHARED),
                      help="the Multi30k files (in the child: the synthetic corpus)")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--progress_seconds", type=float, default=30.0)
  parser.add_argument("--workers", default=f"1,{len(os.sched_getaffinity(0))}",
                      help="comma-separated worker counts for prepare, each run at every size "
                           "(default: 1 and one per core)")
  parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  parser.add_argument("--data_dir", help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.child:
    return child(args)
  if args.quick:
    args.sizes, args.vocab_sample_size = "2000,8000", 2000
  sizes = sorted(int(size) for size in args.sizes.split(","))
  if min(sizes) < args.vocab_sample_size:
    print(f"warning: {min(sizes):,} pairs < vocab_sample_size={args.vocab_sample_size:,}: "
          "the vocabulary cost differs between sizes", file=sys.stderr)

  worker_counts = sorted({int(n) for n in args.workers.split(",")})
  load_before = os.getloadavg()
  with tempfile.TemporaryDirectory(prefix="t2t_lite_datagen_scale_", dir=args.workdir) as work:
    results = [measure_size(args, work, pairs, worker_counts) for pairs in sizes]
  load_after = os.getloadavg()
  # Growth and extrapolation with the most workers; the speedup of the most over the fewest.
  small, large = results[0][-1], results[-1][-1]
  rss_growth = large["peak_rss_mib"] / small["peak_rss_mib"]
  # A straight line through the two peaks: what a WMT-size corpus would need if growth is linear.
  # Flat when the larger run peaked lower (noise: a larger corpus cannot need less memory).
  per_pair = max(0.0, (large["peak_rss_mib"] - small["peak_rss_mib"])
                 / (large["pairs"] - small["pairs"]))
  print(json.dumps({
      "bench": "datagen_scale", "problem": PROBLEM, "vocab_sample_size": args.vocab_sample_size,
      "sizes": [result for size in results for result in size],
      "workers_speedup": round(large["pairs_per_second"] / results[-1][0]["pairs_per_second"], 2),
      "rss_growth": round(rss_growth, 3),
      "rss_within_20_percent": rss_growth <= 1.2,
      "worker_rss_growth": (round(large["worker_peak_rss_mib"] / small["worker_peak_rss_mib"], 3)
                            if small["worker_peak_rss_mib"] else None),
      "extrapolated_seconds": {name: round(pairs / large["pairs_per_second"])
                               for name, pairs in WMT_PAIRS.items()},
      "extrapolated_peak_rss_mib": {
          name: round(large["peak_rss_mib"] + per_pair * (pairs - large["pairs"]))
          for name, pairs in WMT_PAIRS.items()},
      "load_average_before": [round(x, 2) for x in load_before],
      "load_average_after": [round(x, 2) for x in load_after],
      "cpus": os.cpu_count()}))


if __name__ == "__main__":
  main()
