"""Corpus scores of decoded outputs: BLEU (sacrebleu and the paper's), bracket F1, accuracy.

Two BLEU scores, because they answer different questions:
  * `sacrebleu_bleu`: detokenized BLEU with sacrebleu's default 13a tokenization and its
    signature (nrefs, case, eff, tok, smooth, version): the number to compare across papers.
  * `paper_bleu`: what the Transformer paper reported, tensor2tensor's get_ende_bleu.sh:
    tokenize hypotheses and references (Moses tokenizer.perl), split hyphenated compounds
    with `perl -ple 's{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g'`, then multi-bleu.perl (tokenized,
    case-sensitive, no smoothing). We tokenize with sacrebleu's 13a tokenizer instead of Moses
    (no Perl here; both split punctuation off words and keep intra-word hyphens), apply the same
    compound split, and score with sacrebleu on the tokens as they are (tokenize="none").
    Tokenized BLEU is higher than detokenized BLEU; only this one compares with Table 2.
"""
import re

from sacrebleu.metrics import BLEU
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

from t2t_lite.errors import T2TLiteError

_COMPOUND = re.compile(r"(\S)-(\S)")
_TOKENIZER_13A = Tokenizer13a()


class MetricError(T2TLiteError, ValueError):
  """Mismatched hypotheses and references (one-line message)."""


def _check_lengths(hypotheses, references):
  if len(hypotheses) != len(references):
    raise MetricError(f"{len(hypotheses)} hypotheses but {len(references)} references")


def split_compounds(tokenized):
  """tensor2tensor's get_ende_bleu.sh compound split: "Fußball-Spiel" -> "Fußball ##AT##-##AT##
  Spiel" (Perl's s///g semantics: non-overlapping, left to right, as re.sub)."""
  return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", tokenized)


def paper_tokenize(text):
  """13a tokenization, then the compound split: the text paper_bleu scores."""
  return split_compounds(_TOKENIZER_13A(text.strip()))


def sacrebleu_bleu(hypotheses, references):
  """Detokenized corpus BLEU -> {"bleu": float, "signature": str}."""
  _check_lengths(hypotheses, references)
  bleu = BLEU()
  score = bleu.corpus_score(list(hypotheses), [list(references)])
  return {"bleu": score.score, "signature": str(bleu.get_signature())}


def paper_bleu(hypotheses, references):
  """Tokenized, compound-split corpus BLEU as in the paper -> {"bleu", "signature"}."""
  _check_lengths(hypotheses, references)
  bleu = BLEU(tokenize="none", force=True)
  score = bleu.corpus_score([paper_tokenize(h) for h in hypotheses],
                            [[paper_tokenize(r) for r in references]])
  return {"bleu": score.score,
          "signature": f"{bleu.get_signature()}|pretok:13a+compound-split"}


def sequence_accuracy(hypotheses, references):
  """Percent of outputs equal to their reference (whitespace-normalised)."""
  _check_lengths(hypotheses, references)
  if not references:
    return 0.0
  same = sum(h.split() == r.split() for h, r in zip(hypotheses, references))
  return 100.0 * same / len(references)


def score(problem, sources, hypotheses, references):
  """The problem's metric(s) -> {name: value}: BLEU both ways, bracket F1, or accuracy.

  For parsing problems, hypotheses are linearized trees; each is repaired into a tree over its
  source words (problem.example_to_tree). References may be trees or linearized trees.
  """
  _check_lengths(hypotheses, references)
  if problem.metric == "bleu":
    detok, tok = sacrebleu_bleu(hypotheses, references), paper_bleu(hypotheses, references)
    return {"bleu": detok["bleu"], "bleu_signature": detok["signature"],
            "paper_bleu": tok["bleu"], "paper_bleu_signature": tok["signature"]}
  if problem.metric == "bracket_f1":
    f1 = problem.bracket_f1(*parse_trees(problem, sources, hypotheses, references))
    return {"bracket_" + key: value for key, value in f1.items()}
  if problem.metric == "accuracy":
    return {"accuracy": sequence_accuracy(hypotheses, references)}
  raise MetricError(f"unknown metric {problem.metric!r} of problem {problem.name}")


def parse_trees(problem, sources, hypotheses, references):
  """Parsing: (gold trees, predicted trees), one string each, as EVALB is to read them.

  Hypotheses (linearized trees) are repaired into trees over their source words; references
  are trees (used as they are: EVALB counts e.g. a `( (S ...) )` wrapper) or linearized trees.
  """
  _check_lengths(hypotheses, references)
  predicted = [problem.example_to_tree(s, h) for s, h in zip(sources, hypotheses)]
  return [_as_tree(problem, s, r) for s, r in zip(sources, references)], predicted


def evalb_report(problem, sources, hypotheses, references):
  """Parsing: EVALB's printed report (per-sentence table and summaries) of the hypotheses."""
  from t2t_lite import evalb
  return evalb.report(evalb.evaluate(*parse_trees(problem, sources, hypotheses, references)))


def _as_tree(problem, source, reference):
  """A reference line: a bracketed tree over the source words, or a linearized tree."""
  from t2t_lite import parsing
  try:
    tree = parsing.parse_tree(reference)
    if tree.words() == source.split():
      return reference
  except ValueError:
    pass
  return problem.example_to_tree(source, reference, repair_punctuation=False)
