"""Lexical constraints on one trained Multi30k model, test_2016_flickr: what terminology gives.
ONE JSON line. A quality run (BLEU, constraints met), not a timing.

  python bench/constraints.py --model_dir=<a multi30k_ende run> [--raw_dir=...] [--seed=0]

Decodes the 1,000 sentences without constraints, then with 1 and with 2 phrases a sentence
drawn from its reference, as a translator would insist on terms: each phrase is 1 or 2
reference words (even odds), starting at a word the unconstrained output lacks when the
reference has one, else at any word (trailing punctuation stripped; the phrases of a sentence
do not overlap; a fixed seed). Reports sacreBLEU against the references beside the
unconstrained decode's, how many outputs contain all their phrases as whole words, and whether
a decode with an empty constraint list for every sentence is the unconstrained one exactly
(outputs and scores). The decoding is t2t-lite-decode's (`Translator.translate(...,
constraints=)`: the run's best model, its beam and alpha, the machine's `auto` precision).
"""
import json
import os
import random
import re
import string

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from t2t_lite.data import scoring  # noqa: E402
from t2t_lite.decode import translation  # noqa: E402

from multi30k_decode import read_lines, run_parser  # noqa: E402


def words(text):
  return [w.strip(string.punctuation + "„“”") for w in text.split()]


def draw_phrases(reference, output, count, rng):
  """`count` non-overlapping phrases of 1 or 2 reference words, each starting at a word the
  output lacks when there is one."""
  ref = words(reference)
  missing = set(ref) - set(words(output))
  taken, phrases = set(), []
  for _ in range(count):
    free = [i for i, w in enumerate(ref) if w and i not in taken]
    if not free:
      break
    starts = [i for i in free if ref[i] in missing] or free
    i = rng.choice(starts)
    n = 2 if rng.random() < 0.5 and i + 1 in free and ref[i + 1] else 1
    taken.update(range(i, i + n))
    phrases.append(" ".join(ref[i:i + n]))
  return phrases


def contains_words(output, phrase):
  return re.search(r"(?<!\w)" + re.escape(phrase) + r"(?!\w)", output) is not None


def main():
  parser = run_parser(__doc__)
  parser.add_argument("--seed", type=int, default=0)
  args = parser.parse_args()
  sources, references = read_lines(args.raw_dir, "en"), read_lines(args.raw_dir, "de")
  translator = translation.Translator.from_model_dir(args.model_dir)
  best, scores = translator.translate(sources)
  bleu = lambda texts: round(scoring.translation_scores(texts, references, "de")["bleu"], 2)
  empty, empty_scores = translator.translate(sources, constraints=[[] for _ in sources])
  rows = []
  for count in (1, 2):
    rng = random.Random(args.seed)
    phrases = [draw_phrases(r, o, count, rng) for r, o in zip(references, best)]
    outputs, _ = translator.translate(sources, constraints=phrases)
    rows.append({
        "phrases_a_sentence": count, "bleu": bleu(outputs),
        "bleu_without_constraints": bleu(best),
        "phrases": sum(map(len, phrases)),
        "phrases_missing_from_the_unconstrained_output": sum(
            not contains_words(o, p) for o, ps in zip(best, phrases) for p in ps),
        "outputs_containing_all_their_phrases": sum(
            all(contains_words(o, p) for p in ps) for o, ps in zip(outputs, phrases)),
        "example": {"source": sources[1], "phrases": phrases[1], "output": outputs[1],
                    "unconstrained": best[1], "reference": references[1]}})
  print(json.dumps({
      "benchmark": "constraints", "model_dir": args.model_dir,
      "checkpoint": translator.loaded.which(), "computing": translator.loaded.computing(),
      "beam_size": translator.beam_size, "alpha": translator.alpha,
      "split": "test_2016_flickr", "sentences": len(sources), "seed": args.seed,
      "empty_constraints_equal_the_unconstrained_decode": {
          "outputs": sum(a == b for a, b in zip(empty, best)),
          "scores": sum(a == b for a, b in zip(empty_scores, scores))},
      "results": rows}, ensure_ascii=False))


if __name__ == "__main__":
  main()
