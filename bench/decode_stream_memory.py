"""Peak memory of t2t-lite-decode as its input grows: a small file and one 100 times longer,
each decoded in its own process under `/usr/bin/time -v`. ONE JSON line.

  python bench/decode_stream_memory.py --model_dir=<a run> [--lines=2000] [--factor=100]

The inputs are --lines_file's lines (default: sequences of the algorithmic problems' digits)
repeated to length; both runs use the same flags (float32, --beam_size, --window's default), so
that the first --lines outputs of the long run must equal the short run's line for line
("outputs_equal"). Reported: peak RSS of each process (`Maximum resident set size`), their
ratio (decode reads, decodes and writes a window at a time: the target is <= 1.2), wall
seconds and lines/s.
"""
import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time


def run(model_dir, input_file, output_file, flags):
  """(peak RSS in MiB, seconds) of one decode process."""
  start = time.perf_counter()
  process = subprocess.run(
      ["/usr/bin/time", "-v", sys.executable, "-m", "t2t_lite.bin.decode",
       f"--model_dir={model_dir}", f"--input_file={input_file}", f"--output_file={output_file}",
       "--no_progress", *flags], capture_output=True, text=True, check=True)
  seconds = time.perf_counter() - start
  kib = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", process.stderr).group(1))
  return kib / 1024, seconds


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--model_dir", required=True)
  parser.add_argument("--lines_file", default=None, help="source lines to repeat")
  parser.add_argument("--lines", type=int, default=2000)
  parser.add_argument("--factor", type=int, default=100)
  parser.add_argument("--beam_size", type=int, default=1)
  args = parser.parse_args()
  if args.lines_file:
    with open(args.lines_file, encoding="utf-8") as f:
      pool = [line.rstrip("\n") for line in f if line.strip()]
  else:
    rng = random.Random(0)
    pool = [" ".join(str(rng.randrange(10)) for _ in range(rng.randint(1, 20)))
            for _ in range(1000)]
  flags = ["--precision=none", f"--beam_size={args.beam_size}"]
  results = {}
  with tempfile.TemporaryDirectory() as tmp:
    outputs = {}
    for name, count in (("short", args.lines), ("long", args.lines * args.factor)):
      source, target = os.path.join(tmp, f"{name}.in"), os.path.join(tmp, f"{name}.out")
      with open(source, "w", encoding="utf-8") as f:
        f.writelines(pool[i % len(pool)] + "\n" for i in range(count))
      rss, seconds = run(args.model_dir, source, target, flags)
      with open(target, encoding="utf-8") as f:
        outputs[name] = f.read().splitlines()
      assert len(outputs[name]) == count, (name, len(outputs[name]))
      results[name] = {"lines": count, "peak_rss_mib": round(rss, 1),
                       "seconds": round(seconds, 1), "lines_per_second": round(count / seconds)}
  print(json.dumps({
      "benchmark": "decode_stream_memory", "model_dir": args.model_dir, "flags": flags,
      "results": results,
      "rss_ratio": round(results["long"]["peak_rss_mib"] / results["short"]["peak_rss_mib"], 3),
      "target_rss_ratio": 1.2,
      "outputs_equal": outputs["long"][:args.lines] == outputs["short"],
      "load_average": [round(x, 2) for x in os.getloadavg()]}))


if __name__ == "__main__":
  main()
