"""Does packing change what a step learns? Dev loss per step of multi30k_ende training with and
without packed batches (same seed, same 4,096-token budget per step).

  python bench/packed_training.py [--steps=300] [--eval_every=50] [--work=DIR]

Runs t2t-lite-train twice, one run after the other (unpacked, then --pack), and prints ONE JSON
line: dev loss at each evaluation for both, and the largest relative difference. The runs are
not timed against each other (their step times are in their logs): this is about loss per step.
The model is transformer_base shrunk to 2+2 layers of d_model 256 (HPARAMS, OVERRIDES) so that a
few hundred steps fit in minutes on a CPU, with multi30k_quality.sh's warmup of 800 steps.
"""
import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile

_SHARED = pathlib.Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k"
_EVAL = re.compile(r"^eval at step (\d+): loss ([0-9.]+)", re.M)
_STEP = re.compile(r"^step \d+/\d+\s+loss [0-9.]+\s+lr \S+\s+([0-9,]+) tok/s", re.M)


def train(work, data_dir, args, pack):
  model_dir = os.path.join(work, "packed" if pack else "unpacked")
  command = [
      sys.executable, "-m", "t2t_lite.bin.train", "--problem=multi30k_ende",
      f"--hparams={args.hparams}", f"--hparams_overrides={args.overrides}",
      f"--data_dir={data_dir}", f"--raw_dir={args.raw_dir}", f"--model_dir={model_dir}",
      f"--train_steps={args.steps}", f"--eval_every={args.eval_every}", "--eval_steps=100",
      "--eval_decode_examples=0", "--log_every=25", "--noxla", "--seed=1",
      "--checkpoint_every_minutes=1000", "--pack" if pack else "--no-pack"]
  run = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  with open(model_dir + ".log", "w") as f:
    f.write(run.stdout)
  if run.returncode:
    sys.exit(f"packed_training: {' '.join(command)} failed; see {model_dir}.log")
  losses = {int(step): float(loss) for step, loss in _EVAL.findall(run.stdout)}
  speeds = [int(s.replace(",", "")) for s in _STEP.findall(run.stdout)]
  return losses, speeds


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--raw_dir", default=str(_SHARED))
  parser.add_argument("--work", default=None, help="default: a fresh temporary directory")
  parser.add_argument("--hparams", default="transformer_base")
  parser.add_argument("--overrides", default="num_layers=2,d_model=256,d_ff=1024,num_heads=4,"
                      "batch_size=4096,warmup_steps=800")
  parser.add_argument("--steps", type=int, default=300)
  parser.add_argument("--eval_every", type=int, default=50)
  args = parser.parse_args()
  work = args.work or tempfile.mkdtemp(prefix="t2t_lite_packed_")
  data_dir = os.path.join(work, "data")
  unpacked, unpacked_speed = train(work, data_dir, args, pack=False)
  packed, packed_speed = train(work, data_dir, args, pack=True)
  steps = sorted(set(unpacked) & set(packed))
  difference = max(abs(packed[s] - unpacked[s]) / unpacked[s] for s in steps)
  print(json.dumps({
      "bench": "packed_training", "problem": "multi30k_ende", "hparams": args.hparams,
      "overrides": args.overrides, "steps": args.steps, "work": work,
      "dev_loss_unpacked": {s: unpacked[s] for s in steps},
      "dev_loss_packed": {s: packed[s] for s in steps},
      "max_relative_difference": round(difference, 4),
      "packed_lower_at_end": packed[steps[-1]] <= unpacked[steps[-1]],
      "median_tokens_per_second": {
          "unpacked": sorted(unpacked_speed)[len(unpacked_speed) // 2] if unpacked_speed else None,
          "packed": sorted(packed_speed)[len(packed_speed) // 2] if packed_speed else None},
  }))


if __name__ == "__main__":
  main()
