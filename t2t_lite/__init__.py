"""t2t-lite: the Transformer of "Attention Is All You Need" in TensorFlow 2 / Keras 3.

Public API:
  get_hparams(name, overrides="") -> HParams
  get_problem(name, **settings) -> Problem
  build_model(hparams, vocab_size) -> a built keras.Model
  translate(model_dir, sentences, beam_size=None, alpha=None, engine="tensorflow")
    -> (texts, scores)
Training: `t2t_lite.train.trainer.train(problem, hparams, data_dir, TrainConfig(...))`, what
t2t-lite-train runs.

`import t2t_lite` stays light (no TensorFlow): the tools quiet TensorFlow before importing it.
"""
from t2t_lite.hyperparams import HParams, HParamsError
from t2t_lite.registry import (HPARAMS, PROBLEMS, RegistryError, get_hparams, get_problem,
                               problem_settings, register_hparams, register_problem,
                               register_ranged_hparams)


def list_hparams():
  return HPARAMS.names()


def list_problems():
  return PROBLEMS.names()


def build_model(hparams, vocab_size, source_slots=None, spans=None):
  """Returns the model of hparams.architecture with its weights created: a `Transformer`
  (source_slots: with hparams source_pointer, the token ids that place a source word,
  `Problem.source_slots`) or a `SpanParser` (spans: its problem's `span_vocabulary`)."""
  from t2t_lite.modeling.architectures import build_model as _build
  return _build(hparams, vocab_size, source_slots=source_slots, spans=spans)


def translate(model_dir, sentences, beam_size=None, alpha=None, engine="tensorflow", **kwargs):
  """Translates `sentences` with the model of `model_dir` (its best model when the run kept one,
  else its newest checkpoint; `checkpoint_path=` chooses): (texts, scores). engine:
  "tensorflow" (decode/translation.py), "litert" (t2t_lite.litert.translate: model_dir a LiteRT
  export, or a run whose export is made on first use and kept beside it) or "auto" (the
  decoding plan's choice, plan.engine)."""
  from t2t_lite.decode import plan
  if plan.engine(engine)[0] == "litert":
    from t2t_lite import litert
    return litert.translate(model_dir, sentences, beam_size=beam_size, alpha=alpha, **kwargs)
  from t2t_lite.decode.translation import translate as _translate
  return _translate(model_dir, sentences, beam_size=beam_size, alpha=alpha, **kwargs)


__all__ = [
    "HParams", "HParamsError", "RegistryError", "build_model", "get_hparams", "get_problem",
    "problem_settings", "list_hparams", "list_problems", "register_hparams", "register_problem",
    "register_ranged_hparams", "translate",
]
