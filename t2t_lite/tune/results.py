"""What a study reports: a line as each trial finishes, and at the end a table of its trials,
the best trial's overrides as one string with the t2t-lite-train command that trains it again,
and two pictures in the study directory: optimization_history.png (each trial's value and the
best so far) and param_importances.png (how much each ranged field mattered)."""
import io
import os
import warnings

from optuna.trial import TrialState

from t2t_lite import files, search_space
from t2t_lite.tune import trials

HISTORY_PNG, IMPORTANCES_PNG = "optimization_history.png", "param_importances.png"


def _minutes(trial):
  if trial.datetime_start is None or trial.datetime_complete is None:
    return None
  return (trial.datetime_complete - trial.datetime_start).total_seconds() / 60


def _params(trial):
  return " ".join(f"{name}={value:.4g}" if isinstance(value, float) else f"{name}={value}"
                  for name, value in sorted(trial.params.items()))


def trial_line(metric, trial):
  """One trial: number, state, value, minutes, values and (not complete) why."""
  value = f"{metric} {trial.value:.4f}" if trial.value is not None else ""
  minutes = _minutes(trial)
  why = trial.user_attrs.get("reason", "")
  if trial.state == TrialState.FAIL and not why:
    why = "its worker stopped (run again)"
  return "  ".join(part for part in (
      f"trial {trial.number}", trial.state.name, value,
      f"{minutes:.1f} min" if minutes is not None else "", _params(trial),
      f"({why})" if why and trial.state != TrialState.COMPLETE else "") if part)


def table(study):
  """The study's trials, one line each (surplus ones left out), as lines."""
  metric = study.user_attrs["metric"]
  rows = [(str(t.number), t.state.name, f"{t.value:.4f}" if t.value is not None else "-",
           f"{_minutes(t):.1f}" if _minutes(t) is not None else "-", _params(t))
          for t in study.get_trials(deepcopy=False) if not t.user_attrs.get("surplus")]
  header = ("trial", "state", metric, "minutes", "values")
  widths = [max(len(row[i]) for row in [header, *rows]) for i in range(4)]
  return ["  ".join(cell.ljust(width) for cell, width in zip(row, widths)) + "  " + row[4]
          for row in [header, *rows]]


def best(study):
  """Lines naming the best trial, its overrides as one string, and the t2t-lite-train command
  that trains it again (into a new run directory); None before a trial completes."""
  if not any(t.state == TrialState.COMPLETE for t in study.get_trials(deepcopy=False)):
    return None
  trial = study.best_trial
  # The same flags into a new run directory: the trial's own would resume, not train again.
  args = [f"{arg}_again" if arg.startswith("--model_dir=") else arg
          for arg in trial.user_attrs["args"]]
  options = " ".join(f"--{name}={value}" for name, value in
                     search_space.training_options(trial.params).items())
  return [f"best: trial {trial.number}, {study.user_attrs['metric']} {trial.value:.4f}",
          f"best overrides: {search_space.hparams_overrides(trial.params)}",
          *([f"best training options: {options}"] if options else []),
          f"train it again: {trials.command(args)}"]


def write_pictures(study, study_dir):
  """optimization_history.png and (with 2 or more complete trials whose values differ)
  param_importances.png in `study_dir`: the lines saying what was written or skipped."""
  import matplotlib.pyplot as plt  # The tool chose the backend (Agg).
  from optuna.visualization import matplotlib as plots
  complete = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
  varied = any(len({repr(t.params.get(name)) for t in complete}) > 1
               for t in complete for name in t.params)
  written = []
  with warnings.catch_warnings():
    # Optuna's matplotlib plots are marked experimental, and the importances of a few trials
    # warn that they are equal (the picture shows it).
    warnings.simplefilter("ignore")
    for name, plot, ready in ((HISTORY_PNG, plots.plot_optimization_history, bool(complete)),
                              (IMPORTANCES_PNG, plots.plot_param_importances,
                               len(complete) >= 2 and varied)):
      path = os.path.join(study_dir, name)
      if not ready:
        needs = "2 complete trials of different values" if complete else "a complete trial"
        written.append(f"{name} not drawn: it needs {needs}")
        continue
      axes = plot(study)
      png = io.BytesIO()
      axes.figure.savefig(png, format="png", bbox_inches="tight")
      plt.close(axes.figure)
      files.write_bytes(path, png.getvalue())  # Whole: several workers may end together.
      written.append(f"wrote {path}")
  return written


def summary(study, study_dir):
  """The end of a study: its table, its best trial and the pictures, as lines."""
  return [*table(study), *(best(study) or ["no trial completed yet"]),
          *write_pictures(study, study_dir)]

