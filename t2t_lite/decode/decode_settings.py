"""How to decode: `DecodeSettings`, one declaration of the search's and the sampler's settings
and one rule for where each value comes from (a flag, else hparams.json's, else the problem's:
section 6.1's beam 4, alpha 0.6, max output = input + 50). Every tool and the export take their
decoding flags from its fields; `translation.Translator` decodes with them. Imports no
TensorFlow, so that the tools' --help stays quick.
"""
import dataclasses

from t2t_lite.errors import T2TLiteError


class DecodingError(T2TLiteError, ValueError):
  """A bad decoding setting (one-line message)."""


def _setting(help, default=dataclasses.MISSING, resolved=False):
  """A field with its flag's help; `resolved` (always without a default): DecodeSettings.resolve
  fills it from a flag, hparams or the problem."""
  resolved = resolved or default is dataclasses.MISSING
  return dataclasses.field(default=default, metadata={"help": help, "resolved": resolved})


_RESOLVED = "Default: hparams.json's, else the problem's"


@dataclasses.dataclass(frozen=True)
class DecodeSettings:
  """How to search. Beam search (section 6.1): beam size, length penalty alpha, max output =
  source length + extra_length, and the n_best best outputs a sentence. Or sampling
  (`sample`): n_best samples a sentence drawn with `temperature`, from the `top_k` most likely
  tokens (0: all) and the nucleus of probability `top_p` (1: all), from `seed`. Each field is
  a flag of t2t-lite-decode and t2t-lite-export (score and attention take some) of the same
  name, whose help is declared here, beside the field (bin/flags.py's add_fields); a field
  without a default, and bracket_offset (a default of its own, so that settings built for a
  Transformer need not name it), is `resolve`d."""
  beam_size: int = _setting(f"hypotheses kept a sentence (section 6.1); 1 = greedy. {_RESOLVED}")
  alpha: float = _setting("length penalty: outputs are ranked by log P(Y) / ((5 + |Y|) / "
                          f"6)^alpha. {_RESOLVED}")
  extra_length: int = _setting(f"max output length = input length + this. {_RESOLVED}")
  bracket_offset: float = _setting(
      "span parsers (architecture=span_parser): added to every span's log-odds before CKY picks "
      "the tree; > 0 gives more brackets (recall for precision). Choose it on dev. "
      f"{_RESOLVED} (0)", 0.0, resolved=True)
  n_best: int = _setting("outputs a sentence, best first (at most --beam_size; sampled: samples "
                         "a sentence)", 1)
  sample: bool = _setting("draw outputs from the model's distribution instead of searching (e.g. "
                          "for back-translation); --n_best samples a sentence", False)
  temperature: float = _setting("sampling: logits divided by it (towards 0: greedy)", 1.0)
  top_k: int = _setting("sampling: from the k most likely tokens only (0: all)", 0)
  top_p: float = _setting("sampling: from the fewest most likely tokens whose probability "
                          "reaches p (nucleus sampling; 1: all)", 1.0)
  seed: int = _setting("sampling: the same seed and input give the same samples (with --xla "
                       "other samples than without)", 0)
  shortlist: bool = _setting("search each batch's outputs among the target tokens its source "
                             "tokens make likely (a table built from the run's training data "
                             "and kept in model_dir; shortlist.py): faster, near the same "
                             "outputs. Beam search without --xla", False)

  def __post_init__(self):
    checks = (("beam_size", self.beam_size >= 1, ">= 1"), ("alpha", self.alpha >= 0, ">= 0"),
              ("extra_length", self.extra_length >= 1, ">= 1"),
              ("n_best", self.n_best >= 1, ">= 1"), ("temperature", self.temperature > 0, "> 0"),
              ("top_k", self.top_k >= 0, ">= 0"), ("top_p", 0 < self.top_p <= 1, "in (0, 1]"))
    for name, ok, wanted in checks:
      if not ok:
        raise DecodingError(f"{name} must be {wanted}, got {getattr(self, name)}")
    if self.shortlist and self.sample:
      raise DecodingError("shortlist with sample: sampling draws from the whole vocabulary; "
                          "drop one of them")
    if not self.sample and self.n_best > self.beam_size:
      raise DecodingError(f"n_best={self.n_best} is more than beam_size={self.beam_size}: a beam "
                          f"search keeps beam_size outputs; raise --beam_size")

  def check_forcing(self, what, output_constraint=None):
    """Target prefixes and lexical constraints (`what`) are forced in the beam search over the
    whole vocabulary: refused in one line with what cannot force them."""
    reason = ("sampling" if self.sample else "the shortlist" if self.shortlist else
              "this problem's output constraint" if output_constraint is not None else None)
    if reason:
      raise DecodingError(f"{what} with {reason}: {what} are forced in the beam search over the "
                          "whole vocabulary")

  @classmethod
  def resolve(cls, problem, hparams=None, **given):
    """The resolved fields (beam_size, alpha, extra_length, bracket_offset): the argument (a
    flag) if not None, else hparams' if set, else the problem's class default. The one place
    where these three sources meet. Other fields: the argument, else their default."""
    values = {}
    for name in [f.name for f in dataclasses.fields(cls) if f.metadata["resolved"]]:
      for source in (given.pop(name, None), getattr(hparams, name, None),
                     getattr(problem, name)):
        if source is not None:
          values[name] = source
          break
    return cls(**values, **{k: v for k, v in given.items() if v is not None})

  def as_kwargs(self):
    return dataclasses.asdict(self)
