"""Which model a run builds: hparams.architecture names it ("transformer": the paper's,
transformer.py; "span_parser": span_parser.py). The one place that chooses, for training,
decoding and the precision conversions alike."""
from t2t_lite.modeling import span_parser, transformer


def build_model(hparams, vocab_size, seed=None, source_slots=None, spans=None):
  """A built model of hparams.architecture with all weights created. seed: its weights' and
  dropout seeds' source; source_slots: the Transformer's (transformer.build_model); spans: the
  span parser's span_parser.SpanVocabulary (its problem's `span_vocabulary`)."""
  if hparams.architecture == "span_parser":
    if spans is None:
      raise ValueError("a span parser needs its problem's span vocabulary")
    return span_parser.build_span_parser(hparams, vocab_size, spans, seed=seed)
  return transformer.build_model(hparams, vocab_size, seed=seed, source_slots=source_slots)


def spans_of(model):
  """The SpanVocabulary a built model was made with (None for a Transformer): what a copy of
  it in another precision is built with."""
  return getattr(model, "spans", None)
