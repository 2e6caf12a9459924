"""A trained Multi30k model exported by t2t-lite-export --format=ctranslate2, decoded by
CTranslate2 and by t2t_lite on test_2016_flickr: identical outputs, BLEU and speed. ONE JSON line.

  python bench/ctranslate2_export.py --model_dir=<a multi30k_ende run> \
      [--raw_dir=../shared/data/multi30k] [--rounds=3]

The run's model (the checkpoint t2t-lite-export takes: its best model by default) is exported
twice with the library's exporter (t2t_lite/decode/ctranslate2_export.py), float32 and int8, into
a temporary directory. Decoded, all 1,000 sentences a round, with the run's decoding settings
(hparams.json's, else the problem's: beam 4, alpha 0.6, extra_length 50):
  ours       t2t-lite-decode's Translator in float32 (precision none), batches of 32;
  ct2_f32    CTranslate2 compute type float32, `ctranslate2_export.translate`: the options under
             which our outputs are among its hypotheses, ranked by our length penalty, each
             sentence with its own max_decoding_length;
  ct2_int8   the same on the int8 export (compute type int8).
Reported: how many of ct2_f32's and ct2_int8's outputs equal ours, and how many CTranslate2's
own ranking gives (length_penalty=alpha, no re-ranking: docs/serving.md's short snippet);
sacreBLEU of each; sentences/s of each (median round, with the slowest and fastest), the rounds
interleaved after an untimed warm-up of 32 sentences each; intra_threads = os.cpu_count().
"""
import argparse
import json
import os
import statistics
import sys
import tempfile
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import ctranslate2  # noqa: E402
import sentencepiece as spm  # noqa: E402

from t2t_lite.data import scoring  # noqa: E402
from t2t_lite.decode import ctranslate2_export, translation  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from multi30k_decode import read_lines  # noqa: E402


def ctranslate2_decoder(path, compute_type, settings, max_input_length):
  """lines -> outputs, CTranslate2 on the export at `path`, as ours decodes."""
  translator = ctranslate2.Translator(path, device="cpu", compute_type=compute_type,
                                      intra_threads=os.cpu_count(), inter_threads=1)
  sentencepiece = spm.SentencePieceProcessor(
      model_file=os.path.join(path, ctranslate2_export.SENTENCEPIECE_FILE))
  decode = lambda lines: ctranslate2_export.translate(translator, sentencepiece, lines,
                                                      settings, max_input_length)
  return decode, translator, sentencepiece


def plain_ranking(translator, sentencepiece, lines, settings, max_input_length):
  """CTranslate2's own ranking: length_penalty=alpha, one max_decoding_length a batch of one
  source length (as `translate`), no re-ranking."""
  outputs = []
  for line in lines:
    pieces = sentencepiece.encode(line, out_type=str)
    result = translator.translate_batch(
        [pieces], beam_size=settings.beam_size, length_penalty=settings.alpha,
        max_input_length=max_input_length,
        max_decoding_length=min(len(pieces), max_input_length - 1) + 1 + settings.extra_length)
    outputs.append(sentencepiece.decode(result[0].hypotheses[0]))
  return outputs


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--model_dir", required=True, help="a trained multi30k_ende run")
  parser.add_argument("--rounds", type=int, default=3)
  parser.add_argument("--raw_dir", help="test_2016_flickr.{en,de}.gz (default: "
                      "../shared/data/multi30k)", default=os.path.join(
                          os.path.dirname(os.path.abspath(__file__)), "..", "..", "shared",
                          "data", "multi30k"))
  args = parser.parse_args()
  sources, references = read_lines(args.raw_dir, "en"), read_lines(args.raw_dir, "de")
  ours = translation.Translator.from_model_dir(args.model_dir, precision="none")
  settings, max_input_length = ours.settings, ours.max_input_length
  decoders = {"ours": lambda lines: ours.translate(lines)[0]}
  with tempfile.TemporaryDirectory() as tmp:
    for name, quantization in (("ct2_f32", "none"), ("ct2_int8", "int8")):
      path = ctranslate2_export.export_model_dir(
          args.model_dir, os.path.join(tmp, name), quantization=quantization,
          precision="none", **settings.as_kwargs())
      compute_type = "float32" if quantization == "none" else quantization
      decoders[name], translator, sentencepiece = ctranslate2_decoder(
          path, compute_type, settings, max_input_length)
      if name == "ct2_f32":
        plain = plain_ranking(translator, sentencepiece, sources, settings, max_input_length)
    for decode in decoders.values():
      decode(sources[:32])  # traced / loaded here, not timed
    load_before = os.getloadavg()[0]
    times = {name: [] for name in decoders}
    outputs = {}
    for _ in range(args.rounds):
      for name, decode in decoders.items():
        start = time.perf_counter()
        outputs[name] = decode(sources)
        times[name].append(time.perf_counter() - start)
  same = lambda texts: round(sum(a == b for a, b in zip(texts, outputs["ours"])) / len(sources), 4)
  bleu = lambda texts: round(scoring.sacrebleu_bleu(texts, references)["bleu"], 2)
  speed = {name: {"median": round(len(sources) / statistics.median(t), 1),
                  "min": round(len(sources) / max(t), 1), "max": round(len(sources) / min(t), 1)}
           for name, t in times.items()}
  print(json.dumps({
      "benchmark": "ctranslate2_export", "ctranslate2_version": ctranslate2.__version__,
      "model_dir": args.model_dir, "checkpoint": ours.loaded.which(),
      "split": "test_2016_flickr", "sentences": len(sources),
      "settings": {"beam_size": settings.beam_size, "alpha": settings.alpha,
                   "extra_length": settings.extra_length, "max_input_length": max_input_length},
      "same_output_fraction": {"ct2_f32": same(outputs["ct2_f32"]),
                               "ct2_int8": same(outputs["ct2_int8"]),
                               "ct2_f32_plain_length_penalty": same(plain)},
      "bleu": {name: bleu(texts) for name, texts in outputs.items()} | {
          "ct2_f32_plain_length_penalty": bleu(plain)},
      "sentences_per_second": speed, "rounds": args.rounds, "cpu_count": os.cpu_count(),
      "load_average_before": round(load_before, 2),
      "load_average_after": round(os.getloadavg()[0], 2)}))


if __name__ == "__main__":
  main()
