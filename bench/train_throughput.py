"""Training throughput of our Transformer vs the machine's matmul peak and a keras-hub model.

Prints ONE JSON line. For each model size (transformer_base; "small" = d_model 256, 3+3 layers,
d_ff 1024, 4 heads) and XLA on / off, it times the full training step

  forward (training=True, dropout on) + label-smoothed loss (t2t_lite.modeling.losses)
  + gradients + Adam update (t2t_lite.train.optimization.make_optimizer)

as the trainer runs it: t2t_lite.train.steps.make_train_step, whose forward and backward pass are
XLA-compiled when xla is on (the Adam update is not; with xla off, the loss alone is), on a batch
of 64 sentences x 32 source / 32 target tokens (no padding) with a 32k vocabulary, in float32 and
in each other precision of --precisions (bfloat16 compute, float32 weights: "t2t_lite_bf16"). The
same step is run for a model of the same dimensions built from keras-hub layers (TransformerEncoder
/ TransformerDecoder, a TokenAndPositionEmbedding shared by source and target, the tied
ReversibleEmbedding as the vocab projection; same optimizer and loss), and next to the machine's
fp32 matmul FLOP/s measured in the same run: tf.matmul of square float32 matrices (1024, 2048,
4096) under XLA, best over sizes and repeats ("matmul_gflops_per_s", the denominator of
"fraction_of_matmul"). The same matmuls
without XLA (TensorFlow's oneDNN kernels, often faster here) are reported next to it.

Model FLOPs count matmuls only, a multiply-add = 2 FLOPs, training = 3 x forward
(backward = 2 x forward: one matmul for the input gradient, one for the weight gradient).
With B batch, S source length, T target length, D d_model, F d_ff, H heads, K d_k, V d_v,
N layers per stack, W vocabulary (all sizes of the batch above):

  encoder layer   = 2*B*S*D*H*(2K + 2V)          Q, K, V, O projections
                  + 2*B*H*S*S*(K + V)            Q K^T and (attention weights) V
                  + 2*2*B*S*D*F                  FFN (two matmuls)
  decoder layer   = 2*B*T*D*H*(2K + 2V) + 2*B*H*T*T*(K + V)          masked self-attention
                  + 2*B*T*D*H*(K + V) + 2*B*S*D*H*(K + V)            cross: Q, O on T; K, V on S
                  + 2*B*H*T*S*(K + V)                                cross: Q K^T and A V
                  + 2*2*B*T*D*F                                      FFN
  forward         = N * (encoder layer + decoder layer) + 2*B*T*D*W  (+ vocab projection)
  training step   = 3 * forward

Causal masking is not subtracted (the full T x T product is computed). Embedding lookups,
softmax, LayerNorm and the optimizer are not counted: they are what keeps us below the matmul
peak. For transformer_base this is 0.75 TFLOP per step.

The matmul floor ("matmul_floor_ms", float32; "matmul_floor_ms_bf16", ...): the same matmuls
with their shapes and transposes, forward and backward (step_matmuls), each timed alone in the
step's compute dtype, under XLA in the XLA rounds and through TensorFlow's own (oneDNN) kernels
in the others, and summed, once a round. Our step cannot be much faster than its matmuls alone
(inside the step, XLA runs some of them side by side, which gains a little and hides the other
work): "step_over_floor" is each of our steps over its own floor (median of the per-round
ratios), and "auto_precision" gives it for the precision `auto` picks. keras-hub's float32 step
over the float32 floor ("speedup_ceiling_vs_keras_hub", median of the rounds) is about the most
any change that keeps the paper's FLOPs could reach against keras-hub. Without XLA, a few traced
steps of ours (bench/step_trace.py, "trace") split the step's wall time into time with a matmul
running, time with only other ops running and idle time; "matmul_busy_over_floor", the first
over the floor, is as close to its floor as the step could come by fusing or removing the
other ops alone.

tokens/s counts target tokens (B * T) per second. Each configuration is compiled and warmed up,
then timed in rounds interleaved with the other implementation and with the matmul peaks (the
machine is shared, so ratios from the same run are what to compare); the headline is the median
round, with the fastest and slowest beside it, and the speedup over keras-hub is the median of
the per-round ratios (each round's two steps ran back to back). The JSON also records the load
average before and after, and the same figures per CPU-second of this process ("*_cpu_s",
"*_cpu_time"): with other jobs on the 2 cores, wall time depends on the share we get, while
CPU time barely does, so the CPU-time fractions and speedups are the load-robust ones.

  python bench/train_throughput.py                      # both models, ~15 minutes idle
  python bench/train_throughput.py --models=small --quick
"""
import argparse
import collections
import json
import os
import resource
import time

import keras
import keras_hub
import numpy as np
import tensorflow as tf

import t2t_lite
from t2t_lite.modeling import mixed_precision
from t2t_lite.train.optimization import make_optimizer
from t2t_lite.train.steps import make_train_step

import auto_precision  # bench/, beside this file
import step_trace  # bench/, beside this file

BATCH, SOURCE_LENGTH, TARGET_LENGTH, VOCAB_SIZE = 64, 32, 32, 32000
MATMUL_SIZES = (1024, 2048, 4096)
TARGET_FRACTION_OF_MATMUL = 0.65  # transformer_base
TARGET_SPEEDUP_VS_KERAS_HUB = 1.25  # issue 16: median round, float32 with XLA


def model_hparams(name):
  base = t2t_lite.get_hparams("transformer_base")
  if name == "transformer_base":
    return base
  if name == "small":
    return base.replace(num_layers=3, d_model=256, d_ff=1024, num_heads=4)
  raise ValueError(f"unknown model {name!r}: expected transformer_base or small")


def forward_flops(hp, batch=BATCH, source=SOURCE_LENGTH, target=TARGET_LENGTH,
                  vocab=VOCAB_SIZE):
  """Matmul FLOPs of one forward pass (multiply-add = 2); see the module docstring."""
  b, s, t, d, f, h = batch, source, target, hp.d_model, hp.d_ff, hp.num_heads
  k, v = hp.key_depth, hp.value_depth
  encoder = 2 * b * s * d * h * (2 * k + 2 * v) + 2 * b * h * s * s * (k + v) + 4 * b * s * d * f
  decoder = (2 * b * t * d * h * (2 * k + 2 * v) + 2 * b * h * t * t * (k + v)
             + 2 * b * t * d * h * (k + v) + 2 * b * s * d * h * (k + v)
             + 2 * b * h * t * s * (k + v)
             + 4 * b * t * d * f)
  return hp.num_layers * encoder + hp.decoder_depth * decoder + 2 * b * t * d * vocab


def train_flops(hp):
  return 3 * forward_flops(hp)


def step_matmuls(hp, batch=BATCH, source=SOURCE_LENGTH, target=TARGET_LENGTH, vocab=VOCAB_SIZE):
  """-> {(batch dims, m, k, n, transpose_a, transpose_b): count}: our model's matmuls in one
  training step. Each forward C[m, n] = A[m, k] B[k, n] brings two more in the backward pass,
  dA = dC B^T and dB = A^T dC. Q, K, V are one matmul (attention.py), K and V of the encoder
  output one more; their FLOPs add up to train_flops (tests/test_layout.py checks)."""
  b, s, t, d, f, h = batch, source, target, hp.d_model, hp.d_ff, hp.num_heads
  k, v = hp.key_depth, hp.value_depth
  forward = collections.Counter()
  n_dec = hp.decoder_depth
  for length, n in ((s, hp.num_layers), (t, n_dec)):  # both stacks' self-attention and FFN
    forward[(1, b * length, d, h * (2 * k + v))] += n  # Q, K, V
    forward[(b * h, length, k, length)] += n  # Q K^T
    forward[(b * h, length, length, v)] += n  # weights x V
    forward[(1, b * length, h * v, d)] += n  # output
    forward[(1, b * length, d, f)] += n
    forward[(1, b * length, f, d)] += n
  forward[(1, b * t, d, h * k)] += n_dec  # encoder-decoder attention: Q
  forward[(1, b * s, d, h * (k + v))] += n_dec  # K, V of the encoder output
  forward[(b * h, t, k, s)] += n_dec
  forward[(b * h, t, s, v)] += n_dec
  forward[(1, b * t, h * v, d)] += n_dec
  forward[(1, b * t, d, vocab)] += 1  # the shared embedding as the vocabulary projection
  matmuls = collections.Counter()
  for (batches, m, inner, n), count in forward.items():
    matmuls[(batches, m, inner, n, False, False)] += count  # C = A B
    matmuls[(batches, m, n, inner, False, True)] += count  # dA = dC B^T: [m, n] x [k, n]^T
    matmuls[(batches, inner, m, n, True, False)] += count  # dB = A^T dC: [m, k]^T x [m, n]
  return matmuls


def make_matmul_floor(hp, precision, xla):
  """-> measure(): seconds that our step's matmuls (step_matmuls) take in `precision`'s compute
  dtype, each run alone (under XLA with `xla`), summed: the step time with nothing but its
  matmuls, a floor for our step."""
  rng = np.random.default_rng(0)
  dtype = keras.DTypePolicy(mixed_precision.PRECISIONS[precision]).compute_dtype
  functions = []
  for (batches, m, k, n, transpose_a, transpose_b), count in step_matmuls(hp).items():
    a = tf.constant(rng.standard_normal([batches] + ([k, m] if transpose_a else [m, k])), dtype)
    b = tf.constant(rng.standard_normal([batches] + ([n, k] if transpose_b else [k, n])), dtype)
    function = tf.function(
        lambda a, b, ta=transpose_a, tb=transpose_b: tf.matmul(
            a, b, transpose_a=ta, transpose_b=tb)[0, 0, 0], jit_compile=xla)
    function(a, b).numpy()  # compile, warm up
    # Enough calls to time ~0.1 s of work at 200 GFLOP/s.
    calls = max(1, int(2e10 / (2 * batches * m * k * n)))
    functions.append((function, a, b, calls, count))

  def measure():
    total = 0.0
    for function, a, b, calls, count in functions:
      start = time.perf_counter()
      for _ in range(calls):
        out = function(a, b)
      out.numpy()
      total += count * (time.perf_counter() - start) / calls
    return total

  return measure


class KerasHubTransformer(keras.Model):
  """The same encoder-decoder built from keras-hub layers (post-norm, ReLU, tied projection)."""

  def __init__(self, hp, vocab_size, max_length, **kwargs):
    super().__init__(**kwargs)
    self.embedding = keras_hub.layers.TokenAndPositionEmbedding(
        vocab_size, max_length, hp.d_model, tie_weights=True, name="embedding")
    self.encoder_layers = [
        keras_hub.layers.TransformerEncoder(hp.d_ff, hp.num_heads, dropout=hp.dropout,
                                            layer_norm_epsilon=1e-6, name=f"encoder_{i}")
        for i in range(hp.num_layers)]
    self.decoder_layers = [
        keras_hub.layers.TransformerDecoder(hp.d_ff, hp.num_heads, dropout=hp.dropout,
                                            layer_norm_epsilon=1e-6, name=f"decoder_{i}")
        for i in range(hp.decoder_depth)]
    self.dropout = keras.layers.Dropout(hp.dropout)

  def call(self, features, training=False):
    inputs, targets = features["inputs"], features["targets"]
    decoder_inputs = tf.pad(targets, [[0, 0], [1, 0]])[:, :-1]  # shifted right, as ours
    inputs_mask = tf.not_equal(inputs, 0)
    x = self.dropout(self.embedding(inputs), training=training)
    for layer in self.encoder_layers:
      x = layer(x, padding_mask=inputs_mask, training=training)
    y = self.dropout(self.embedding(decoder_inputs), training=training)
    for layer in self.decoder_layers:
      y = layer(y, x, encoder_padding_mask=inputs_mask, training=training)
    return self.embedding.token_embedding(y, reverse=True)  # [B, T, V]


def build(implementation, hp):
  if implementation == "t2t_lite":
    return t2t_lite.build_model(hp, VOCAB_SIZE)
  model = KerasHubTransformer(hp, VOCAB_SIZE, max(SOURCE_LENGTH, TARGET_LENGTH))
  model(make_batch(1), training=False)  # creates the weights
  return model


def make_batch(batch=BATCH, seed=0):
  rng = np.random.default_rng(seed)
  return {"inputs": tf.constant(rng.integers(2, VOCAB_SIZE, [batch, SOURCE_LENGTH]), tf.int32),
          "targets": tf.constant(rng.integers(2, VOCAB_SIZE, [batch, TARGET_LENGTH]), tf.int32)}


def timed_step(model, hp, xla):
  """The trainer's own step (t2t_lite.train.steps) on one device, one micro-batch a step."""
  optimizer = make_optimizer(hp)
  optimizer.build(model.trainable_variables)
  step = make_train_step(model, optimizer, label_smoothing=hp.label_smoothing, jit_compile=xla)

  @tf.function
  def run(features):
    loss_sum, count, _ = step((features,))
    return loss_sum / count

  return run


def cpu_seconds():
  """CPU time of this process (all threads): unlike wall time, barely inflated by other load."""
  usage = resource.getrusage(resource.RUSAGE_SELF)
  return usage.ru_utime + usage.ru_stime


def time_steps(step, features, steps):
  """(wall seconds, CPU seconds) per step over `steps` back-to-back steps."""
  start, start_cpu = time.perf_counter(), cpu_seconds()
  for _ in range(steps):
    loss = step(features)
  loss.numpy()
  return (time.perf_counter() - start) / steps, (cpu_seconds() - start_cpu) / steps


def make_matmul(xla):
  """-> measure(): {size: (FLOP/s, FLOP per CPU-second)} of square fp32 tf.matmul, best of 3."""
  rng = np.random.default_rng(0)
  functions = {}
  for n in MATMUL_SIZES:
    a = tf.constant(rng.standard_normal([n, n]), tf.float32)
    b = tf.constant(rng.standard_normal([n, n]), tf.float32)
    function = tf.function(lambda a, b: tf.matmul(a, b)[0, 0], jit_compile=xla)
    function(a, b).numpy()  # compile, warm up
    functions[n] = (function, a, b)

  def measure(repeats=3):
    result = {}
    for n, (function, a, b) in functions.items():
      wall = cpu = float("inf")
      for _ in range(repeats):
        start, start_cpu = time.perf_counter(), cpu_seconds()
        function(a, b).numpy()
        wall = min(wall, time.perf_counter() - start)
        cpu = min(cpu, cpu_seconds() - start_cpu)
      result[n] = (2 * n ** 3 / wall, 2 * n ** 3 / cpu)
    return result

  return measure


def load_average():
  return [round(x, 2) for x in os.getloadavg()]


def main():
  """One script from flags to the JSON line, kept in order on purpose: every round of every
  configuration is interleaved here, and that order is what makes the rounds comparable."""
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--models", default="transformer_base,small",
                      help="comma-separated: transformer_base, small")
  parser.add_argument("--steps", type=int, default=0,
                      help="timed steps per round (default: 4 for transformer_base, 16 for small)")
  parser.add_argument("--rounds", type=int, default=3,
                      help="timing rounds per configuration, interleaved; the median is reported")
  parser.add_argument("--xla", default="on,off", help="comma-separated: on, off")
  parser.add_argument("--implementations", default="t2t_lite,keras_hub",
                      help="comma-separated: t2t_lite, keras_hub")
  parser.add_argument("--precisions", default="none,bf16",
                      help="comma-separated compute precisions "
                           "(t2t_lite/modeling/mixed_precision.py); the fraction of peak "
                           "and the targets are judged on none (float32)")
  parser.add_argument("--no_trace", dest="trace", action="store_false",
                      help="skip the traced steps (bench/step_trace.py) of our steps without XLA")
  parser.add_argument("--quick", action="store_true",
                      help="smoke run: 2 rounds of 2 steps")
  args = parser.parse_args()
  models = [m for m in args.models.split(",") if m]
  xla_modes = [{"on": True, "off": False}[m] for m in args.xla.split(",") if m]
  implementations = [i for i in args.implementations.split(",") if i]
  for name in implementations:
    if name not in ("t2t_lite", "keras_hub"):
      parser.error(f"unknown implementation {name!r}: expected t2t_lite or keras_hub")
  precisions = [p for p in args.precisions.split(",") if p]
  for precision in precisions:
    mixed_precision.check(precision)
  rounds = 2 if args.quick else args.rounds
  tf.get_logger().setLevel("ERROR")  # one tf.function per matmul size is not a retracing bug

  load_before = load_average()
  measure_matmul = {"xla": make_matmul(True), "onednn": make_matmul(False)}
  matmul = {kind: [measure()] for kind, measure in measure_matmul.items()}
  features = make_batch()
  tokens = BATCH * TARGET_LENGTH
  results = {}
  for name in models:
    hp = model_hparams(name)
    steps = 2 if args.quick else (args.steps or (4 if name == "transformer_base" else 16))
    flops = train_flops(hp)
    results[name] = {"train_flops_per_step": flops, "timed_steps": steps * rounds}
    for xla in xla_modes:
      measure_floors = {precision: make_matmul_floor(hp, precision, xla)
                        for precision in precisions}
      floors = {precision: [] for precision in precisions}  # seconds, one a round
      runs = {}  # "t2t_lite", "keras_hub", "t2t_lite_bf16", ...: float32 keeps the plain name
      for impl in implementations:
        for precision in precisions:
          keras.utils.set_random_seed(0)
          with mixed_precision.building(precision):
            model = build(impl, hp)
          step = timed_step(model, hp, xla)
          start = time.perf_counter()
          step(features).numpy()  # trace + compile
          compile_s = time.perf_counter() - start
          step(features).numpy()  # warm up
          runs[impl if precision == "none" else f"{impl}_{precision}"] = {
              "step": step, "times": [], "compile_s": compile_s, "precision": precision,
              "params": sum(int(np.prod(v.shape)) for v in model.trainable_variables)}
      for _ in range(rounds):  # interleaved: every configuration, the matmul peaks, ...
        for run in runs.values():
          run["times"].append(time_steps(run["step"], features, steps))
        for kind, measure in measure_matmul.items():
          matmul[kind].append(measure(1))
        for precision, measure in measure_floors.items():
          floors[precision].append(measure())
      entry = {}
      for precision, seconds in floors.items():
        suffix = "" if precision == "none" else f"_{precision}"
        entry[f"matmul_floor_ms{suffix}"] = round(1000 * float(np.median(seconds)), 1)
        entry[f"matmul_floor_ms{suffix}_rounds"] = [round(1000 * floor) for floor in seconds]
        entry[f"matmul_floor_gflops_per_s{suffix}"] = round(
            flops / float(np.median(seconds)) / 1e9, 2)
      for key, run in runs.items():
        walls = [wall for wall, _ in run["times"]]
        seconds = float(np.median(walls))
        cpu = float(np.median([cpu for _, cpu in run["times"]]))
        entry[key] = {
            "precision": run["precision"],
            "tokens_per_s": round(tokens / seconds, 1),
            "tokens_per_s_min_max": [round(tokens / max(walls), 1), round(tokens / min(walls), 1)],
            "model_gflops_per_s": round(flops / seconds / 1e9, 2),
            "step_ms": round(1000 * seconds, 1),
            "step_ms_rounds": [round(1000 * wall) for wall in walls],
            "cpu_s_per_step": round(cpu, 3),
            "model_gflops_per_cpu_s": round(flops / cpu / 1e9, 2),
            "compile_s": round(run["compile_s"], 1),
            "params": run["params"]}
        if key.startswith("t2t_lite"):  # per round: our step / its matmuls alone
          entry[key]["step_over_floor"] = round(float(np.median(
              [wall / floor for wall, floor in zip(walls, floors[run["precision"]])])), 3)
        if key.startswith("t2t_lite") and not xla and args.trace:  # its matmuls inside it
          trace = step_trace.split_step(run["step"], features)
          floor_ms = 1000 * float(np.median(floors[run["precision"]]))
          trace["matmul_busy_over_floor"] = round(trace["matmul_busy_ms"] / floor_ms, 3)
          entry[key]["trace"] = trace
      for suffix in [""] + [f"_{p}" for p in precisions if p != "none"]:
        ours, theirs = runs.get("t2t_lite" + suffix), runs.get("keras_hub" + suffix)
        if ours and theirs:  # per round: theirs / ours
          ratios = [b[0] / a[0] for a, b in zip(ours["times"], theirs["times"])]
          entry["speedup_vs_keras_hub" + suffix] = round(float(np.median(ratios)), 3)
          entry[f"speedup_vs_keras_hub{suffix}_rounds"] = [round(r, 3) for r in ratios]
      if "keras_hub" in runs and "none" in floors:  # per round: keras-hub's / our matmuls
        ceilings = [b[0] / floor for b, floor in zip(runs["keras_hub"]["times"], floors["none"])]
        entry["speedup_ceiling_vs_keras_hub"] = round(float(np.median(ceilings)), 3)
      if "t2t_lite" in runs and "t2t_lite_bf16" in runs:  # per round: float32 / bf16
        ratios = [a[0] / b[0] for a, b in zip(runs["t2t_lite"]["times"],
                                              runs["t2t_lite_bf16"]["times"])]
        entry["bf16_speedup_vs_float32"] = round(float(np.median(ratios)), 3)
      results[name]["xla" if xla else "no_xla"] = entry
      del runs

  def best(kind, index):  # over sizes and rounds
    return max(sample[index] for by_size in matmul[kind] for sample in by_size.values())

  peak, peak_cpu = best("xla", 0), best("xla", 1)
  for name, result in results.items():
    for mode in ("xla", "no_xla"):
      for impl, entry in result.get(mode, {}).items():
        if not isinstance(entry, dict):
          continue  # a speedup
        entry["fraction_of_matmul"] = round(entry["model_gflops_per_s"] * 1e9 / peak, 3)
        entry["fraction_of_matmul_cpu_time"] = round(
            entry["model_gflops_per_cpu_s"] * 1e9 / peak_cpu, 3)
      if "t2t_lite" in result.get(mode, {}) and "keras_hub" in result[mode]:
        ours, theirs = result[mode]["t2t_lite"], result[mode]["keras_hub"]
        result[mode]["speedup_vs_keras_hub_cpu_time"] = round(
            theirs["cpu_s_per_step"] / ours["cpu_s_per_step"], 3)
  # The targets, for transformer_base, judged on wall time and (load-robust) on CPU time.
  targets = {}
  for mode, result in results.get("transformer_base", {}).items():
    if mode not in ("xla", "no_xla") or "t2t_lite" not in result:
      continue
    for suffix in ("", "_cpu_time"):
      fraction = result["t2t_lite"]["fraction_of_matmul" + suffix]
      targets[f"{mode}_fraction_of_matmul{suffix}"] = {
          "value": fraction, "target": TARGET_FRACTION_OF_MATMUL,
          "met": fraction >= TARGET_FRACTION_OF_MATMUL}
      if "speedup_vs_keras_hub" + suffix in result:
        speedup = result["speedup_vs_keras_hub" + suffix]
        targets[f"{mode}_speedup_vs_keras_hub{suffix}"] = {
            "value": speedup, "target": TARGET_SPEEDUP_VS_KERAS_HUB,
            "met": speedup >= TARGET_SPEEDUP_VS_KERAS_HUB}
        if "speedup_ceiling_vs_keras_hub" in result and not suffix:
          targets[f"{mode}_speedup_vs_keras_hub"]["ceiling"] = (
              result["speedup_ceiling_vs_keras_hub"])
  auto = {name: auto_precision.check(
      {(entry["precision"], mode == "xla"): entry["tokens_per_s"]
       for mode in ("xla", "no_xla") for impl, entry in result.get(mode, {}).items()
       if impl.startswith("t2t_lite")}) for name, result in results.items()}
  for name, verdict in auto.items():  # the step at the precision auto picks, over its floor
    for mode, choice in verdict.items():
      run = "t2t_lite" + ("" if choice["auto"] == "none" else f"_{choice['auto']}")
      ours = results[name][mode].get(run, {})
      choice["step_over_floor"] = ours.get("step_over_floor")
      if "trace" in ours:
        choice["matmul_busy_over_floor"] = ours["trace"]["matmul_busy_over_floor"]
  print(json.dumps({
      "bench": "train_throughput",
      "batch": BATCH, "source_length": SOURCE_LENGTH, "target_length": TARGET_LENGTH,
      "vocab_size": VOCAB_SIZE, "precisions": precisions,
      "matmul_gflops_per_s": round(peak / 1e9, 2),
      "matmul_gflops_per_cpu_s": round(peak_cpu / 1e9, 2),
      "matmul_by_size_gflops_per_s": {
          kind: {n: round(max(s[n][0] for s in samples) / 1e9, 1) for n in MATMUL_SIZES}
          for kind, samples in matmul.items()},
      "matmul_onednn_gflops_per_s": round(best("onednn", 0) / 1e9, 2),
      "matmul_onednn_gflops_per_cpu_s": round(best("onednn", 1) / 1e9, 2),
      "cpus": os.cpu_count(), "load_average_before": load_before,
      "load_average_after": load_average(),
      "auto_precision": auto,
      "results": results, "targets": targets}))


if __name__ == "__main__":
  main()
