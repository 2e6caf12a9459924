"""One decoding-step matmul in each precision TensorFlow offers on this CPU: is int8 worth it?

  python bench/matmul_precisions.py [--rounds=5] [--calls=50]

The shape is a base-size FFN matmul of cached beam search at batch 32 x beam 4: [128, 512] x
[512, 2048]. Candidates, each as a tf.function without and with XLA (jit_compile):
  float32    tf.matmul;
  bf16       bfloat16 operands (what --precision=bf16 runs), result cast to float32;
  int8       dynamic quantization as int8 schemes do it (CTranslate2, Keras's int8): the
             activation rows scaled by their absolute maximum to int8, the weight columns
             likewise once, an int8 x int8 -> int32 matmul (BatchMatMulV3), rescaled to float32;
  int8_only  the int8 x int8 -> int32 matmul alone (no quantizing or rescaling): int8's ceiling.
TensorFlow's QuantizedMatMul (quint8 x qint8) is tried too; its kernel is not registered in
this build, and the JSON says so.

Each candidate is traced / compiled and run once untimed, then timed in --rounds rounds
interleaved with the others (`--calls` calls a round); the headline is the median round's
milliseconds a call, with min and max beside it, and GFLOP/s of that median. `int8_rel_error`
is the largest error of the int8 result relative to float32's largest value. ONE JSON line.
"""
import argparse
import json
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

ROWS, DEPTH, COLUMNS = 128, 512, 2048


def candidates():
  """name -> a function of no arguments, and the int8 error."""
  x = tf.random.stateless_normal([ROWS, DEPTH], seed=[1, 2])
  w = tf.random.stateless_normal([DEPTH, COLUMNS], seed=[3, 4])
  x16, w16 = tf.cast(x, tf.bfloat16), tf.cast(w, tf.bfloat16)
  w_scale = tf.reduce_max(tf.abs(w), axis=0) / 127.0  # [COLUMNS]
  w8 = tf.cast(tf.round(w / w_scale), tf.int8)
  w_q = tf.quantization.quantize(w, -4.0, 4.0, tf.qint8, mode="SCALED")

  def int8():
    x_scale = tf.reduce_max(tf.abs(x), axis=1, keepdims=True) / 127.0  # [ROWS, 1]
    x8 = tf.cast(tf.round(x / x_scale), tf.int8)
    product = tf.raw_ops.BatchMatMulV3(x=x8, y=w8, Tout=tf.int32)
    return tf.cast(product, tf.float32) * x_scale * w_scale

  def quantized_matmul():
    x_q = tf.quantization.quantize(x, -4.0, 4.0, tf.quint8, mode="MIN_FIRST")
    return tf.raw_ops.QuantizedMatMul(
        a=x_q.output, b=w_q.output, min_a=x_q.output_min, max_a=x_q.output_max,
        min_b=w_q.output_min, max_b=w_q.output_max, Toutput=tf.qint32)

  functions = {
      "float32": lambda: tf.matmul(x, w),
      "bf16": lambda: tf.cast(tf.matmul(x16, w16), tf.float32),
      "int8": int8,
      "int8_only": lambda: tf.raw_ops.BatchMatMulV3(x=tf.cast(x, tf.int8), y=w8, Tout=tf.int32),
      "quantized_matmul": quantized_matmul,
  }
  error = float(tf.reduce_max(tf.abs(int8() - tf.matmul(x, w))) /
                tf.reduce_max(tf.abs(tf.matmul(x, w))))
  return functions, error


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--calls", type=int, default=50)
  args = parser.parse_args()
  functions, error = candidates()
  compiled, unsupported = {}, {}
  for name, function in functions.items():
    for xla in (False, True):
      key = f"{name}{'_xla' if xla else ''}"
      try:
        compiled[key] = tf.function(function, jit_compile=xla)
        compiled[key]()  # Traced / compiled here, not timed.
      except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError) as e:
        compiled.pop(key)
        unsupported[key] = str(e).strip().splitlines()[0][:160]
  times = {key: [] for key in compiled}
  for _ in range(args.rounds):
    for key, function in compiled.items():
      start = time.perf_counter()
      for _ in range(args.calls):
        function()
      times[key].append((time.perf_counter() - start) / args.calls * 1e3)
  flops = 2 * ROWS * DEPTH * COLUMNS
  results = {key: {"ms": round(statistics.median(t), 3), "min_ms": round(min(t), 3),
                   "max_ms": round(max(t), 3),
                   "gflops": round(flops / statistics.median(t) / 1e6)}
             for key, t in times.items()}
  fastest = {kind: min((key for key in results if key.split("_xla")[0] == kind),
                       key=lambda key: results[key]["ms"])
             for kind in ("float32", "bf16", "int8")}
  print(json.dumps({
      "bench": "matmul_precisions", "shape": [ROWS, DEPTH, COLUMNS], "rounds": args.rounds,
      "results": results, "unsupported": unsupported, "fastest": fastest,
      "int8_over_bf16": round(results[fastest["bf16"]]["ms"] / results[fastest["int8"]]["ms"], 2),
      "int8_rel_error": round(error, 4), "cpus": os.cpu_count(),
      "load_average": [round(x, 2) for x in os.getloadavg()]}))


if __name__ == "__main__":
  main()
