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


def bleu_scores(hypotheses, references):
  """A translation's scores -> {"bleu", "bleu_signature", "paper_bleu", "paper_bleu_signature"}:
  detokenized sacreBLEU and the paper's tokenized BLEU (see the module docstring)."""
  _check_lengths(hypotheses, references)
  detok, tok = sacrebleu_bleu(hypotheses, references), paper_bleu(hypotheses, references)
  return {"bleu": detok["bleu"], "bleu_signature": detok["signature"],
          "paper_bleu": tok["bleu"], "paper_bleu_signature": tok["signature"]}
