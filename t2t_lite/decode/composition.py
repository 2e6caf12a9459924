"""What composes with what in decoding: the one table of the features that cannot be combined,
each pair with its one-line refusal and why. decode_settings.check_request reads it (the CLI,
translate(), the exports and Translator all call that), and each processor of processors.py
is named by its feature here (`Processor.name`). Imports no TensorFlow: requests are refused
before TensorFlow loads.

A pair not in the table composes: target prefixes with lexical constraints (the search's
processors apply one after the other), and either with the shortlist (the forced tokens join the
batch's vocabulary: processors.Shortlisted); tests/test_processors.py, tests/test_shortlist.py.
"""
from typing import NamedTuple

# The features a request can ask for (check_request's arguments name them).
TARGET_PREFIXES, CONSTRAINTS = "target prefixes", "lexical constraints"
SAMPLING, SHORTLIST, XLA = "sampling", "the shortlist", "--xla"
OUTPUT_CONSTRAINT = "this problem's output constraint"
# The LiteRT engine (litert_export.py, t2t_lite/litert/) and what only it cannot carry.
LITERT = "the LiteRT engine"
ALIGNMENTS, SPAN_PARSER, ENSEMBLE = "word alignments", "a span parser", "an ensemble"


def _forced_in_beam_search(what):
  return f"{what} are forced in the beam search over the whole vocabulary"


class Exclusion(NamedTuple):
  first: str  # a feature
  second: str  # another, that cannot be combined with it
  message: str  # the one-line refusal
  why: str  # for the reader: why it is refused, where the message does not say it all


def _forcing(what, other, why):
  return Exclusion(what, other, f"{what} with {other}: {_forced_in_beam_search(what)}", why)


# In the order check_request tries them: a request is refused with the first pair it asks for.
EXCLUDED = (
    Exclusion(SHORTLIST, SAMPLING, "shortlist with sample: sampling draws from the whole "
              "vocabulary; drop one of them", "a shortlist is a beam search's"),
    Exclusion(SHORTLIST, XLA, "shortlist with --xla: a batch's shortlist has its own size, for "
              "which XLA would compile the search again; decode without --xla",
              "XLA compiles for each shape"),
    Exclusion(SHORTLIST, OUTPUT_CONSTRAINT, "shortlist with this problem's output constraint: "
              "the constraint masks the whole vocabulary; decode without --shortlist",
              "a grammar's state and masks index token ids [V], the shortlist's logits are [V']"),
    _forcing(TARGET_PREFIXES, SAMPLING, "the sampler draws every token; forcing its first ones "
             "would change what a sample means (its score is log P of a free draw)"),
    _forcing(TARGET_PREFIXES, OUTPUT_CONSTRAINT, "a grammar may forbid the prefix's tokens: "
             "their forced log-probability would be NEG_INF"),
    _forcing(CONSTRAINTS, SAMPLING, "dynamic beam allocation chooses among beams; a sampler "
             "has none"),
    _forcing(CONSTRAINTS, OUTPUT_CONSTRAINT, "a grammar may forbid a phrase's tokens where it "
             "must come; the search could not meet it and would cut every output"),
)


def _not_in_litert(other, why):
  return Exclusion(LITERT, other, f"{other} with {LITERT}: its .tflite model holds one "
                   f"Transformer's beam search{why}; use --engine=tensorflow (or export "
                   "--format=savedmodel)", why)


# The LiteRT model is one Transformer's encoder and beam search (with target prefixes) in
# TFLite's builtin ops: what is not in that graph is refused before anything is exported.
EXCLUDED += (
    _not_in_litert(SAMPLING, ", not the sampler"),
    _not_in_litert(SHORTLIST, ", over the whole vocabulary"),
    _not_in_litert(CONSTRAINTS, " without dynamic beam allocation"),
    _not_in_litert(OUTPUT_CONSTRAINT, " without a grammar"),
    _not_in_litert(XLA, " (XLA is TensorFlow's compiler)"),
    _not_in_litert(ALIGNMENTS, ", not the attention weights"),
    _not_in_litert(SPAN_PARSER, ", not CKY"),
    _not_in_litert(ENSEMBLE, ", of one model"),
)


def refusal(asked):
  """The first Exclusion of EXCLUDED whose two features are both in `asked` (a set of the
  features above), or None: they compose."""
  for exclusion in EXCLUDED:
    if exclusion.first in asked and exclusion.second in asked:
      return exclusion
  return None
