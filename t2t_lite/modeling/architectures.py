"""Which model a run builds: hparams.architecture names it ("transformer": the paper's,
transformer.py; "span_parser": span_parser.py). The one place that chooses and builds, for
training, decoding and the precision conversions alike."""
import random

from t2t_lite.modeling.span_parser import SpanParser
from t2t_lite.modeling.transformer import Transformer


def build_model(hparams, vocab_size, seed=None, source_slots=None, spans=None):
  """A built model of hparams.architecture with all weights created. seed: its weights and
  dropout layer seeds are drawn from it (Keras draws unseeded initializers' seeds from Python's
  `random`, whose state is put back afterwards). source_slots: with hparams.source_pointer, the
  ids of the tokens that place a source word (a checkpoint restores them otherwise). spans: the
  span parser's span_parser.SpanVocabulary (its problem's `span_vocabulary`)."""
  if hparams.architecture == "span_parser" and spans is None:
    raise ValueError("a span parser needs its problem's span vocabulary")
  random_state = random.getstate()
  if seed is not None:
    random.seed(seed)
  try:
    if hparams.architecture == "span_parser":
      model = SpanParser(hparams, vocab_size, spans, name="span_parser")
    else:
      model = Transformer(hparams, vocab_size, name="transformer")
    model.build()
  finally:
    random.setstate(random_state)
  if source_slots is not None:
    model.source_pointer.set_slots(source_slots)
  return model


def spans_of(model):
  """The SpanVocabulary a built model was made with (None for a Transformer): what a copy of
  it in another precision is built with."""
  return getattr(model, "spans", None)
