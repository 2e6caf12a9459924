"""Hyperparameter search over ordinary training runs (t2t-lite-tune): an Optuna study whose
trials are t2t-lite-train processes, one run directory each."""
