"""A translator's side in Python: lines decoded in batches of similar length, their outputs put
back in input order as numpy arrays, target prefixes and constraints checked line by line
before anything is decoded, and a warning naming each line cut to max_input_length. What
t2t-lite-decode, t2t-lite-score, `t2t_lite.translate()` and the dev metric call, for both
engines: the TensorFlow Translator (translation.py, whose graph side is there) and the LiteRT
runtime (t2t_lite/litert/runtime.py). Imports no TensorFlow: each engine answers a batch
(`decode_batch`) its own way.
"""
import logging
import numbers

import numpy as np

from t2t_lite.decode.decode_settings import DecodingError

logger = logging.getLogger(__name__)


class LineDecoding:
  """A translator's methods over Python lists of lines (a mixin: `self` is the translator, with
  its settings, max_input_length and jit_compile, check_forcing, constraint_problems_of(lines,
  constraints) (for check_prefixes and check_constraints), score_batch (for score), and
  `decode_batch(lines, prefixes, constraints)` -> {"outputs": str [B, N], "scores", ...} as
  numpy arrays for one batch; prefixes and constraints None where not asked for)."""

  def decode_lines(self, lines, batch_size=32, progress=None, first_number=1, prefixes=None,
                   constraints=None):
    """decode_text over `lines` in batches of `batch_size`, longest first (similar lengths
    together, and the slowest batch found early) -> a dict of numpy arrays in input order:
    "outputs" (str [B, N]), "scores" [B, N], "truncated" [B] (and "alignments").
    `progress(n)` is called after each batch with the number of lines done; each line cut to
    max_input_length gets a warning naming it (lines[0] is line `first_number`). prefixes:
    a target prefix for each line (decode_with_prefix), or None; constraints: a list of target
    phrases for each line (decode_with_constraints), checked before anything is decoded; both
    (decode_with_prefix_and_constraints): outputs that start with the prefix and contain the
    phrases."""
    check_batch_size(batch_size)
    extra = {"prefixes": prefixes, "constraints": constraints}
    for name, values in extra.items():
      if values is not None and len(values) != len(lines):
        raise DecodingError(f"{len(values)} lines of {name} for {len(lines)} lines")
    if prefixes is not None:
      self.check_prefixes(lines, prefixes, first_number)
    if constraints is not None:
      self.check_constraints(lines, constraints, first_number)
    order = sorted(range(len(lines)), key=lambda i: -len(lines[i]))
    results = {}
    for start in range(0, len(order), batch_size):
      chunk = order[start:start + batch_size]
      batch = [[lines[i] for i in chunk]] + [
          None if values is None else [values[i] for i in chunk] for values in extra.values()]
      if self.jit_compile:  # One batch shape for XLA: padded with blank lines.
        batch = [part and part + [part[0][:0]] * (batch_size - len(part)) for part in batch]
      for key, value in self.decode_batch(*batch).items():
        value = value[:len(chunk)]
        if key not in results:
          results[key] = np.empty((len(lines),) + value.shape[1:], value.dtype)
        results[key][chunk] = value
      if progress:
        progress(len(chunk))
    self._warn_truncated(results.get("truncated", []), "line %d: longer", first_number)
    if not lines:
      n = self.settings.n_best
      results = {"outputs": np.empty([0, n], object), "scores": np.empty([0, n], np.float32),
                 "truncated": np.empty([0], bool)}
    return results

  def check_prefixes(self, lines, prefixes, first_number=1, batch_size=256):
    """Refuses in one line, naming it, the first line whose target prefix has a word that is
    not in the model's vocabulary: forced, it would be UNK (<unk> in the output, not the
    word). Decided as for a constraint (constraint_problems' "unknown", a prefix being one
    phrase), and refused alike (check_constraints). lines[0] is line `first_number`."""
    self.check_forcing()
    for start in range(0, len(lines), batch_size):
      part = prefixes[start:start + batch_size]
      unknown = np.flatnonzero(self.constraint_problems_of(
          lines[start:start + batch_size], [[prefix] for prefix in part])["unknown"])
      if unknown.size:
        i = unknown[0]
        raise DecodingError(f"line {start + i + first_number}: a target prefix ({part[i]}) has "
                            "a word that is not in the model's vocabulary")

  def check_constraints(self, lines, constraints, first_number=1, batch_size=256):
    """Refuses in one line, naming it, the first line whose constraints cannot be met."""
    self.check_forcing("lexical constraints")
    for start in range(0, len(lines), batch_size):
      part = constraints[start:start + batch_size]
      found = self.constraint_problems_of(lines[start:start + batch_size], rows(part))
      for i in np.flatnonzero(found["unknown"] | found["too_long"]):
        where = f"line {start + i + first_number}"
        if found["unknown"][i]:
          raise DecodingError(f"{where}: a constraint ({' | '.join(part[i])}) has a word that is "
                              "not in the model's vocabulary")
        raise DecodingError(
            f"{where}: its constraints are {found['tokens'][i]} tokens, more than its output "
            f"may have ({found['longest'][i]}: its source's tokens + extra_length "
            f"{self.settings.extra_length}, and EOS)")

  def translate(self, lines, batch_size=32, progress=None, prefixes=None, constraints=None):
    """Translates lines -> (texts, scores), in input order: one text and score a line, or with
    n_best > 1 a list of N a line. Empty lines give "" (score 0); lines longer than
    max_input_length tokens are cut (with a warning naming them). prefixes: the words each
    line's outputs start with (scored as part of them), or None; constraints: the phrases each
    line's outputs contain (a list a line, [] for none), or None."""
    listed = lambda values: None if values is None else list(values)
    results = self.decode_lines(list(lines), batch_size, progress, prefixes=listed(prefixes),
                                constraints=listed(constraints))
    texts, scores = results["outputs"].tolist(), results["scores"].tolist()
    if self.settings.n_best == 1:
      return [t[0] for t in texts], [s[0] for s in scores]
    return texts, scores

  def score(self, sources, targets, batch_size=32):
    """score_text over pairs, in batches -> {"logprob", "tokens", "score", "truncated"} lists
    (empty ones for no pairs)."""
    check_batch_size(batch_size)
    results = {key: [] for key in ("logprob", "tokens", "score", "truncated")}
    for start in range(0, len(sources), batch_size):
      out = self.score_batch(sources[start:start + batch_size],
                             targets[start:start + batch_size])
      for key, value in out.items():
        results[key].extend(value.tolist())
    self._warn_truncated(results["truncated"], "pair %d: source longer")
    return results

  def _warn_truncated(self, truncated, what, first_number=1):
    """One warning for each input cut to max_input_length (`what` % its number, the first
    input's being first_number)."""
    for i in np.flatnonzero(truncated):
      logger.warning(what + " than %d tokens (EOS included): truncated", i + first_number,
                     self.max_input_length)


def as_numpy(result):
  """{name: tensor} -> {name: numpy array}, strings decoded from UTF-8."""
  arrays = {}
  for key, value in result.items():
    value = value.numpy()
    if value.dtype == object:
      value = np.vectorize(lambda b: b.decode("utf-8"), otypes=[object])(value)
    arrays[key] = value
  return arrays


def check_batch_size(batch_size):
  """Refuses a batch size below 1: 0 would stop range() with a traceback, a negative one decode
  or score nothing and pass for done. The tools refuse it at parsing (flags.positive_int); the
  Python API (translate(), score()) comes here."""
  if not isinstance(batch_size, numbers.Integral) or batch_size < 1:
    raise DecodingError(f"batch_size must be an integer >= 1, got {batch_size!r}")


def rows(part):
  """A batch's strings, or its lists of constraints padded with "" to the longest."""
  if not part or isinstance(part[0], str):
    return part
  width = max(1, max(len(row) for row in part))
  return [list(row) + [""] * (width - len(row)) for row in part]
