"""Beam-search decoding speed as t2t-lite-decode runs it, with --xla and without, at batch 32
and 1, in each compute precision. ONE JSON line.

The paper's decoding settings (beam 4, alpha 0.6, max output = input length + 50) on a
transformer_base-size model (random weights) with a 32k vocabulary, computing in float32
("none") and in each of --precisions (t2t_lite/modeling/mixed_precision.py; the same
weights); every source sentence has 32 tokens (31 random ids + EOS). EOS is masked (a
constraint, the search's hook for a parser's grammar), so every hypothesis runs to the maximum
length, 82 tokens: random weights would otherwise stop at arbitrary points, and the number of
steps would not be comparable between runs or programs.

Each configuration is the library call t2t-lite-decode makes, `Translator.decode_ids` (its
decode_text without the tokenizer):
  xla       Translator(jit_compile=True), what --xla runs: the search XLA-compiled, over
            fixed-size [B*K, H, L, ...] key/value buffers read through each hypothesis' rows
            (search.beams' static_shapes, the form a TPU runs);
  no xla    the default: keys/values growing by one slot a step, reordered by beam; bf16,
            and where TensorFlow runs without oneDNN float32 with compiled matmuls and int8,
            search the batch as two halves at once (search.beams' concurrent, chosen by
            the decoding plan, t2t_lite/decode/plan.py; see docs/decoding.md).

Each configuration is traced / compiled and run once untimed (same shapes), then timed in
`--rounds` rounds interleaved with the other configurations (round 1 of each, then round 2 of
each, ...), so that the machine's drift falls on all of them alike; the headline is each
configuration's median round, with the fastest and slowest round beside it.
sentences/s = batch / seconds (wall clock); cpu_seconds is the process's CPU time for the same
run (user + system, all threads): on a loaded machine wall time grows, CPU time much less, so
the two together tell slow code from a busy machine. tokens/s counts the generated tokens of
the K * B hypotheses (B * K * 82 per run; divide by K for the returned translations).

Target (issue 5): batch 32: >= 2.15 sentences/s, half of CTranslate2 fp32's ~4.3 on this
machine.

  python bench/decode_speed.py                                  # 8 configurations
  python bench/decode_speed.py --batches=32 --precisions=none   # the float32 headline, both ways
  python bench/decode_speed.py --rounds=1 --batches=2 --precisions=none   # a smoke run
"""
import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import t2t_lite  # noqa: E402
from t2t_lite.data.tokenizers import EOS_ID  # noqa: E402
from t2t_lite.decode import plan, translation  # noqa: E402
from t2t_lite.decode.beam_search import NEG_INF  # noqa: E402
from t2t_lite.modeling import mixed_precision, quantization  # noqa: E402

import auto_precision  # noqa: E402  (bench/, beside this file)

VOCAB_SIZE, SOURCE_LENGTH, EXTRA_LENGTH, BEAM_SIZE, ALPHA = 32000, 32, 50, 4, 0.6
TARGET_SENTENCES_PER_SECOND = 2.15


def build_models(precisions):
  """{precision: transformer_base model}, all with the float32 model's (seeded) weights."""
  keras.utils.set_random_seed(0)
  hparams = t2t_lite.get_hparams("transformer_base")
  models = {"none": t2t_lite.build_model(hparams, VOCAB_SIZE)}
  for precision in precisions:
    if precision not in models:  # as t2t-lite-decode builds it
      models[precision] = mixed_precision.inference_model(models["none"], precision)
  return models


class EosMasked:
  """A constraint (search.beams' `constraint`) that forbids EOS: every hypothesis runs to its
  maximum length."""

  def initial_state(self, inputs, max_lengths):
    return ()

  def mask_logits(self, ids, index, state, logits):
    return logits + tf.one_hot(EOS_ID, tf.shape(logits)[-1], on_value=NEG_INF), state


def searches(model, xla):
  """How many concurrent searches t2t-lite-decode splits a batch into for `model` (as it is:
  its weight matmuls compiled or not) on this machine: the decoding plan's choice."""
  compiled = getattr(model.embedding, "compiled", None) is not None
  return plan.concurrent_searches(mixed_precision.of_model(model), plan.capabilities(), xla,
                                  compiled)[0]


def decoder(model, xla):
  """What t2t-lite-decode runs, with --xla or without, EOS masked: sources int32 [B, S]
  (0-padded, ending in EOS) -> the best outputs' ids int32 [B, 1, L] (no tokenizer: the
  translator's ids in, ids out function)."""
  translator = translation.Translator(model, None, beam_size=BEAM_SIZE, alpha=ALPHA,
                                      extra_length=EXTRA_LENGTH, jit_compile=xla,
                                      constraint=EosMasked(), searches=searches(model, xla))
  return lambda inputs: translator.decode_ids(inputs)["outputs"]


def search_model(models, precision, xla):
  """models[precision] as t2t-lite-decode searches with it on this machine, with or without
  XLA: a copy whose weight matmuls are XLA programs of their own where the decoding plan says
  so."""
  compiled = plan.decide(precision, xla, models["none"].hparams.d_model,
                         plan.capabilities()).compiled_matmuls
  if not compiled or precision == "int8":
    return models[precision]
  return mixed_precision.inference_model(models["none"], precision, compiled_matmuls=True)


def compile_config(model, batch, xla):
  """Traces / compiles one configuration and runs it once: -> (run(), its result dict)."""
  rng = np.random.default_rng(batch)
  inputs = rng.integers(3, VOCAB_SIZE, [batch, SOURCE_LENGTH]).astype(np.int32)
  inputs[:, -1] = EOS_ID
  inputs = tf.constant(inputs)
  decode = decoder(model, xla)
  start = time.perf_counter()
  ids = decode(inputs)
  first = time.perf_counter() - start
  assert ids.shape == (batch, 1, SOURCE_LENGTH + EXTRA_LENGTH), ids.shape
  assert int(tf.reduce_min(ids)) > 1, "EOS is masked: every hypothesis runs to the maximum"
  return (lambda: decode(inputs).numpy()), {
      "precision": mixed_precision.of_model(model), "batch": batch, "xla": xla,
      "compiled_matmuls": isinstance(model.embedding.compiled, quantization.FloatKernel),
      "searches": searches(model, xla),
      "first_call_seconds": round(first, 1), "times": [], "cpu_times": []}


def time_round(run, result):
  start, cpu_start = time.perf_counter(), time.process_time()
  run()
  result["times"].append(time.perf_counter() - start)
  result["cpu_times"].append(time.process_time() - cpu_start)


def summary(result):
  """The median round (min and max beside it); with no timed round, the first call's time,
  tracing / compiling included."""
  times, cpu_times = result.pop("times"), result.pop("cpu_times")
  seconds = float(np.median(times)) if times else result["first_call_seconds"]
  batch = result["batch"]
  return dict(result, seconds=round(seconds, 3), rounds=len(times),
              seconds_min=round(min(times), 3) if times else None,
              seconds_max=round(max(times), 3) if times else None,
              includes_compilation=not times,
              cpu_seconds=round(float(np.median(cpu_times)), 3) if cpu_times else None,
              sentences_per_second=round(batch / seconds, 3),
              sentences_per_second_min_max=[round(batch / max(times), 3),
                                            round(batch / min(times), 3)] if times else None,
              tokens_per_second=round(batch * BEAM_SIZE * (SOURCE_LENGTH + EXTRA_LENGTH)
                                      / seconds, 1))


def cpu_flags():
  """The CPU features that decide which precision is fast here."""
  try:
    with open("/proc/cpuinfo") as f:
      flags = set(next(line for line in f if line.startswith("flags")).split())
  except (OSError, StopIteration):
    return None
  return sorted(flags & {"avx2", "avx512f", "avx512_bf16", "avx512_vnni", "avx_vnni",
                         "amx_bf16", "amx_int8", "amx_tile", "avx512_fp16"})


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rounds", type=int, default=3,
                      help="timed rounds per configuration, interleaved; the median is reported")
  parser.add_argument("--precisions", default="none,bf16",
                      help="comma-separated compute precisions "
                           f"({', '.join(mixed_precision.PRECISIONS)}; fp16 is for GPUs)")
  parser.add_argument("--batches", default="32,1", help="comma-separated batch sizes")
  args = parser.parse_args()

  precisions = [p for p in args.precisions.split(",") if p]
  for precision in precisions:
    mixed_precision.check(precision)
  models = build_models(precisions)
  load_before = os.getloadavg()[0]
  configs = []  # (run, result)
  for batch in (int(b) for b in args.batches.split(",")):
    for precision in precisions:
      for xla in (True, False):
        run, result = compile_config(search_model(models, precision, xla), batch, xla)
        configs.append((run, result))
        print(json.dumps(result), file=sys.stderr, flush=True)
  for _ in range(args.rounds):  # interleaved
    for run, result in configs:
      time_round(run, result)
  results = [summary(result) for _, result in configs]
  # Per precision, the faster of XLA on / off (each a median round).
  batch_32 = {precision: max((r["sentences_per_second"] for r in results
                              if r["batch"] == 32 and r["precision"] == precision),
                             default=None)
              for precision in precisions}
  print(json.dumps({
      "benchmark": "decode_speed", "model": "transformer_base", "vocab_size": VOCAB_SIZE,
      "source_length": SOURCE_LENGTH, "output_length": SOURCE_LENGTH + EXTRA_LENGTH,
      "beam_size": BEAM_SIZE, "alpha": ALPHA, "rounds": args.rounds, "results": results,
      "batch32_sentences_per_second": batch_32,
      "target_sentences_per_second": TARGET_SENTENCES_PER_SECOND,
      "meets_target": (batch_32.get("none") or 0) >= TARGET_SENTENCES_PER_SECOND,
      # auto's precision and whole decoding plan beside the fastest measured
      "auto_precision": auto_precision.check(
          {(r["precision"], r["xla"]): r["sentences_per_second"] for r in results
           if r["batch"] == max(r["batch"] for r in results)},
          d_model=models["none"].hparams.d_model),
      "cpu_flags": cpu_flags(),
      "load_average_before": round(load_before, 2),
      "load_average_after": round(os.getloadavg()[0], 2)}))


if __name__ == "__main__":
  main()
