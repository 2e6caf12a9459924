"""Decoding through the one pipeline (what t2t-lite-decode, translate() and the export run: a
batch of strings in, strings out, one tf.function) against the path t2t-lite-decode took before
it (6f4d273: Python tokenization, the in-graph beam search on ids, Python detokenization), with
the n-best list and sampling beside them. ONE JSON line.

A transformer_base-size model (random weights) with a 32k vocabulary (export_latency.py's
synthetic SentencePiece model), 32 sentences of 32 tokens, beam 4, alpha 0.6, max output =
input + 50, float32. Every configuration runs once untimed (tracing), then `--rounds` times
interleaved with the others; the headline is each one's median round (min and max beside).
The beam configurations search the same inputs with the same model, so they do the same
steps; sampled outputs end where their samples do, so their tokens/s is the fairer figure.

  python bench/decode_pipeline.py            # 5 rounds
  python bench/decode_pipeline.py --rounds=2
"""
import argparse
import json
import os
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import t2t_lite  # noqa: E402
from t2t_lite.data.tokenizers import PAD_ID  # noqa: E402
from t2t_lite.decode import search, translation  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from export_latency import synthetic_tokenizer  # noqa: E402

SETTINGS = dict(beam_size=4, alpha=0.6, extra_length=50)


def ids_path(model, tok):
  """The decode of 6f4d273: Python encode, the best beam of search.beams on an int32 batch
  (trimmed at EOS), Python decode."""
  def best_beam(inputs, limits):
    ids, scores = search.beams(model, inputs, max_lengths=limits, **SETTINGS)  # [B, K, L]
    return search.trim_at_eos(ids[:, 0]), scores[:, 0]

  best = tf.function(best_beam, input_signature=[tf.TensorSpec([None, None], tf.int32),
                                                 tf.TensorSpec([None], tf.int32)])

  def run(sentences):
    sources = [tok.encode(s, add_eos=True) for s in sentences]
    inputs = np.zeros([len(sources), max(map(len, sources))], np.int32)
    for i, source in enumerate(sources):
      inputs[i, :len(source)] = source
    limits = np.array([len(s) + SETTINGS["extra_length"] for s in sources], np.int32)
    ids, _ = best(tf.constant(inputs), tf.constant(limits))
    return [tok.decode([t for t in row if t != PAD_ID]) for row in ids.numpy()]

  return run


def pipeline(translator):
  def run(sentences):
    out = translator.decode_text(tf.constant(sentences))["outputs"].numpy()
    return [[o.decode("utf-8") for o in row] for row in out]
  return run


def tokens_of(outputs, tok):
  flat = [o for row in outputs for o in (row if isinstance(row, list) else [row])]
  return sum(len(tok.encode(o)) for o in flat)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rounds", type=int, default=5)
  args = parser.parse_args()
  work_dir = tempfile.mkdtemp(prefix="decode_pipeline_")
  # Seeded first: tf.random.set_seed clears TensorFlow's eager kernel cache, and with it the
  # tf-text SentencePiece resource of a tokenizer built before it.
  keras.utils.set_random_seed(0)
  tok = synthetic_tokenizer(os.path.join(work_dir, "vocab.model"))
  model = t2t_lite.build_model(t2t_lite.get_hparams("transformer_base"), tok.vocab_size)
  sentences = [" ".join(f"w{(31 * i + j) * 7 % 28000}" for j in range(31)) for i in range(32)]
  configs = {
      "ids_path_1best": ids_path(model, tok),
      "pipeline_1best": pipeline(translation.Translator(model, tok, **SETTINGS)),
      "pipeline_nbest4": pipeline(translation.Translator(model, tok, **SETTINGS, n_best=4)),
      "sample_1": pipeline(translation.Translator(model, tok, **SETTINGS, sample=True)),
      "sample_4": pipeline(translation.Translator(model, tok, **SETTINGS, sample=True,
                                                  n_best=4)),
  }
  outputs = {name: run(sentences) for name, run in configs.items()}  # traced, untimed
  rounds = {name: [] for name in configs}
  cpu = {name: [] for name in configs}
  for _ in range(args.rounds):
    for name, run in configs.items():
      start, start_cpu = time.perf_counter(), time.process_time()
      outputs[name] = run(sentences)
      rounds[name].append(time.perf_counter() - start)
      cpu[name].append(time.process_time() - start_cpu)
  same = outputs["ids_path_1best"] == [row[0] for row in outputs["pipeline_1best"]]
  result = {}
  for name, seconds in rounds.items():
    median = float(np.median(seconds))
    result[name] = {"seconds_median": round(median, 3), "seconds_min": round(min(seconds), 3),
                    "seconds_max": round(max(seconds), 3),
                    "cpu_seconds_median": round(float(np.median(cpu[name])), 3),
                    "sentences_per_second": round(len(sentences) / median, 3),
                    "output_tokens_per_second": round(tokens_of(outputs[name], tok) / median, 1)}
  cpu_name = os.popen("lscpu | sed -n 's/^Model name: *//p'").read().strip()
  print(json.dumps({
      "bench": "decode_pipeline", "model": "transformer_base (random)", "batch": 32,
      "rounds": args.rounds, "cpu": cpu_name, "configs": result,
      "pipeline_over_ids_path": round(float(
          np.median(rounds["pipeline_1best"]) / np.median(rounds["ids_path_1best"])), 3),
      "same_1best_outputs": same}))


if __name__ == "__main__":
  main()
