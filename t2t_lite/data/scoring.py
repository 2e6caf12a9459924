"""Corpus scores of decoded outputs: BLEU (sacrebleu and the paper's) and accuracy (parsing's
bracket F1: t2t_lite/parsing/evalb.py).

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
  # Imported here: sacremoses compiles its rules on import (~0.4 s), which every tool process
  # (they all load the problems) would otherwise pay, scoring or not.
  import sacremoses
  return sacremoses.MosesTokenizer(lang=lang)


def _sacremoses_version():
  import importlib.metadata
  return importlib.metadata.version("sacremoses")


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
          "signature": f"tokenizer.perl -l {lang} (sacremoses {_sacremoses_version()}){split} + "
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
