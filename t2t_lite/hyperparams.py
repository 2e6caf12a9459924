"""HParams: one frozen, typed dataclass; named sets live in the repository's `hparams/` folder
(installed as `t2t_lite.hparams`).

Overrides use tensor2tensor's syntax, `"num_layers=4,dropout=0.3"`, and are type-checked: an
unknown name says "did you mean", a value of the wrong type names the field and the type wanted.
"""
import dataclasses
import json
import math
import typing
from typing import Optional

from t2t_lite.errors import T2TLiteError, did_you_mean


class HParamsError(T2TLiteError, ValueError):
  """A bad override or an inconsistent set of hyperparameters (one-line message)."""


@dataclasses.dataclass(frozen=True)
class HParams:
  """Hyperparameters of a Transformer run. Defaults are the paper's base model (section 3, 5)."""
  # Model (section 3). d_k / d_v of 0 mean d_model // num_heads.
  # Not in the paper: "span_parser", an encoder that classifies spans (modeling/span_parser.py),
  # for the wsj_parsing_spans problem.
  architecture: str = "transformer"
  num_layers: int = 6  # N, for both the encoder and the decoder stack.
  # Not in the paper: a decoder stack of its own depth (0 = num_layers), as fairseq's
  # --decoder-layers: a deep encoder and a shallow decoder (Kasai et al. 2021) decode faster.
  decoder_layers: int = 0
  d_model: int = 512
  d_ff: int = 2048
  num_heads: int = 8
  d_k: int = 0
  d_v: int = 0
  norm_type: str = "post"  # "post": LayerNorm(x + Sublayer(x)) as the paper; or "pre".
  position_encoding: str = "sinusoid"  # or "learned" (Table 3 row E).
  max_length: int = 256  # Longest source or target (tokens) kept for training; learned positions.
  # Not in the paper: the decoder's input also carries the encoder's output at the next source
  # word to place (pointer.py), for problems whose outputs place their words in order
  # (wsj_parsing's word slots).
  source_pointer: bool = False
  # Regularisation (section 5.4).
  dropout: float = 0.1  # P_drop: sub-layer outputs and embedding + position sums.
  attention_dropout: float = 0.0  # On attention weights (not in the paper; t2t default 0).
  relu_dropout: float = 0.0  # Inside the FFN, after the ReLU (not in the paper).
  label_smoothing: float = 0.1
  # Not in the paper: each word type of a training example becomes its unknown-word class with
  # this probability (data/word_dropout.py), for vocabularies with such classes (wsj_parsing's).
  word_dropout: float = 0.0
  # Not in the paper: each source and target-input token's whole embedding is zeroed with this
  # probability in training (Marian's --dropout-src / --dropout-trg; Sennrich and Zhang 2019
  # for small corpora), the rest scaled by 1 / (1 - p); positions are added after it.
  token_dropout: float = 0.0
  # Not in the paper: R-Drop (Liang et al. 2021): each training batch runs twice, with two
  # dropout masks, and this weight (their alpha) times the two outputs' symmetric KL divergence
  # joins the loss (losses.rdrop_loss); batch_size still counts each pair once.
  rdrop: float = 0.0
  # Optimisation (section 5.3).
  learning_rate: float = 1.0  # Multiplies the paper's schedule; 1.0 is the paper's.
  warmup_steps: int = 4000
  # Not in the paper: with cooldown_steps > 0 the rate falls linearly to 0 over cooldown_steps
  # from step cooldown_start (optimization.py).
  cooldown_start: int = 0
  cooldown_steps: int = 0
  adam_beta1: float = 0.9
  adam_beta2: float = 0.98
  adam_epsilon: float = 1e-9
  # Not in the paper: decoupled weight decay (AdamW), times the learning rate, on every weight
  # but LayerNorm gains and biases. 0 = the paper's Adam.
  weight_decay: float = 0.0
  batch_size: int = 25000  # Global tokens (source or target, padded) per optimizer step.
  # Decoding (section 6.1); None = the problem's default.
  beam_size: Optional[int] = None
  alpha: Optional[float] = None
  extra_length: Optional[int] = None  # max output = source length + extra_length.
  # Not in the paper: a span parser's CKY adds it to every span's log-odds (> 0: more brackets).
  bracket_offset: Optional[float] = None

  def __post_init__(self):
    """Every field with a meaningful range is checked here: when a set is built, overridden
    (`replace`, `override`) or loaded (`from_json`), so a bad value never reaches training."""
    for name in _RANGES:
      _check_range(name, getattr(self, name))
    if self.d_model % self.num_heads:
      raise HParamsError(
          f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}")

  @property
  def decoder_depth(self):
    """The decoder stack's number of layers."""
    return self.decoder_layers or self.num_layers

  @property
  def key_depth(self):
    """d_k: per-head query/key size."""
    return self.d_k or self.d_model // self.num_heads

  @property
  def value_depth(self):
    """d_v: per-head value size."""
    return self.d_v or self.d_model // self.num_heads

  def replace(self, **changes):
    return dataclasses.replace(self, **changes)

  def override(self, overrides):
    """Returns a copy with `"name=value,name=value"` applied (types checked)."""
    return self.replace(**parse_overrides(overrides))

  def to_json(self):
    return json.dumps(dataclasses.asdict(self), indent=2, sort_keys=True)

  @classmethod
  def from_json(cls, text, source="hparams JSON"):
    try:
      values = json.loads(text)
    except json.JSONDecodeError as e:
      raise HParamsError(f"{source} is not JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(values, dict):
      raise HParamsError(f"{source} holds a {type(values).__name__}, not an object of hparams")
    for old, new in _RENAMED.items():  # hparams.json of runs from before a rename
      if old in values and new not in values:
        values[new] = values.pop(old)
    _check_names(values)
    for name, value in values.items():
      _check_type(name, value, source)
    floats = {name for name, t in typing.get_type_hints(cls).items() if float in (
        t, *typing.get_args(t))}
    return cls(**{name: float(value) if name in floats and value is not None else value
                  for name, value in values.items()})

  def save(self, path):
    """Writes hparams.json; `path` may be any tf.io.gfile path (local, gs://, ram://)."""
    from t2t_lite import files  # Imports TF: here so that `import t2t_lite` stays light.
    files.write_text(path, self.to_json())

  @classmethod
  def load(cls, path):
    import tensorflow as tf
    with tf.io.gfile.GFile(path) as f:
      text = f.read()
    try:
      return cls.from_json(text, path)
    except HParamsError as e:
      raise HParamsError(f"{path}: {e}" if path not in str(e) else str(e)) from None


# name -> (check, what the check wants). None (beam_size, alpha, extra_length: "the
# problem's default") is always accepted; NaN fails every check, infinity the isfinite ones.
_RANGES = {name: (check, wanted) for name, check, wanted in (
    *((name, lambda x: x >= 1, ">= 1") for name in (
        "num_layers", "d_model", "d_ff", "num_heads", "max_length", "batch_size",
        "beam_size", "extra_length")),
    *((name, lambda x: x >= 0, ">= 0") for name in (
        "d_k", "d_v", "decoder_layers", "warmup_steps", "cooldown_start", "cooldown_steps")),
    *((name, lambda x: math.isfinite(x) and 0 <= x < 1, "in [0, 1)") for name in (
        "dropout", "attention_dropout", "relu_dropout", "label_smoothing", "adam_beta1",
        "adam_beta2", "weight_decay", "word_dropout", "token_dropout")),
    *((name, lambda x: math.isfinite(x) and x > 0, "a finite number > 0") for name in (
        "learning_rate", "adam_epsilon")),
    *((name, lambda x: math.isfinite(x) and x >= 0, "a finite number >= 0") for name in (
        "alpha", "rdrop")),
    ("norm_type", lambda x: x in ("post", "pre"), "'post' or 'pre'"),
    ("architecture", lambda x: x in ("transformer", "span_parser"),
     "'transformer' or 'span_parser'"),
    ("position_encoding", lambda x: x in ("sinusoid", "learned"), "'sinusoid' or 'learned'"),
)}

_FIELDS = {f.name: f for f in dataclasses.fields(HParams)}
_RENAMED = {"extra_decode_length": "extra_length"}  # old name in hparams.json -> field


def _check_names(names):
  for name in names:
    if name not in _FIELDS:
      raise HParamsError(f"unknown hparam {name!r}{did_you_mean(name, _FIELDS)}")


def _check_range(name, value):
  if name in _RANGES and value is not None and not _RANGES[name][0](value):
    raise HParamsError(f"{name} must be {_RANGES[name][1]}, got {value!r}")


def check_value(name, value, source):
  """One field's value alone, as a set built with it would check it: its name, its type and its
  range (not the checks between fields, such as d_model divisible by num_heads)."""
  _check_names([name])
  _check_type(name, value, source)
  _check_range(name, value)


# How a bad value's message names the type it should have been.
_KINDS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def _check_type(name, value, source):
  """A JSON value of the type HParams declares (an int is a valid float; None only where the
  field is Optional)."""
  field_type = typing.get_type_hints(HParams)[name]
  if typing.get_origin(field_type) is typing.Union:
    if value is None:
      return
    field_type = typing.get_args(field_type)[0]
  ok = isinstance(value, field_type) and not (field_type is int and isinstance(value, bool))
  if field_type is float:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
  if not ok:
    raise HParamsError(f"bad value for hparam {name!r} in {source}: {value!r} is not "
                       f"{_KINDS[field_type]}")


def _parse_value(name, text):
  field_type = typing.get_type_hints(HParams)[name]
  optional = typing.get_origin(field_type) is typing.Union
  if optional:
    if text.strip().lower() == "none":
      return None
    field_type = typing.get_args(field_type)[0]
  text = text.strip()
  try:
    if field_type is bool:
      if text.lower() not in ("true", "false"):
        raise ValueError(text)
      return text.lower() == "true"
    if field_type is int:
      return int(text)
    if field_type is float:
      return float(text)
    return text
  except ValueError:
    raise HParamsError(
        f"bad value for hparam {name!r}: {text!r} is not {_KINDS[field_type]}") from None


def parse_overrides(overrides):
  """`"a=1,b=0.3"` -> {"a": 1, "b": 0.3}, with the types HParams declares."""
  values = {}
  for item in (overrides or "").split(","):
    if not item.strip():
      continue
    if "=" not in item:
      raise HParamsError(f"bad override {item.strip()!r}: expected name=value")
    name, text = item.split("=", 1)
    name = name.strip()
    _check_names([name])
    values[name] = _parse_value(name, text)
  return values
