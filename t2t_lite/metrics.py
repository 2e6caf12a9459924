"""Corpus scores of decoded outputs: BLEU (sacrebleu and the paper's), bracket F1, accuracy.

Two BLEU scores, because they answer different questions; each comes with a signature saying
how it was computed:
  * `sacrebleu_bleu`: detokenized BLEU with sacrebleu's default 13a tokenization and its
    signature (nrefs, case, eff, tok, smooth, version): the number to compare across papers.
  * `paper_bleu`: what the Transformer paper reported, computed as tensor2tensor's
    get_ende_bleu.sh does: Moses `tokenizer.perl -l <lang>` on hypotheses and references
    (sacremoses, its Python port: same rules, same XML escaping of & | < > ' " [ ]; as in
    2017, a sentence-final non-breaking prefix keeps its period: see docs/decoding.md), then for
    German the compound split `perl -ple 's{(\\S)-(\\S)}{$1 ##AT##-##AT## $2}g'`, then
    multi-bleu.perl: corpus BLEU on the tokens as they are, case-sensitive, no smoothing
    (sacrebleu with tokenize="none", smooth_method="none": the same counts and formula).
    EN-FR: the same without the compound split. Tokenized BLEU is higher than detokenized BLEU;
    only this one compares with the paper's Table 2.
"""
import functools
import re

import sacremoses
from sacrebleu.metrics import BLEU

from t2t_lite.errors import T2TLiteError

_COMPOUND = re.compile(r"(\S)-(\S)")
_COMPOUND_SPLIT_LANGS = ("de",)  # get_ende_bleu.sh splits German compounds; EN-FR did not.


class MetricError(T2TLiteError, ValueError):
  """Mismatched hypotheses and references (one-line message)."""


def _check_lengths(hypotheses, references):
  if len(hypotheses) != len(references):
    raise MetricError(f"{len(hypotheses)} hypotheses but {len(references)} references")


@functools.lru_cache(maxsize=None)
def _moses_tokenizer(lang):
  return sacremoses.MosesTokenizer(lang=lang)


def moses_tokenize(text, lang):
  """`tokenizer.perl -l lang` (no -a, escaping on): 'Tom's "Rad-Tour"' ->
  'Tom &apos; s &quot; Rad-Tour &quot;' for German."""
  return _moses_tokenizer(lang).tokenize(text.strip(), return_str=True, escape=True)


def split_compounds(tokenized):
  """tensor2tensor's get_ende_bleu.sh compound split: "Fußball-Spiel" -> "Fußball ##AT##-##AT##
  Spiel" (Perl's s///g semantics: non-overlapping, left to right, as re.sub)."""
  return _COMPOUND.sub(r"\1 ##AT##-##AT## \2", tokenized)


def paper_tokenize(text, lang="de"):
  """Moses tokenization, then (German) the compound split: the text paper_bleu scores."""
  tokenized = moses_tokenize(text, lang)
  return split_compounds(tokenized) if lang in _COMPOUND_SPLIT_LANGS else tokenized


def sacrebleu_bleu(hypotheses, references):
  """Detokenized corpus BLEU -> {"bleu": float, "signature": str}."""
  _check_lengths(hypotheses, references)
  bleu = BLEU()
  score = bleu.corpus_score(list(hypotheses), [list(references)])
  return {"bleu": score.score, "signature": f"sacreBLEU {bleu.get_signature()}"}


def paper_bleu(hypotheses, references, lang="de"):
  """Tokenized corpus BLEU as in the paper (see the module docstring) -> {"bleu", "signature"}.
  lang: the target language, for Moses' rules (and the compound split when German)."""
  _check_lengths(hypotheses, references)
  bleu = BLEU(tokenize="none", force=True, smooth_method="none")
  score = bleu.corpus_score([paper_tokenize(h, lang) for h in hypotheses],
                            [[paper_tokenize(r, lang) for r in references]])
  split = " + ##AT## compound split" if lang in _COMPOUND_SPLIT_LANGS else ""
  return {"bleu": score.score,
          "signature": f"tokenizer.perl -l {lang} (sacremoses {sacremoses.__version__}){split} + "
                       f"multi-bleu (sacreBLEU {bleu.get_signature()})"}


def translation_scores(hypotheses, references, lang):
  """{"bleu", "bleu_signature", "paper_bleu", "paper_bleu_signature"}: both BLEUs, labelled."""
  detok, tok = sacrebleu_bleu(hypotheses, references), paper_bleu(hypotheses, references, lang)
  return {"bleu": detok["bleu"], "bleu_signature": detok["signature"],
          "paper_bleu": tok["bleu"], "paper_bleu_signature": tok["signature"]}


def sequence_accuracy(hypotheses, references):
  """Percent of outputs equal to their reference (whitespace-normalised)."""
  _check_lengths(hypotheses, references)
  if not references:
    return 0.0
  same = sum(h.split() == r.split() for h, r in zip(hypotheses, references))
  return 100.0 * same / len(references)


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
  except parsing.TreeError:  # Not a bracketed tree: a linearized one.
    tree = None
  if tree is not None and tree.words() == source.split():
    return reference
  return problem.example_to_tree(source, reference, repair_punctuation=False)
