"""t2t-lite: the Transformer of "Attention Is All You Need" in TensorFlow 2 / Keras 3.

Public API:
  get_hparams(name, overrides="") -> HParams
  get_problem(name, **settings) -> Problem
  build_model(hparams, vocab_size) -> a built keras.Model
  translate(model_dir, sentences, beam_size=None, alpha=None) -> (texts, scores)
"""
from t2t_lite.hparams import HParams, HParamsError
from t2t_lite.registry import HPARAMS, PROBLEMS, RegistryError, register_hparams, register_problem


def _load_registries():
  # The named sets and problems live in the repository's `hparams/` and `problems/` folders,
  # installed as t2t_lite.hparams_sets and t2t_lite.problems (setup.py's package_dir);
  # importing them runs their register_* decorators.
  import t2t_lite.hparams_sets  # noqa: F401
  import t2t_lite.problems  # noqa: F401


def get_hparams(name, overrides=""):
  """Returns the registered hparams set `name` with `overrides` ("a=1,b=2") applied."""
  _load_registries()
  return HPARAMS.get(name)().override(overrides)


def get_problem(name, **settings):
  """Returns an instance of the registered problem `name`, with `settings` (its class
  settings, e.g. vocab_size) changed."""
  _load_registries()
  return PROBLEMS.get(name)(**settings)


def problem_settings(name, text):
  """"name=value,..." -> the settings dict of problem `name` (see Problem.parse_settings)."""
  _load_registries()
  return PROBLEMS.get(name).parse_settings(text)


def list_hparams():
  _load_registries()
  return HPARAMS.names()


def list_problems():
  _load_registries()
  return PROBLEMS.names()


def build_model(hparams, vocab_size):
  """Returns a `Transformer` with its weights created."""
  from t2t_lite.transformer import build_model as _build
  return _build(hparams, vocab_size)


def translate(model_dir, sentences, beam_size=None, alpha=None, **kwargs):
  """Translates `sentences` with the latest checkpoint of `model_dir`: (texts, scores)."""
  from t2t_lite.decoding import translate as _translate
  return _translate(model_dir, sentences, beam_size=beam_size, alpha=alpha, **kwargs)


__all__ = [
    "HParams", "HParamsError", "RegistryError", "build_model", "get_hparams", "get_problem", "problem_settings",
    "list_hparams", "list_problems", "register_hparams", "register_problem", "translate",
]
