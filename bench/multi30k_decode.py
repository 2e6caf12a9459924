"""One trained Multi30k model decoding test_2016_flickr in each decoding configuration: BLEU and
speed side by side. ONE JSON line.

  python bench/multi30k_decode.py --model_dir=<a multi30k_ende run> \
      [--raw_dir=../shared/data/multi30k] [--configs=none,bf16,none+shortlist,bf16+shortlist]

A configuration is a compute precision (t2t_lite/modeling/mixed_precision.py), "+shortlist" for
the vocabulary shortlist (t2t_lite/decode/shortlist.py, built into the run directory the first
time), "+xla" for the XLA-compiled search (t2t-lite-decode --xla), "+portable" for the model as
an export has it (the decoding plan for a graph served elsewhere, t2t_lite/decode/plan.py's
`elsewhere`: no compiled matmuls where this machine would use them, searches by precision),
"+one_search" for each batch searched as one search where this machine's plan would split it
into concurrent ones (t2t-lite-decode before it did). Each is what
t2t-lite-decode runs (`Translator.from_model_dir(...).translate`, batches of 32, the run's best
model, its hparams' beam and alpha): all 1,000 sentences a round, the configurations' rounds
interleaved after an untimed warm-up of 32 sentences each (with +xla and int8, of all 1,000: XLA
compiles once for each batch shape; its seconds are reported as "compile_seconds"). Reported per
configuration: sacreBLEU (and the paper's tokenized BLEU) of its outputs, the median round's
seconds with min and max, sentences/s, and how many outputs equal float32's.
"""
import argparse
import gzip
import json
import os
import statistics
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from t2t_lite.data import scoring  # noqa: E402
from t2t_lite.decode import plan, translation  # noqa: E402
from t2t_lite.modeling import quantization  # noqa: E402


def read_lines(raw_dir, lang):
  with gzip.open(os.path.join(raw_dir, f"test_2016_flickr.{lang}.gz"), "rt",
                 encoding="utf-8") as f:
    return [line.rstrip("\n") for line in f]


def run_parser(doc):
  """A bench's flags for one trained run and Multi30k's raw files: --model_dir, --raw_dir."""
  here = os.path.dirname(os.path.abspath(__file__))
  parser = argparse.ArgumentParser(description=doc.split("\n")[0])
  parser.add_argument("--model_dir", required=True)
  parser.add_argument("--raw_dir", default=os.path.join(here, "..", "..", "shared", "data",
                                                        "multi30k"))
  return parser


def main():
  parser = run_parser(__doc__)
  parser.add_argument("--configs", default="none,bf16,int8,none+shortlist,bf16+shortlist,"
                                            "int8+shortlist")
  parser.add_argument("--rounds", type=int, default=2)
  args = parser.parse_args()
  sources, references = read_lines(args.raw_dir, "en"), read_lines(args.raw_dir, "de")
  translators, compile_seconds = {}, {}
  for config in args.configs.split(","):
    precision, *extras = config.split("+")
    one_search = {"searches": 1} if "one_search" in extras else {}
    translators[config] = translation.Translator.from_model_dir(
        args.model_dir, precision=precision, shortlist="shortlist" in extras,
        jit_compile="xla" in extras, **one_search,
        planner=plan.elsewhere if "portable" in extras else plan.here)
    start = time.perf_counter()  # traced (and compiled) here, not timed
    embedding = getattr(translators[config].model, "embedding", None)  # not an Ensemble's
    compiles = "xla" in extras or precision == "int8" or isinstance(  # matmuls as XLA programs
        getattr(embedding, "compiled", None), quantization.FloatKernel)
    translators[config].translate(sources if compiles else sources[:32])
    compile_seconds[config] = round(time.perf_counter() - start, 2)
  load_before = os.getloadavg()[0]
  times = {config: [] for config in translators}
  outputs = {}
  for _ in range(args.rounds):
    for config, translator in translators.items():
      start = time.perf_counter()
      outputs[config], _ = translator.translate(sources)
      times[config].append(time.perf_counter() - start)
  reference = outputs.get("none")
  results = []
  for config, texts in outputs.items():
    scores = scoring.translation_scores(texts, references, "de")
    seconds = statistics.median(times[config])
    results.append({
        "config": config, "computing": translators[config].loaded.computing(),
        "searches": translators[config].searches,
        "bleu": round(scores["bleu"], 2), "paper_bleu": round(scores["paper_bleu"], 2),
        "seconds": round(seconds, 2), "compile_seconds": compile_seconds[config],
        "seconds_min_max": [round(min(times[config]), 2),
                                                          round(max(times[config]), 2)],
        "sentences_per_second": round(len(sources) / seconds, 1),
        "identical_to_float32": (sum(a == b for a, b in zip(texts, reference))
                                 if reference else None)})
  print(json.dumps({
      "benchmark": "multi30k_decode", "model_dir": args.model_dir,
      "checkpoint": translators[next(iter(translators))].loaded.which(),
      "split": "test_2016_flickr", "sentences": len(sources), "rounds": args.rounds,
      "results": results, "load_average_before": round(load_before, 2),
      "load_average_after": round(os.getloadavg()[0], 2)}))


if __name__ == "__main__":
  main()
