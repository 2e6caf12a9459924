"""Checkpoint size of a multi30k_ende transformer_tiny run: the whole checkpoint against the
model weights alone. ONE JSON line.

A trainer checkpoint holds the model, Adam's two slots per weight (so ~3x the weights), the
dropout seed states and the input pipeline's position (train_iterator): whatever the tf.data
iterator saves, its shuffle buffer and, when the pipeline caches examples in memory, the whole
cache. Trains `--steps` steps into a new model_dir, then sums the newest checkpoint's files and
the sizes of the model's variables.

  python bench/checkpoint_size.py --data_dir=/tmp/multi30k_ende   # prepared there if needed
"""
import argparse
import json
import os
import sys
import tempfile

import numpy as np
import tensorflow as tf

import t2t_lite
from t2t_lite.rundir import checkpoints
from t2t_lite.train import trainer


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--data_dir", required=True)
  parser.add_argument("--raw_dir", default=os.path.join(
      os.path.dirname(__file__), "..", "..", "shared", "data", "multi30k"))
  parser.add_argument("--steps", type=int, default=3)
  args = parser.parse_args(argv)
  problem = t2t_lite.get_problem("multi30k_ende")
  problem.prepare(args.data_dir, args.raw_dir)
  hparams = t2t_lite.get_hparams("transformer_tiny")
  model_dir = tempfile.mkdtemp(prefix="checkpoint_size_")
  config = trainer.TrainConfig(model_dir=model_dir, train_steps=args.steps, eval_steps=0,
                               xla=False, log_every=args.steps)
  t = trainer.Trainer(problem, hparams, args.data_dir, config,
                      problem.tokenizer(args.data_dir).vocab_size, {"problem": problem.name},
                      log=lambda line: None)
  t.train()
  latest = t.state.latest_checkpoint
  reader = tf.train.load_checkpoint(latest)
  by_object = {}  # Top-level object -> bytes of its tensors (the iterator's state is a variant).
  for name, dtype in reader.get_variable_to_dtype_map().items():
    if dtype != tf.variant:
      value = reader.get_tensor(name)
      top = name.split("/")[0]
      by_object[top] = by_object.get(top, 0) + (value.nbytes if hasattr(value, "nbytes")
                                                else len(value))
  total = checkpoints.checkpoint_bytes(latest)
  print(json.dumps({
      "bench": "checkpoint_size", "problem": problem.name, "hparams": "transformer_tiny",
      "steps": args.steps, "checkpoint_bytes": total,
      "weights_bytes": sum(int(np.prod(v.shape)) * np.dtype(v.dtype).itemsize
                           for v in t.model.weights),
      "tensor_bytes_by_object": by_object,
      "iterator_state_bytes": total - sum(by_object.values()), "checkpoint": latest}))
  return 0


if __name__ == "__main__":
  sys.exit(main())
