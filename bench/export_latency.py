"""Serving latency of exported models, in each compute precision, as TF Serving loads them.

  python bench/export_latency.py                          # random transformer_base, none + bf16
  python bench/export_latency.py --model_dir=RUN --sentences_file=test.en   # a trained model
  python bench/export_latency.py --precisions=none --jit_compile

Exports one model with `t2t_lite.decode.export` once per precision of --precisions
(t2t_lite/modeling/mixed_precision.py; beam 4, alpha 0.6, output up to input + 50 tokens for
the random model; a trained run's own decoding settings), then, in ONE fresh Python process that imports only tensorflow and
tensorflow_text, loads every export the way tensorflow_model_server does (the TF1 session loader)
and measures: each load time, each first request (one batch of 8 sentences through
`serving_default`; includes graph optimisation), and then, in --rounds interleaved rounds (one
request to each export, then the next round), `serving_default` with 32 sentences and with 1.
The headline per export is the median round, min and max beside it; `speedup_vs_none` is the
median of the per-round ratios (float32 time / this precision's time, back to back).

Without --model_dir the model is transformer_base-size with random weights and a 32k
SentencePiece vocabulary, every source 32 tokens long (31 words + EOS: the decode benchmark's
shapes); random weights almost never emit EOS, so every output runs to its maximum length (the
worst case). With --model_dir (a t2t-lite-train run) and --sentences_file, the timed requests
are the file's first 32 lines, and every line of the file is then translated by every export
(batches of 32): `identical_to_none` is the fraction of sentences whose output equals the
float32 export's. Prints one JSON line; the requirement of the load path is load + first
request < 60 s.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import t2t_lite  # noqa: E402
from t2t_lite.decode import translation  # noqa: E402
from t2t_lite.decode import export
from t2t_lite.data import tokenizers
from t2t_lite.modeling import mixed_precision  # noqa: E402

VOCAB_SIZE = 32000

# Runs in the fresh process: argv = [JSON {"exports": {precision: path}, "rounds": n,
# "timed": [32 sentences], "all": [sentences to compare] }]. Loads each export as
# tensorflow_model_server does (the TF1 session loader: import the MetaGraph, restore the
# variables, run the init op) and runs serving_default by tensor name.
_CLIENT = r"""
import json, sys, time
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops, as the server links them)
config = json.loads(sys.argv[1])
result = {}

def load(path):
  session = tf.compat.v1.Session(graph=tf.Graph())
  with session.graph.as_default():
    meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
  signature = meta_graph.signature_def["serving_default"]
  fetch, feed = signature.outputs["outputs"].name, signature.inputs["inputs"].name
  return lambda sentences: session.run(fetch, {feed: np.array(sentences, dtype=object)})

translate = {}
for precision, path in config["exports"].items():
  start = time.perf_counter()
  translate[precision] = load(path)
  loaded = time.perf_counter()
  translate[precision](config["timed"][:8])
  result[precision] = {"load_s": loaded - start, "first_request_s": time.perf_counter() - loaded,
                       "batch32_s": [], "batch1_s": []}
assert "t2t_lite" not in sys.modules and "sentencepiece" not in sys.modules
for precision, fn in translate.items():  # Not the first call of these shapes any more.
  fn(config["timed"]), fn(config["timed"][:1])
for _ in range(config["rounds"]):  # interleaved: every export once a round
  for precision, fn in translate.items():
    for name, batch in (("batch32_s", config["timed"]), ("batch1_s", config["timed"][:1])):
      begin = time.perf_counter()
      fn(batch)
      result[precision][name].append(time.perf_counter() - begin)
outputs = {}
for precision, fn in translate.items():
  sentences = config["all"]
  outputs[precision] = [o.decode("utf-8") for i in range(0, len(sentences), 32)
                        for o in fn(sentences[i:i + 32])]
print(json.dumps({"timings": result, "outputs": outputs}))
"""


def synthetic_tokenizer(path, vocab_size=VOCAB_SIZE):
  """A SentencePiece model with exactly `vocab_size` pieces: a small unigram one trained on
  synthetic text, padded with whole-word pieces "w0", "w1", ... (each one token)."""
  from sentencepiece import sentencepiece_model_pb2
  rng = random.Random(0)
  letters = "abcdefghijklmnopqrstuvwxyz"
  words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(3000)]
  texts = [" ".join(rng.choice(words) for _ in range(20)) for _ in range(3000)]
  small = tokenizers.train_sentencepiece(texts, path, 2000, model_type="unigram")
  proto = sentencepiece_model_pb2.ModelProto()
  proto.ParseFromString(small._sp.serialized_model_proto())
  known = {piece.piece for piece in proto.pieces}
  score = min(piece.score for piece in proto.pieces) - 1.0
  normal = sentencepiece_model_pb2.ModelProto.SentencePiece.NORMAL
  i = 0
  while len(proto.pieces) < vocab_size:
    piece = f"\u2581w{i}"
    i += 1
    if piece not in known:
      proto.pieces.add(piece=piece, score=score, type=normal)
  return tokenizers.SentencePieceTokenizer(proto.SerializeToString())


def export_random(work_dir, precisions, jit_compile):
  """The random transformer_base in each precision (same weights) -> ({precision: path},
  32 sentences of 32 tokens, parameter count)."""
  import keras
  tok = synthetic_tokenizer(os.path.join(work_dir, "vocab.model"))
  hparams = t2t_lite.get_hparams("transformer_base")
  keras.utils.set_random_seed(0)
  reference = t2t_lite.build_model(hparams, tok.vocab_size)
  paths = {}
  for precision in precisions:
    model = mixed_precision.inference_model(reference, precision)  # as t2t-lite-export
    translator = translation.Translator(model, tok, beam_size=4, alpha=0.6, extra_length=50,
                                    max_input_length=256)
    module = export.TranslationModule(translator, jit_compile=jit_compile)
    paths[precision] = export.save(module, os.path.join(work_dir, f"export_{precision}"))
  sentences = [" ".join(f"w{(31 * i + j) * 7 % 28000}" for j in range(31)) for i in range(32)]
  lengths = {len(tok.encode(s, add_eos=True)) for s in sentences}
  if lengths != {32}:
    sys.exit(f"the benchmark sentences should be 32 tokens long, got {sorted(lengths)}")
  params = int(sum(v.shape.num_elements() for v in reference.trainable_variables))
  return paths, sentences, params


def median(values):
  return sorted(values)[len(values) // 2]


def summarize(timings, precisions):
  """Client timings -> per precision: medians with [min, max], and the per-round speedups."""
  summary = {}
  for precision in precisions:
    t = timings[precision]
    summary[precision] = {
        "load_s": round(t["load_s"], 2), "first_request_s": round(t["first_request_s"], 2),
        "load_plus_first_request_s": round(t["load_s"] + t["first_request_s"], 2)}
    for name in ("batch32_s", "batch1_s"):
      summary[precision][name] = round(median(t[name]), 3)
      summary[precision][name + "_min_max"] = [round(min(t[name]), 3), round(max(t[name]), 3)]
    summary[precision]["batch32_sentences_per_s"] = round(32 / median(t["batch32_s"]), 2)
    if precision != "none" and "none" in timings:
      ratios = [a / b for a, b in zip(timings["none"]["batch32_s"], t["batch32_s"])]
      summary[precision]["speedup_vs_none"] = round(median(ratios), 3)
      summary[precision]["speedup_vs_none_rounds"] = [round(r, 3) for r in ratios]
  return summary


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--model_dir", default=None,
                      help="a t2t-lite-train run to export (default: random transformer_base)")
  parser.add_argument("--sentences_file", default=None,
                      help="with --model_dir: source sentences, one a line (>= 32 lines)")
  parser.add_argument("--precisions", default="none,bf16",
                      help=f"comma-separated, of {', '.join(mixed_precision.PRECISIONS)}")
  parser.add_argument("--jit_compile", action="store_true",
                      help="XLA-compile the beam search inside the SavedModel")
  parser.add_argument("--rounds", type=int, default=5)
  args = parser.parse_args()
  precisions = [p for p in args.precisions.split(",") if p]
  for precision in precisions:
    mixed_precision.check(precision)
  if bool(args.model_dir) != bool(args.sentences_file):
    parser.error("--model_dir and --sentences_file go together")

  load_before = os.getloadavg()[0]  # Other processes on the machine skew the timings.
  work_dir = tempfile.mkdtemp(prefix="t2t_lite_export_bench_")
  start = time.perf_counter()
  if args.model_dir:
    with open(args.sentences_file, encoding="utf-8") as f:
      every = [line.rstrip("\n") for line in f]
    if len(every) < 32:
      sys.exit(f"{args.sentences_file}: {len(every)} lines, the benchmark needs >= 32")
    paths = {p: export.export_model_dir(args.model_dir, os.path.join(work_dir, f"export_{p}"),
                                        precision=p, jit_compile=args.jit_compile)
             for p in precisions}
    timed, params = every[:32], None
  else:
    paths, timed, params = export_random(work_dir, precisions, args.jit_compile)
    every = timed
  export_seconds = time.perf_counter() - start
  config = {"exports": paths, "rounds": args.rounds, "timed": timed, "all": every}
  client = subprocess.run([sys.executable, "-c", _CLIENT, json.dumps(config)],
                          capture_output=True, text=True, check=False)
  shutil.rmtree(work_dir)  # ~250 MB an export.
  if client.returncode:
    sys.exit(f"the serving client failed:\n{client.stderr[-3000:]}")
  answer = json.loads(client.stdout.strip().splitlines()[-1])
  results = summarize(answer["timings"], precisions)
  outputs = answer["outputs"]
  if "none" in outputs:
    for precision in precisions:
      same = sum(a == b for a, b in zip(outputs[precision], outputs["none"]))
      results[precision]["identical_to_none"] = round(same / len(outputs["none"]), 4)
  print(json.dumps({
      "bench": "export_latency", "model": args.model_dir or "transformer_base (random)",
      "params": params, "sentences_compared": len(every), "jit_compile": args.jit_compile,
      "rounds": args.rounds, "export_s": round(export_seconds, 1), "results": results,
      "load_average_1m": [round(load_before, 2), round(os.getloadavg()[0], 2)]}))


if __name__ == "__main__":
  main()
