"""How to decode: `DecodeSettings`, one declaration of the search's and the sampler's settings
and one rule for where each value comes from (a flag, else hparams.json's, else the problem's:
section 6.1's beam 4, alpha 0.6, max output = input + 50). Every tool and the export take their
decoding flags from its fields; `translation.Translator` decodes with them. Imports no
TensorFlow, so that the tools' --help stays quick.
"""
import dataclasses

from t2t_lite.decode import composition
from t2t_lite.errors import T2TLiteError


class DecodingError(T2TLiteError, ValueError):
  """A bad decoding setting (one-line message)."""


def _setting(help, default=dataclasses.MISSING, resolved=False):
  """A field with its flag's help; `resolved` (always without a default): DecodeSettings.resolve
  fills it from a flag, hparams or the problem."""
  resolved = resolved or default is dataclasses.MISSING
  return dataclasses.field(default=default, metadata={"help": help, "resolved": resolved})


_RESOLVED = "Default: hparams.json's, else the problem's"
# What check_request's `forcing` names: what is forced through the beam search.
TARGET_PREFIXES, CONSTRAINTS = composition.TARGET_PREFIXES, composition.CONSTRAINTS
# (field, the test of a value, what it must be): each value given is checked alone.
_BOUNDS = (("beam_size", lambda v: v >= 1, ">= 1"), ("alpha", lambda v: v >= 0, ">= 0"),
           ("extra_length", lambda v: v >= 1, ">= 1"), ("n_best", lambda v: v >= 1, ">= 1"),
           ("temperature", lambda v: v > 0, "> 0"), ("top_k", lambda v: v >= 0, ">= 0"),
           ("top_p", lambda v: 0 < v <= 1, "in (0, 1]"))


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
    check_request(**self.as_kwargs())

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


# Why a span parser's decoding does not do what a Transformer's does.
ONE_TREE = ("it scores spans, not output tokens, and decodes its one best tree by CKY (an "
            "encoder-decoder parser, architecture=transformer, can)")


def _check_model_kind(span_parser, values, with_alignments, forcing):
  """What a span parser's decoding cannot do, and the span parser's setting bracket_offset
  with an encoder-decoder model, refused in one line."""
  if not span_parser:
    if values.get("bracket_offset"):
      raise DecodingError(f"bracket_offset={values['bracket_offset']} with an encoder-decoder "
                          "model: it is a span parser's (architecture=span_parser) setting")
    return
  asked = [name for name, value in (("n_best > 1", values.get("n_best", 1) > 1),
                                    ("sampling", values.get("sample")),
                                    ("a shortlist", values.get("shortlist")),
                                    ("alignments", with_alignments)) if value] + list(forcing)
  if asked:
    raise DecodingError(f"{asked[0]} with a span parser: {ONE_TREE}")


def forced(prefixes, constraints):
  """check_request's `forcing` of a request that forces target prefixes and / or lexical
  constraints (each a bool)."""
  return [what for what, asked in ((TARGET_PREFIXES, prefixes), (CONSTRAINTS, constraints))
          if asked]


def check_request(forcing=(), jit_compile=False, max_input_length=None, output_constraint=False,
                  span_parser=None, with_alignments=False, engine=None, ensemble=False,
                  **settings):
  """Refuses in one line a decoding request that cannot be decoded, from plain values: the
  settings given (DecodeSettings' fields; one left None or out is resolved later, from hparams
  or the problem, and checked then), what it forces through the search (`forcing`:
  TARGET_PREFIXES, CONSTRAINTS), XLA, max_input_length, alignments, and what only a loaded run
  knows: whether the problem has an output constraint, whether the model is a span parser
  (None: not known yet); the engine ("litert": what its model cannot carry; None or
  "tensorflow": everything) and whether the model is an ensemble. No model, no TensorFlow: the
  tools call it before TensorFlow loads, and Translator.from_model_dir, translate() and the
  exports before anything is loaded, built (a shortlist) or written, and again once the model
  is loaded; DecodeSettings runs it on every resolved set. Which features cannot be combined is
  composition.py's table."""
  values = {name: value for name, value in settings.items() if value is not None}
  for name, ok, wanted in _BOUNDS:
    if name in values and not ok(values[name]):
      raise DecodingError(f"{name} must be {wanted}, got {values[name]}")
  if max_input_length is not None and max_input_length < 2:
    # Not "0 = the default": a value given is the value used.
    raise DecodingError(f"max_input_length must be >= 2 (a token and EOS), got "
                        f"{max_input_length}; leave it out for hparams max_length")
  if span_parser is not None:
    _check_model_kind(span_parser, values, with_alignments, forcing)
  sample, shortlist = values.get("sample"), values.get("shortlist")
  asked = set(forcing) | {feature for feature, on in (
      (composition.SAMPLING, sample), (composition.SHORTLIST, shortlist),
      (composition.XLA, jit_compile), (composition.OUTPUT_CONSTRAINT, output_constraint),
      (composition.LITERT, engine == "litert"), (composition.ALIGNMENTS, with_alignments),
      (composition.SPAN_PARSER, span_parser), (composition.ENSEMBLE, ensemble)) if on}
  refused = composition.refusal(asked)
  if refused:
    raise DecodingError(refused.message)
  beam_size, n_best = values.get("beam_size"), values.get("n_best")
  if not sample and beam_size is not None and n_best is not None and n_best > beam_size:
    raise DecodingError(f"n_best={n_best} is more than beam_size={beam_size}: a beam search "
                        "keeps beam_size outputs; raise --beam_size")
