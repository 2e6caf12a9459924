"""Serving latency of an exported transformer_base-size model (random weights, 32k vocabulary).

  python bench/export_latency.py [--jit_compile] [--export_dir=DIR]

Exports the model with `t2t_lite.export` (beam 4, alpha 0.6, output up to input + 50 tokens),
then, in a fresh Python process that imports only tensorflow and tensorflow_text and loads the
SavedModel the way tensorflow_model_server does (the TF1 session loader), measures: the load
time, the first request (one batch of 8 sentences through `serving_default`; includes any graph
optimisation or XLA compilation), and the median per-batch latency of later requests: `serving_default` with 1 and 8 sentences, and
`translate_ids` with 1 and 32 sentences; every source is 32 tokens long (31 words + EOS: the
decode benchmark's shapes).
Random weights almost never emit EOS, so every output runs to its maximum length (the worst
case). Prints one JSON line; the requirement is load + first request < 60 s.
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
from t2t_lite import decoding, export, tokenizer  # noqa: E402

VOCAB_SIZE = 32000

# Runs in the fresh process: argv = [saved model path, repeats, JSON list of 8 sentences].
# Loads the model as tensorflow_model_server does (the TF1 session loader: import the MetaGraph,
# restore the variables, run the init op) and runs each signature by tensor name.
_CLIENT = r"""
import json, sys, time
start = time.perf_counter()
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401  (registers the SentencePiece ops, as the server links them)
path, repeats, sentences = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
imported = time.perf_counter()
session = tf.compat.v1.Session(graph=tf.Graph())
with session.graph.as_default():
  meta_graph = tf.compat.v1.saved_model.loader.load(session, ["serve"], path)
loaded = time.perf_counter()

def signature(name):
  signature_def = meta_graph.signature_def[name]
  fetches = {key: info.name for key, info in signature_def.outputs.items()}
  return lambda inputs: session.run(fetches, {signature_def.inputs["inputs"].name: inputs})

text_fn, ids_fn = signature("serving_default"), signature("translate_ids")
first = text_fn(np.array(sentences, dtype=object))
first_done = time.perf_counter()
assert "t2t_lite" not in sys.modules and "sentencepiece" not in sys.modules

def timed(fn, inputs):
  fn(inputs)  # Not the first call of this shape any more.
  times = []
  for _ in range(repeats):
    begin = time.perf_counter()
    out = fn(inputs)
    times.append(time.perf_counter() - begin)
  return sorted(times)[len(times) // 2], out  # the median

rng = np.random.default_rng(1)
ids = rng.integers(3, 30000, size=[32, 32]).astype(np.int32)  # random tokens
ids[:, 31] = 1  # 31 tokens + EOS
text1, _ = timed(text_fn, np.array(sentences[:1], dtype=object))
text8, _ = timed(text_fn, np.array(sentences, dtype=object))
ids1, _ = timed(ids_fn, ids[:1])
ids32, out32 = timed(ids_fn, ids)
print(json.dumps({
    "loader": "tf1_session", "import_s": imported - start, "load_s": loaded - imported,
    "first_request_s": first_done - loaded,
    "text_batch1_s": text1, "text_batch8_s": text8, "ids_batch1_s": ids1, "ids_batch32_s": ids32,
    "ids_batch32_output_length": int(out32["outputs"].shape[1])}))
"""


def synthetic_tokenizer(path, vocab_size=VOCAB_SIZE):
  """A SentencePiece model with exactly `vocab_size` pieces: a small unigram one trained on
  synthetic text, padded with whole-word pieces "w0", "w1", ... (each one token)."""
  from sentencepiece import sentencepiece_model_pb2
  rng = random.Random(0)
  letters = "abcdefghijklmnopqrstuvwxyz"
  words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(3000)]
  texts = [" ".join(rng.choice(words) for _ in range(20)) for _ in range(3000)]
  small = tokenizer.train_sentencepiece(texts, path, 2000, model_type="unigram")
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
  return tokenizer.SentencePieceTokenizer(proto.SerializeToString())


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--export_dir", default=None, help="default: a fresh temporary directory")
  parser.add_argument("--jit_compile", action="store_true",
                      help="XLA-compile the beam search inside the SavedModel")
  parser.add_argument("--repeats", type=int, default=3)
  args = parser.parse_args()

  start_load = os.getloadavg()[0]  # Other processes on the machine skew the timings.
  work_dir = tempfile.mkdtemp(prefix="t2t_lite_export_bench_")
  export_dir = args.export_dir or os.path.join(work_dir, "export")
  tok = synthetic_tokenizer(os.path.join(work_dir, "vocab.model"))
  hparams = t2t_lite.get_hparams("transformer_base")
  model = t2t_lite.build_model(hparams, tok.vocab_size)
  translator = decoding.Translator(model, tok, beam_size=4, alpha=0.6, extra_length=50,
                                  max_input_length=256)
  module = export.TranslationModule(translator, jit_compile=args.jit_compile)
  start = time.perf_counter()
  path = export.save(module, export_dir)
  export_seconds = time.perf_counter() - start
  sentences = [" ".join(f"w{(31 * i + j) * 7 % 28000}" for j in range(31)) for i in range(8)]
  lengths = {len(tok.encode(s, add_eos=True)) for s in sentences}
  if lengths != {32}:
    sys.exit(f"the benchmark sentences should be 32 tokens long, got {sorted(lengths)}")
  client = subprocess.run([sys.executable, "-c", _CLIENT, path, str(args.repeats),
                           json.dumps(sentences)],
                          capture_output=True, text=True, check=False)
  shutil.rmtree(work_dir)  # ~250 MB; an --export_dir of the caller's is kept.
  if client.returncode:
    sys.exit(f"the serving client failed:\n{client.stderr[-3000:]}")
  result = json.loads(client.stdout.strip().splitlines()[-1])
  print(json.dumps(dict(
      {"model": "transformer_base", "vocab_size": tok.vocab_size,
       "params": int(sum(v.shape.num_elements() for v in model.trainable_variables)),
       "jit_compile": args.jit_compile, "beam_size": 4, "alpha": 0.6, "extra_length": 50,
       "export_s": round(export_seconds, 2)},
      **{k: round(v, 3) if isinstance(v, float) else v for k, v in result.items()},
      load_plus_first_request_s=round(result["load_s"] + result["first_request_s"], 2),
      load_average_1m=[round(start_load, 2), round(os.getloadavg()[0], 2)])))


if __name__ == "__main__":
  main()
