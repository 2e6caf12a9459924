"""Beam-search decoding speed next to CTranslate2 (the peer a CPU-serving user would pick), on
the same weights and the same workload. ONE JSON line. Written against ctranslate2 4.8.5.

The workload is bench/decode_speed.py's batch-32 headline: a transformer_base-size model
(random weights, keras seed 0) with a 32k vocabulary, 32 source sentences of 32 tokens (31 random
ids + EOS), beam 4, alpha 0.6, every hypothesis forced to run to 82 output tokens (EOS masked
before that), so that both programs do the same number of steps.

Our model's weights are converted into a CTranslate2 TransformerSpec by t2t-lite-export
--format=ctranslate2's converter (t2t_lite/decode/ctranslate2_export.py: post-norm, ReLU, shared
embeddings scaled by sqrt(d_model), tied output projection, our interleaved sinusoid table passed
as the position encodings) and saved to a temporary directory. Every run first checks the
conversion: greedy decoding of 4 sentences, 20 tokens, in float32, must give the same ids in
both ("greedy_outputs_match"). Then each configuration is run once untimed (tracing / XLA
compilation, weight quantization) and timed in --rounds interleaved rounds (round 1 of each,
then round 2 of each, ...); each reports its median round, with the slowest and fastest beside it.

  t2t_lite     beam search as t2t-lite-decode runs it with --xla and without
               (decode_speed.decoder: Translator.decode_ids), float32, bf16 and int8 (the
               same weights; int8: --precision=int8, t2t_lite/modeling/quantization.py);
               float32 without XLA also with its weight matmuls as XLA programs of their own
               ("compiled_matmuls", what t2t-lite-decode runs where TensorFlow has no oneDNN:
               the decoding plan, t2t_lite/decode/plan.py; "compiled_matmuls_here" says
               whether here), each batch split into as many concurrent searches as
               t2t-lite-decode splits it into here ("searches": the plan's);
  ctranslate2  compute types float32, int8, and int8_float32 / bfloat16 / int8_bfloat16 where
               this build supports them on this CPU; intra_threads = os.cpu_count().
  litert       the same search converted as t2t-lite-export --format=litert converts it
               (t2t_lite/decode/litert_export.py), weights float32, float16 and int8 dynamic
               range, in ai_edge_litert's interpreter (XNNPACK) on os.cpu_count() threads; when
               ai_edge_litert is installed (pip install -e '.[litert]'). Each conversion of the
               base model takes half a minute. No shortlist rows: the LiteRT model has none.

With --shortlist_data_dir (a prepared multi30k_ende data_dir), the vocabulary shortlist rows
too: the table built from its training pairs (t2t_lite/decode/shortlist.py, as t2t-lite-decode
--shortlist builds it) is ours, and the same table written as a CTranslate2 vocabulary map
(`<source token>\t<candidates>`, the frequent tokens under the empty key) is CTranslate2's
(`use_vmap`): the fair pairing. The sources are then Multi30k test sentences (their ids, run
together into rows of 31 tokens + EOS) for every row, so that each batch's shortlist is the
size real text gives; the random model's other 24k ids are in no shortlist, as a 32k
vocabulary's rare tokens would not be. "shortlist_size" is our batch vocabulary's size.

  ours_shortlist   search.beams with the shortlist (what --shortlist runs; called directly,
                   since Translator refuses a constraint beside a shortlist and EOS is masked
                   here by one), float32 (also with compiled matmuls), bf16 and int8 without
                   XLA;
  ctranslate2      use_vmap=True in int8 / int8_float32 / float32.

CTranslate2's length penalty is length^alpha, ours GNMT's ((5 + length) / 6)^alpha: with every
hypothesis 82 tokens long, both rank hypotheses alike. CTranslate2 is an optional extra of
t2t_lite (pip install -e '.[ctranslate2]'), or install it into a throwaway directory:

  python3 -m pip install --no-deps --target /tmp/ct2lib ctranslate2 pyyaml
  PYTHONPATH=/tmp/ct2lib python bench/ctranslate2_decode.py            # 3 rounds (~10 minutes)
  PYTHONPATH=/tmp/ct2lib python bench/ctranslate2_decode.py --quick    # 1 round
  PYTHONPATH=/tmp/ct2lib python bench/ctranslate2_decode.py \
      --shortlist_data_dir=<t2t-lite-datagen --problem=multi30k_ende's data_dir>
"""
import argparse
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

try:
  import ctranslate2
except ImportError:
  print("ctranslate2 is missing: python3 -m pip install --no-deps --target /tmp/ct2lib "
        "ctranslate2 pyyaml, then run with PYTHONPATH=/tmp/ct2lib", file=sys.stderr)
  sys.exit(2)

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import t2t_lite  # noqa: E402
from t2t_lite.modeling import mixed_precision, quantization  # noqa: E402
from t2t_lite.data import data_files, pipeline  # noqa: E402
from t2t_lite.decode import ctranslate2_export, litert_export, plan, shortlist  # noqa: E402
from t2t_lite.decode import translation  # noqa: E402
from t2t_lite.decode.search import beams, trim_at_eos  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from decode_speed import EosMasked, cpu_flags, decoder, searches  # noqa: E402

try:  # The LiteRT rows need the optional ai_edge_litert (pip install -e '.[litert]').
  from ai_edge_litert.interpreter import Interpreter
except ImportError:
  Interpreter = None

VOCAB_SIZE, BATCH, SOURCE_LENGTH, EXTRA_LENGTH, BEAM_SIZE, ALPHA = 32000, 32, 32, 50, 4, 0.6
OUTPUT_LENGTH = SOURCE_LENGTH + EXTRA_LENGTH  # 82
GREEDY_SENTENCES, GREEDY_LENGTH = 4, 20
# Id i is token VOCAB[i]. Our decoder starts from id 0 (also padding, never generated): it is
# CTranslate2's decoder start token "<s>", which the converted model never outputs (a bias of
# the projection, t2t_lite/decode/ctranslate2_export.py); id 1 is EOS.
VOCAB = ["<s>", "</s>", "<unk>"] + [f"t{i}" for i in range(3, VOCAB_SIZE)]
TOKEN_IDS = {token: i for i, token in enumerate(VOCAB)}
CT2_COMPUTE_TYPES = ("float32", "int8", "int8_float32", "bfloat16", "int8_bfloat16")


def translate(translator, inputs, **options):
  """inputs int [B, S] -> every hypothesis' ids, [B][num_hypotheses][its length]."""
  results = translator.translate_batch([[VOCAB[i] for i in row] for row in inputs], **options)
  return [[[TOKEN_IDS[token] for token in hypothesis] for hypothesis in result.hypotheses]
          for result in results]


def greedy_check(model, translator, inputs):
  """Greedy decoding of inputs int [b, S] with both, GREEDY_LENGTH tokens at most, float32 ->
  (identical, matching tokens, tokens)."""
  ids, _ = tf.function(lambda x: beams(
      model, x, beam_size=1, alpha=ALPHA, extra_length=0,
      max_lengths=tf.fill([len(inputs)], GREEDY_LENGTH)))(tf.constant(inputs))  # [b, 1, S]
  ours = [[i for i in row if i] for row in trim_at_eos(ids[:, 0]).numpy().tolist()]
  theirs = [hyps[0] for hyps in translate(translator, inputs, beam_size=1,
                                          max_decoding_length=GREEDY_LENGTH)]
  matching = sum(a == b for x, y in zip(ours, theirs) for a, b in zip(x, y))
  return ours == theirs, matching, sum(len(x) for x in ours)


def ours_config(model, inputs, xla):
  """Compiles our batch decoder and runs it once -> (run(), result dict)."""
  decode = decoder(model, xla)
  inputs = tf.constant(inputs)
  start = time.perf_counter()
  ids = decode(inputs).numpy()  # [B, 1, 82]: the best of the K
  first = time.perf_counter() - start
  assert ids.shape == (BATCH, 1, OUTPUT_LENGTH) and ids.min() > 1, ids.shape
  return (lambda: decode(inputs).numpy()), {
      "engine": "t2t_lite", "precision": mixed_precision.of_model(model), "xla": xla,
      "compiled_matmuls": isinstance(model.embedding.compiled, quantization.FloatKernel),
      "searches": searches(model, xla),
      "first_call_seconds": round(first, 1)}


def ours_shortlist_config(model, inputs, table):
  """Our search over each batch's shortlist (bf16 / float32, no XLA), run once -> (run(),
  result dict)."""
  search = tf.function(lambda x: beams(
      model, x, beam_size=BEAM_SIZE, alpha=ALPHA, extra_length=EXTRA_LENGTH,
      constraint=EosMasked(), shortlist=table, concurrent=searches(model, False))[0][:, :1],
      autograph=False)
  inputs = tf.constant(inputs)
  start = time.perf_counter()
  ids = search(inputs).numpy()  # [B, 1, 82]
  first = time.perf_counter() - start
  assert ids.shape == (BATCH, 1, OUTPUT_LENGTH) and ids.min() > 1, ids.shape
  return (lambda: search(inputs).numpy()), {
      "engine": "t2t_lite", "precision": mixed_precision.of_model(model), "xla": False,
      "compiled_matmuls": isinstance(model.embedding.compiled, quantization.FloatKernel),
      "searches": searches(model, False), "shortlist": True,
      "first_call_seconds": round(first, 1)}


def litert_config(model, inputs, weights, threads):
  """Our beam search as t2t-lite-export --format=litert converts it (litert_export's
  search_function and convert, the Translator's search with EOS masked, one search a batch)
  with `weights`, in ai_edge_litert's interpreter (XNNPACK) on `threads` threads, run once ->
  (run(), result dict)."""
  translator = translation.Translator(model, None, beam_size=BEAM_SIZE, alpha=ALPHA,
                                      extra_length=EXTRA_LENGTH, constraint=EosMasked(),
                                      searches=1)
  start = time.perf_counter()
  content = litert_export.convert(litert_export.search_function(translator), weights)
  converted = time.perf_counter() - start
  interpreter = Interpreter(model_content=content, num_threads=threads)
  feeds = {"inputs": inputs, "max_lengths": np.full([BATCH], OUTPUT_LENGTH, np.int32),
           "prefix": np.zeros([BATCH, 0], np.int32)}  # the rule: 31 tokens + 1 + 50
  inputs_by_name = {d["name"]: d["index"] for d in interpreter.get_input_details()}
  for name, value in feeds.items():
    interpreter.resize_tensor_input(inputs_by_name[name], list(value.shape))
  interpreter.allocate_tensors()
  ids_index = next(d["index"] for d in interpreter.get_output_details() if d["dtype"] == np.int32)

  def run():
    for name, value in feeds.items():
      interpreter.set_tensor(inputs_by_name[name], value)
    interpreter.invoke()
    return interpreter.get_tensor(ids_index)  # [B, 1, L]
  start = time.perf_counter()
  ids = run()
  first = time.perf_counter() - start
  assert ids.shape == (BATCH, 1, OUTPUT_LENGTH) and ids.min() > 1, ids.shape
  return run, {"engine": "litert", "weights": weights, "threads": threads,
               "model_mb": round(len(content) / 1e6, 1), "convert_seconds": round(converted, 1),
               "first_call_seconds": round(first, 1)}


def ctranslate2_config(model_dir, inputs, compute_type, use_vmap=False):
  """Loads the converted model in `compute_type` and runs it once -> (run(), result dict)."""
  start = time.perf_counter()
  translator = ctranslate2.Translator(model_dir, device="cpu", compute_type=compute_type,
                                      intra_threads=os.cpu_count(), inter_threads=1)
  run = lambda: translate(translator, inputs, beam_size=BEAM_SIZE, num_hypotheses=BEAM_SIZE,
                          length_penalty=ALPHA, min_decoding_length=OUTPUT_LENGTH,
                          max_decoding_length=OUTPUT_LENGTH, use_vmap=use_vmap)
  lengths = {len(hypothesis) for hyps in run() for hypothesis in hyps}
  assert lengths == {OUTPUT_LENGTH}, f"hypotheses of {lengths} tokens, not {OUTPUT_LENGTH}"
  return run, {"engine": "ctranslate2", "compute_type": compute_type, "use_vmap": use_vmap,
               "first_call_seconds": round(time.perf_counter() - start, 1)}


def multi30k_shortlist(data_dir):
  """(the shortlist of data_dir's training pairs, Multi30k test sources as int32 [B, S]: their
  ids run together into rows of S - 1 tokens, each ending in EOS)."""
  def pairs(split):
    return pipeline.read_records(data_files.record_paths(data_dir, split)).as_numpy_iterator()
  table = shortlist.build(((e["inputs"], e["targets"]) for e in pairs("train")), VOCAB_SIZE)
  ids = np.concatenate([e["inputs"][:-1] for e in pairs("test")])  # without their EOS
  inputs = ids[:BATCH * (SOURCE_LENGTH - 1)].reshape(BATCH, SOURCE_LENGTH - 1)
  return table, np.pad(inputs, [[0, 0], [0, 1]], constant_values=1).astype(np.int32)


def write_vocabulary_map(table, path):
  """The shortlist as CTranslate2's vocabulary map: `<source token>\t<candidates>` lines, the
  always-included tokens under the empty source."""
  candidates, known = table.candidates.numpy(), table.known.numpy()
  with open(path, "w") as f:
    f.write("\t" + " ".join(VOCAB[i] for i in table.frequent.numpy()) + "\n")
    for source in np.flatnonzero(known):
      f.write(VOCAB[source] + "\t" + " ".join(VOCAB[i] for i in candidates[source] if i) + "\n")


def summary(result, times):
  """The median round's speed, with the slowest and fastest round's beside it."""
  seconds = float(np.median(times))
  return dict(result, seconds=round(seconds, 3), rounds=len(times),
              sentences_per_second=round(BATCH / seconds, 3),
              sentences_per_second_min_max=[round(BATCH / max(times), 3),
                                            round(BATCH / min(times), 3)])


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rounds", type=int, default=3,
                      help="timed rounds per configuration, interleaved; the median is reported")
  parser.add_argument("--quick", action="store_true", help="1 round (a smoke run)")
  parser.add_argument("--shortlist_data_dir", default=None,
                      help="a prepared multi30k_ende data_dir: adds the shortlist rows (above)")
  args = parser.parse_args()
  rounds = 1 if args.quick else args.rounds

  keras.utils.set_random_seed(0)  # as decode_speed.py: the same weights and sentences
  hparams = t2t_lite.get_hparams("transformer_base")
  models = {"none": t2t_lite.build_model(hparams, VOCAB_SIZE)}
  for precision in ("bf16", "int8"):
    models[precision] = mixed_precision.inference_model(models["none"], precision)
  models["none+compiled"] = mixed_precision.inference_model(models["none"], "none", True)
  rng = np.random.default_rng(BATCH)
  inputs = rng.integers(3, VOCAB_SIZE, [BATCH, SOURCE_LENGTH]).astype(np.int32)  # [B, S]
  inputs[:, -1] = 1  # EOS
  table = None
  if args.shortlist_data_dir:
    table, inputs = multi30k_shortlist(args.shortlist_data_dir)
  supported = ctranslate2.get_supported_compute_types("cpu")

  load_before = os.getloadavg()[0]
  with tempfile.TemporaryDirectory() as tmp:
    vocabulary_map = None
    if table is not None:
      vocabulary_map = os.path.join(tmp, "vmap.txt")
      write_vocabulary_map(table, vocabulary_map)
    # The converter of t2t-lite-export --format=ctranslate2, without its source EOS: every row
    # of `inputs` ends in one already.
    spec = ctranslate2_export.model_spec(models["none"], VOCAB, hparams.max_length)
    spec.config.add_source_eos = False
    model_dir = ctranslate2_export.save(spec, os.path.join(tmp, "model"), vmap=vocabulary_map)
    check = greedy_check(models["none"], ctranslate2.Translator(model_dir, compute_type="float32"),
                         inputs[:GREEDY_SENTENCES])
    print(f"greedy outputs match: {check}", file=sys.stderr, flush=True)
    configs = [ours_config(models[precision], inputs, xla)
               for precision in ("none", "bf16", "int8") for xla in (True, False)]
    configs.append(ours_config(models["none+compiled"], inputs, False))
    configs += [ctranslate2_config(model_dir, inputs, compute_type)
                for compute_type in CT2_COMPUTE_TYPES if compute_type in supported]
    if Interpreter is not None:  # The shortlist is not in the LiteRT model: no rows with it.
      configs += [litert_config(models["none"], inputs, weights, os.cpu_count())
                  for weights in ("float32", "float16", "int8")]
    if table is not None:
      configs += [ours_shortlist_config(models[precision], inputs, table)
                  for precision in ("none", "none+compiled", "bf16", "int8")]
      configs += [ctranslate2_config(model_dir, inputs, compute_type, use_vmap=True)
                  for compute_type in ("float32", "int8", "int8_float32")]
    for _, result in configs:
      print(json.dumps(result), file=sys.stderr, flush=True)
    times = [[] for _ in configs]
    for _ in range(rounds):  # interleaved
      for (run, _), config_times in zip(configs, times):
        start = time.perf_counter()
        run()
        config_times.append(time.perf_counter() - start)
  results = [summary(result, config_times) for (_, result), config_times in zip(configs, times)]
  speed = lambda **kv: max(r["sentences_per_second"] for r in results
                           if all(r.get(k) == v for k, v in kv.items()))
  print(json.dumps({
      "benchmark": "ctranslate2_decode", "ctranslate2_version": ctranslate2.__version__,
      "model": "transformer_base", "vocab_size": VOCAB_SIZE, "batch": BATCH,
      "source_length": SOURCE_LENGTH, "output_length": OUTPUT_LENGTH, "beam_size": BEAM_SIZE,
      "alpha": ALPHA, "rounds": rounds,
      "greedy_outputs_match": check[0], "greedy_tokens_matching": f"{check[1]}/{check[2]}",
      "ctranslate2_cpu_compute_types": sorted(supported), "results": results,
      "sources": "multi30k test" if table is not None else "random ids",
      "shortlist_size": (int(tf.size(table.batch_vocabulary(tf.constant(inputs))))
                         if table is not None else None),
      "ours_fastest_over_ctranslate2_fastest": round(
          speed(engine="t2t_lite") / speed(engine="ctranslate2"), 3),
      # ours float32 (the faster of XLA on / off) over CTranslate2 float32, median rounds
      "ours_float32_over_ctranslate2_float32": round(
          speed(engine="t2t_lite", precision="none")
          / speed(engine="ctranslate2", compute_type="float32"), 3),
      "litert_fastest_over_ours_fastest_float32": round(
          speed(engine="litert") / speed(engine="t2t_lite", precision="none"), 3)
      if Interpreter is not None else None,
      "litert_int8_over_ctranslate2_fastest": round(
          speed(engine="litert", weights="int8") / speed(engine="ctranslate2"), 3)
      if Interpreter is not None else None,
      # What --engine=auto picks here (the decoding plan's measured table) beside the fastest.
      "plan_engine": plan.engine("auto")[0],
      "fastest": max(results, key=lambda r: r["sentences_per_second"])["engine"],
      "compiled_matmuls_here": plan.decide("none", False, hparams.d_model,
                                           plan.capabilities()).compiled_matmuls,
      "cpu_count": os.cpu_count(), "cpu_flags": cpu_flags(),
      "load_average_before": round(load_before, 2),
      "load_average_after": round(os.getloadavg()[0], 2)}))


if __name__ == "__main__":
  main()
