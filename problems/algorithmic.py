"""Toy problems generated on the fly (no raw files): copy or reverse a sequence of integers.

Inputs and outputs are space-separated integers as text, e.g. "3 9 4" -> "4 9 3" (reverse).
The vocabulary is fixed: PAD, EOS, UNK and one word per integer. Examples are drawn from a
seeded generator, a different seed per split, so every run prepares the same data.
"""
import random

from t2t_lite.data import scoring
from t2t_lite.data.problem_base import Problem
from t2t_lite.registry import register_problem
from t2t_lite.data.tokenizers import WordTokenizer

_SEEDS = {"train": 1, "dev": 2, "test": 3}


class _Algorithmic(Problem):
  metric = "accuracy"
  selection_metric = "accuracy"
  beam_size = 1
  alpha = 0.0
  extra_length = 10
  num_symbols = 10  # Integers 0 .. num_symbols - 1.
  max_input_length = 20  # Sequences have 1 .. max_input_length integers.
  train_size = 20000
  eval_size = 500  # dev and test each.
  _SETTINGS = ("num_symbols", "max_input_length", "train_size", "eval_size", "cache_in_memory")
  _ALLOWED = {"num_symbols": 1, "max_input_length": 1, "train_size": 1, "eval_size": 0}

  def transform(self, numbers):
    raise NotImplementedError

  def score(self, sources, hypotheses, references):
    """{"accuracy": percent of outputs equal to their reference}."""
    return {"accuracy": scoring.sequence_accuracy(hypotheses, references)}

  def default_raw_dir(self, data_dir):
    return None

  def build_vocab(self, data_dir, raw_dir):
    pass  # Fixed vocabulary: nothing to learn or store.

  def tokenizer(self, data_dir=None):
    return WordTokenizer([str(i) for i in range(self.num_symbols)])

  def split_size(self, split, raw_dir=None):
    return self.train_size if split == "train" else self.eval_size

  def raw_pairs(self, split, raw_dir=None):
    rng = random.Random(_SEEDS[split])
    for _ in range(self.split_size(split)):
      numbers = [rng.randrange(self.num_symbols)
                 for _ in range(rng.randint(1, self.max_input_length))]
      yield " ".join(map(str, numbers)), " ".join(map(str, self.transform(numbers)))


@register_problem("algorithmic_copy")
class AlgorithmicCopy(_Algorithmic):
  """Output = input: "3 9 4" -> "3 9 4"."""
  name = "algorithmic_copy"

  def transform(self, numbers):
    return numbers


@register_problem("algorithmic_reverse")
class AlgorithmicReverse(_Algorithmic):
  """Output = input reversed: "3 9 4" -> "4 9 3"."""
  name = "algorithmic_reverse"

  def transform(self, numbers):
    return numbers[::-1]
