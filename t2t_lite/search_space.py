"""A search space: tensor2tensor's ranged hparams. For each field a choice of values, an int range
or a float range (linear or log), over the fields of HParams and over training options
(TrainConfig's fields, such as ema_decay). Ranged hparams are registered by name beside the
hparams sets (`@register_ranged_hparams()` in the repository's hparams/ folder) and searched by
t2t-lite-tune, whose sampler (Optuna's) draws from them through a trial's `suggest_*` methods.

  SearchSpace(dropout=FloatRange(0.1, 0.4), d_model=Choice([128, 256]),
              warmup_steps=IntRange(400, 4000, log=True), ema_decay=FloatRange(0.99, 0.9999))

A space checks its own ranges when it is made (low <= high, a log range above 0), and the fields
it ranges over in `check`: an unknown name says "did you mean", a value out of its field's
range (a dropout range reaching 1) is refused there, before any trial runs. A sampled
combination may still be refused as a whole (d_model not divisible by num_heads): the tuner
records that trial as pruned, with the reason, and goes on.
"""
import dataclasses
import math
from typing import Any

from t2t_lite import hyperparams
from t2t_lite.errors import T2TLiteError, did_you_mean


class SearchSpaceError(T2TLiteError, ValueError):
  """A range that is not one, or over a field that does not exist or cannot take its values."""


def _is_number(value, kind):
  return isinstance(value, kind) and not isinstance(value, bool)


@dataclasses.dataclass(frozen=True)
class Choice:
  """One of `values` (numbers, strings, booleans)."""
  values: tuple

  def __post_init__(self):
    object.__setattr__(self, "values", tuple(self.values))
    if not self.values or len(set(self.values)) != len(self.values):
      raise SearchSpaceError(f"a choice needs distinct values, got {list(self.values)}")

  def suggest(self, trial, name):
    return trial.suggest_categorical(name, list(self.values))

  def parse(self, text):
    """The value written `text`, or None if it is not one of the values."""
    return {str(value): value for value in self.values}.get(text)

  def extremes(self):
    """The values whose check checks every value the range can give."""
    return self.values


@dataclasses.dataclass(frozen=True)
class IntRange:
  """An integer in [low, high] (both included), every `step`th, or log-uniform (log=True)."""
  low: int
  high: int
  step: int = 1
  log: bool = False

  def __post_init__(self):
    if not all(_is_number(v, int) for v in (self.low, self.high, self.step)):
      raise SearchSpaceError(f"an int range needs integers, got {self}")
    if not (self.low <= self.high and self.step >= 1 and (
        not self.log or (self.low >= 1 and self.step == 1))):
      raise SearchSpaceError(f"not an int range: {self} (low <= high, step >= 1; a log range "
                             "needs low >= 1 and step 1)")

  def suggest(self, trial, name):
    return trial.suggest_int(name, self.low, self.high, step=self.step, log=self.log)

  def parse(self, text):
    try:
      value = int(text)
    except ValueError:
      return None
    return value if self.low <= value <= self.high and (value - self.low) % self.step == 0 \
        else None

  def extremes(self):
    # Every field's valid range is an interval: its ends decide for the values between.
    return (self.low, self.high)


@dataclasses.dataclass(frozen=True)
class FloatRange:
  """A number in [low, high] (both included), uniform or log-uniform (log=True)."""
  low: float
  high: float
  log: bool = False

  def __post_init__(self):
    if not all(_is_number(v, (int, float)) and math.isfinite(v) for v in (self.low, self.high)):
      raise SearchSpaceError(f"a float range needs finite numbers, got {self}")
    if not (self.low <= self.high and (not self.log or self.low > 0)):
      raise SearchSpaceError(f"not a float range: {self} (low <= high; a log range needs "
                             "low > 0)")
    object.__setattr__(self, "low", float(self.low))
    object.__setattr__(self, "high", float(self.high))

  def suggest(self, trial, name):
    return trial.suggest_float(name, self.low, self.high, log=self.log)

  def parse(self, text):
    try:
      value = float(text)
    except ValueError:
      return None
    return value if self.low <= value <= self.high else None

  def extremes(self):
    return (self.low, self.high)


RANGE_TYPES = (Choice, IntRange, FloatRange)
_HPARAMS = tuple(field.name for field in dataclasses.fields(hyperparams.HParams))


class SearchSpace:
  """Field name -> Choice, IntRange or FloatRange. HParams fields become a trial's
  --hparams_overrides, the other names training options (flags of t2t-lite-train)."""

  def __init__(self, **ranges):
    for name, value in ranges.items():
      if not isinstance(value, RANGE_TYPES):
        raise SearchSpaceError(f"the range of {name!r} is a {type(value).__name__}, not a "
                               "Choice, IntRange or FloatRange")
    self.ranges = dict(sorted(ranges.items()))

  def __repr__(self):
    return f"SearchSpace({', '.join(f'{k}={v}' for k, v in self.ranges.items())})"

  def check(self, options):
    """Checks every name and the values each range can take. `options`: {name: check(value)}
    of the training options a range may cover, each check raising a T2TLiteError for a value
    its option refuses; HParams fields are checked as HParams checks them one by one."""
    known = (*_HPARAMS, *options)
    for name, value_range in self.ranges.items():
      if name not in known:
        raise SearchSpaceError(f"cannot range over {name!r}: not an hparam or a training "
                               f"option{did_you_mean(name, known)}")
      for value in value_range.extremes():
        try:
          if name in _HPARAMS:
            hyperparams.check_value(name, value, f"the range of {name}")
          else:
            options[name](value)
        except T2TLiteError as e:
          raise SearchSpaceError(f"the range of {name} ({value_range}) holds a value its field "
                                 f"refuses: {e}") from None

  def values(self, text):
    """"name=value,..." -> {name: value}: values of ranged fields that a queued trial takes
    instead of drawing them (the others it draws); each inside its range."""
    values = {}
    for item in filter(str.strip, text.split(",")):
      name, _, written = (part.strip() for part in item.partition("="))
      if name not in self.ranges:
        raise SearchSpaceError(f"{item.strip()!r}: {name!r} is not a ranged field"
                               f"{did_you_mean(name, self.ranges)}")
      value = self.ranges[name].parse(written)
      if value is None:
        raise SearchSpaceError(f"{item.strip()!r}: {written!r} is not a value of the range "
                               f"{self.ranges[name]}")
      values[name] = value
    if not values:
      raise SearchSpaceError(f"no name=value in {text!r}")
    return values

  def sample(self, trial):
    """{name: value} drawn through `trial` (an optuna.Trial: its suggest_* methods)."""
    return {name: value_range.suggest(trial, name) for name, value_range in self.ranges.items()}


def hparams_overrides(values):
  """The HParams fields of `values` ({name: value}) as "name=value,..." (--hparams_overrides)."""
  return ",".join(f"{name}={value!r}" if isinstance(value, float) else f"{name}={value}"
                  for name, value in sorted(values.items()) if name in _HPARAMS)


def training_options(values) -> dict[str, Any]:
  """The names of `values` that are not HParams fields (training options), with their values."""
  return {name: value for name, value in sorted(values.items()) if name not in _HPARAMS}
