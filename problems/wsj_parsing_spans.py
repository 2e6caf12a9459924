"""`wsj_parsing_spans`: wsj_parsing for a span-classifying parser (hparams
architecture=span_parser, t2t_lite/modeling/span_parser.py).

The same treebank, splits, words vocabulary and metric as wsj_parsing (every POS tag kept); the
records' targets are what the span parser predicts instead of the linearized tree: for each
fencepost j = 1..n, the label of each span (0, j) .. (j - 1, j), "<none>" where the tree has no
constituent, then the tag of word j - 1. A unary chain is one label, "[S+VP]" for
"(S (VP ... )VP )S". The dev and test text keep the linearized trees, which the parser's
decoded outputs (decode/cky.py writes the same linearized trees) are scored against.
"""
from .wsj_parsing import WsjParsing
from t2t_lite.data.problem_base import ProblemError
from t2t_lite.modeling.span_parser import SpanVocabulary
from t2t_lite.registry import register_problem

NO_SPAN = "<none>"


def labelled_spans(source, target):
  """(words, linearized tree) -> (tags [n], {(i, j): label}): each constituent's span between
  fenceposts, a unary chain's labels joined outermost first ("S+VP")."""
  tags, spans, stack = [], {}, []
  for token in target.split():
    if token.startswith("("):
      stack.append((token[1:], len(tags)))
    elif token.startswith(")"):
      label, start = stack.pop()
      inner = spans.get((start, len(tags)))
      spans[(start, len(tags))] = label if inner is None else f"{label}+{inner}"
    else:
      tags.append(token)
  if stack or len(tags) != len(source.split()):
    raise ProblemError(f"not a tree over its {len(source.split())} words: {target[:80]!r}")
  return tags, spans


def label_token(label):
  return f"[{label}]"


@register_problem("wsj_parsing_spans")
class WsjParsingSpans(WsjParsing):
  """WSJ constituency parsing: words -> the label of every span and each word's tag."""
  name = "wsj_parsing_spans"
  predicts_spans = True
  _ALLOWED = dict(WsjParsing._ALLOWED, vocab_type=("words",), target_tags=("all",))

  def record_target(self, source, target):
    """The span labels and tags (module doc) of a linearized tree, as the records hold them."""
    tags, spans = labelled_spans(source, target)
    out = []
    for j in range(1, len(tags) + 1):
      out += [label_token(spans[(i, j)]) if (i, j) in spans else NO_SPAN for i in range(j)]
      out.append(tags[j - 1])
    return " ".join(out)

  def build_vocab(self, data_dir, raw_dir):
    """wsj_parsing's vocabulary, and the span labels of train's trees ("span_labels")."""
    super().build_vocab(data_dir, raw_dir)
    vocab = self.read_vocab(data_dir)
    labels = set()
    for source, target in self.raw_pairs("train", raw_dir):
      labels.update(labelled_spans(source, target)[1].values())
    vocab["span_labels"] = sorted(labels)
    self._write_vocab(data_dir, vocab)

  def _symbols(self, vocab, data_dir):
    if "span_labels" not in vocab:
      raise ProblemError(f"{self._vocab_path(data_dir)} holds no span labels: "
                         f"{self._how_to_prepare_again(data_dir)}")
    labels = [label_token(label) for label in vocab["span_labels"]]
    return super()._symbols(vocab, data_dir) + [NO_SPAN] + labels

  def span_vocabulary(self, data_dir):
    """The SpanVocabulary of data_dir's (or a model_dir's) vocabulary."""
    vocab, tokenizer = self.read_vocab(data_dir), self.tokenizer(data_dir)
    ids = lambda tokens: [tokenizer.encode(token)[0] for token in tokens]
    chains = [label.split("+") for label in vocab["span_labels"]]
    depth = max(len(chain) for chain in chains)
    pad = lambda row: tuple(row) + (0,) * (depth - len(row))
    return SpanVocabulary(
        classes=max(ids(self._symbols(vocab, data_dir))) + 1,
        labels=tuple(ids([NO_SPAN] + [label_token(l) for l in vocab["span_labels"]])),
        opens=((0,) * depth,) + tuple(pad(ids(f"({l}" for l in c)) for c in chains),
        closes=((0,) * depth,) + tuple(pad(ids(f"){l}" for l in reversed(c))) for c in chains),
        tags=tuple(ids(vocab["tag"])))
