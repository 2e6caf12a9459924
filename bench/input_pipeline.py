"""Input pipeline benchmark: padding efficiency and throughput on multi30k_ende train.

  python bench/input_pipeline.py [--raw_dir=../shared/data/multi30k] [--data_dir=DIR]

Prints one JSON line with, for each batching of a 4,096-token batch, `real_token_ratio`: the
fraction of token slots (B*S + B*T summed over batches) holding real tokens rather than padding,
and `tokens_per_sec`: real tokens delivered per second after a warm-up (the first pass, which
fills the in-memory cache and the shuffle buffer, is excluded). The batchings:
  buckets         the default (length buckets, each batch padded to its longest example; target:
                  >= 0.90);
  static_buckets  what TPU / XLA training reads without packing (padded to the bucket bounds);
  packed          --pack (t2t_lite/data/packing.py: several examples per row, one static shape;
                  issue 16's target: >= 0.97).
The three are measured one after the other, each over --batches batches.
"""
import argparse
import json
import os
import pathlib
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

import t2t_lite  # noqa: E402

_SHARED = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--raw_dir", default=str(_SHARED))
  parser.add_argument("--data_dir", default=None, help="default: a fresh temporary directory")
  parser.add_argument("--batch_tokens", type=int, default=4096)
  parser.add_argument("--batches", type=int, default=2000)
  args = parser.parse_args()
  if args.data_dir:
    measure(args, args.data_dir)
  else:
    with tempfile.TemporaryDirectory(prefix="t2t_lite_bench_") as data_dir:
      measure(args, data_dir)


def measure(args, data_dir):
  problem = t2t_lite.get_problem("multi30k_ende")
  start = time.perf_counter()
  problem.prepare(data_dir, args.raw_dir)
  prepare_seconds = time.perf_counter() - start
  hparams = t2t_lite.get_hparams("transformer_base")
  result = {"bench": "input_pipeline", "problem": "multi30k_ende", "split": "train",
            "batch_tokens": args.batch_tokens, "batches": args.batches,
            "packed_lengths": problem.packed_lengths(data_dir, hparams.max_length)}
  for name, options in (("buckets", {}), ("static_buckets", {"static_shapes": True}),
                        ("packed", {"pack": True})):
    dataset = problem.dataset("train", data_dir, hparams, training=True,
                              batch_tokens=args.batch_tokens, seed=0, **options)
    result[name] = measure_batches(iter(dataset), args.batches)
  result["prepare_seconds"] = round(prepare_seconds, 1)
  print(json.dumps(result))


def measure_batches(batches, count):
  for _ in range(200):  # Warm-up: fills the cache and the shuffle buffer.
    next(batches)
  real = slots = max_side = 0
  start = time.perf_counter()
  for _ in range(count):
    batch = next(batches)
    inputs, targets = batch["inputs"].numpy(), batch["targets"].numpy()
    real += int(np.count_nonzero(inputs) + np.count_nonzero(targets))
    slots += inputs.size + targets.size
    max_side = max(max_side, inputs.size, targets.size)
  seconds = time.perf_counter() - start
  return {"real_token_ratio": round(real / slots, 4), "tokens_per_sec": round(real / seconds),
          "max_tokens_per_side": max_side}

if __name__ == "__main__":
  main()
