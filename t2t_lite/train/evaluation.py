"""Evaluating a training run: the dev loss (unsmoothed cross entropy per target token),
perplexity and token accuracy on eval_steps batches, the problem's own metric on decoded dev
sentences (BLEU, bracket F1, accuracy), and the best model kept by the run's selection metric
(model_selection.py). What is evaluated is the moving average of the weights when the run keeps
one (TrainState.averaged).
"""
import math

from t2t_lite.data.problem_base import ProblemError
from t2t_lite.decode import plan as decoding_plan
from t2t_lite.decode import translation
from t2t_lite.modeling import mixed_precision
from t2t_lite.train import model_selection, steps
from t2t_lite.train.train_config import TrainerError


def problem_metric_fn(problem, data_dir, hparams, num_examples=100, batch_size=32):
  """-> metric_fn(model): the problem's own metric (BLEU, bracket F1, accuracy) on the first
  `num_examples` dev pairs, decoded through the one decoding pipeline with the run's settings
  (translation.DecodeSettings.resolve); None when num_examples is 0 or data_dir keeps no dev
  text. For `Trainer(metric_fn=...)`."""
  if not num_examples:
    return None
  try:
    pairs = problem.text_pairs("dev", data_dir)[:num_examples]
  except ProblemError:
    return None
  sources, references = [s for s, _ in pairs], [t for _, t in pairs]
  settings = translation.DecodeSettings.resolve(problem, hparams)
  translators = {}

  def metric_fn(model):
    if id(model) not in translators:  # One traced decoder per model, reused every eval.
      # The decoding plan of the model's own precision, without this machine's choices
      # (compiled matmuls are a loaded model's): how many searches a batch is split into.
      plan = decoding_plan.decide(mixed_precision.of_model(model), False, hparams.d_model)
      translators[id(model)] = translation.Translator.of_problem(
          model, problem, data_dir, settings, searches=plan.searches)
    hypotheses, _ = translators[id(model)].translate(sources, batch_size)
    scores = problem.score(sources, hypotheses, references)
    return {f"dev_{name}": value for name, value in scores.items()
            if isinstance(value, (int, float, str))}  # str: a BLEU's signature

  return metric_fn


class Evaluator:
  """The evaluations of one run.

  Args:
    problem, hparams, data_dir, config: the run's.
    platform: its distribute.Platform.
    batch_tokens: tokens per replica batch.
    metric_fn: optional metric_fn(model) -> {name: value}, run at each evaluation (e.g.
      problem_metric_fn's).
    log: where lines go.
  `selection` is the run's ModelSelection (None when it keeps no best model).
  """

  def __init__(self, problem, hparams, data_dir, config, platform, batch_tokens, metric_fn=None,
               log=print):
    self.problem, self.hparams, self.data_dir, self.config = problem, hparams, data_dir, config
    self.platform, self.batch_tokens, self.metric_fn = platform, batch_tokens, metric_fn
    metric = model_selection.metric_name(config, problem, decodes=metric_fn is not None)
    if metric and metric.startswith("dev_") and metric_fn is None:
      raise TrainerError(f"best_metric={config.best_metric} needs decoded dev sentences, and "
                         f"{data_dir} keeps no dev text")
    self.selection = metric and model_selection.ModelSelection(
        metric, config.model_dir, platform.is_chief, log)
    self._step_fn = None

  def _dataset_fn(self, input_context):
    ds = self.problem.dataset(
        "dev", self.data_dir, self.hparams, training=False, batch_tokens=self.batch_tokens,
        input_context=input_context,
        # Evaluation is not XLA-compiled where the platform leaves it to us: keep partial
        # batches.
        static_shapes=self.platform.static_shapes(xla=False))
    return ds.take(self.config.eval_steps)

  def evaluate(self, state):
    """Loss, perplexity and token accuracy on at most eval_steps batches (per replica) of the
    dev split, plus metric_fn's metrics, of `state`'s weights as TrainState.averaged gives
    them -> {name: value}."""
    strategy = self.platform.strategy
    with state.averaged():
      dataset = strategy.distribute_datasets_from_function(self._dataset_fn)
      if self._step_fn is None:
        self._step_fn = steps.make_eval_step(state.model, strategy, dataset.element_spec)
      ce_sum = correct = count = 0.0
      for batch in dataset:
        c, k, n = self._step_fn(batch)
        ce_sum, correct, count = ce_sum + float(c), correct + float(k), count + float(n)
      if not count:
        raise TrainerError(f"the dev split of {self.data_dir} gave no batch to evaluate")
      loss = ce_sum / count
      metrics = {"loss": loss, "perplexity": math.exp(min(loss, 700.0)),
                 "accuracy": correct / count, "tokens": count}
      if self.metric_fn is not None:
        metrics.update(self.metric_fn(state.model))
    return metrics

  def evaluate_at(self, step, state, training_log):
    """Evaluates, logs and keeps the weights evaluated in best/ when the selection metric
    improved (best/best.json says so)."""
    metrics = self.evaluate(state)
    training_log.evaluated(step, metrics)
    if self.selection:
      self.selection.evaluated(step, metrics, state.save_weights)
    return metrics


def check_dev_split(problem, data_dir, hparams):
  """Evaluation needs dev records that read and examples within max_length: refused before
  anything is trained."""
  problem.dataset("dev", data_dir, hparams, training=False)  # Checks its files.
  examples = problem.manifest(data_dir)["splits"]["dev"]["examples"]
  if examples - problem.count_overlong("dev", data_dir, hparams.max_length) <= 0:
    raise TrainerError(
        f"the dev split of {data_dir} has no example of at most max_length={hparams.max_length} "
        f"tokens ({examples} examples) to evaluate on: prepare a data_dir with dev data, or "
        "train without evaluation (--eval_steps=0)")
