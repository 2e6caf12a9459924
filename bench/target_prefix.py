"""Target prefixes on one trained Multi30k model, test_2016_flickr: what autocompletion gives.
ONE JSON line. A quality run (BLEU, agreement), not a timing.

  python bench/target_prefix.py --model_dir=<a multi30k_ende run> [--raw_dir=...] [--words=1,2,3]

Decodes the 1,000 sentences without a prefix, then (1) with each 1-best's own first k words as
the prefix: how many outputs are that 1-best again, and (2) with the reference's first k words
as the prefix (a translator who typed them): sacreBLEU against the references, beside the
unconstrained decode's; every output must start with its prefix, as text and as words (not
going on inside its last word: "Beim" -> "Beimagentien"). The decoding is
t2t-lite-decode's (`Translator.translate(..., prefixes=)`: the run's best model, its beam and
alpha, the machine's `auto` precision).
"""
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from t2t_lite.data import scoring  # noqa: E402
from t2t_lite.decode import translation  # noqa: E402

from multi30k_decode import read_lines, run_parser  # noqa: E402


def first_words(text, k):
  return " ".join(text.split()[:k])


def starts_with_words(output, prefix):
  """The output starts with the prefix, and not inside its last word ("Beim" -> "Beimagen")."""
  rest = output[len(prefix):]
  return output.startswith(prefix) and not (rest[:1].isalnum())


def main():
  parser = run_parser(__doc__)
  parser.add_argument("--words", default="1,2,3")
  args = parser.parse_args()
  sources, references = read_lines(args.raw_dir, "en"), read_lines(args.raw_dir, "de")
  translator = translation.Translator.from_model_dir(args.model_dir)
  best, _ = translator.translate(sources)
  bleu = lambda texts: round(scoring.translation_scores(texts, references, "de")["bleu"], 2)
  rows = []
  for k in map(int, args.words.split(",")):
    own = [first_words(text, k) for text in best]
    again, _ = translator.translate(sources, prefixes=own)
    typed = [first_words(text, k) for text in references]
    completed, _ = translator.translate(sources, prefixes=typed)
    rows.append({
        "words": k, "own_prefix_gives_the_1_best": sum(a == b for a, b in zip(again, best)),
        "reference_prefix_bleu": bleu(completed),
        "outputs_starting_with_their_prefix_text": sum(
            o.startswith(p) for o, p in zip(completed, typed)),
        "outputs_starting_with_their_prefix_words": sum(
            starts_with_words(o, p) for o, p in zip(completed, typed))})
  print(json.dumps({
      "benchmark": "target_prefix", "model_dir": args.model_dir,
      "checkpoint": translator.loaded.which(), "computing": translator.loaded.computing(),
      "split": "test_2016_flickr", "sentences": len(sources), "bleu_without_prefix": bleu(best),
      "results": rows}))


if __name__ == "__main__":
  main()
