"""What a run keeps and where it starts: the best checkpoint, early stopping, fine-tuning (also
onto a new vocabulary) and the moving average of the weights."""
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import numpy as np
import pytest
import tensorflow as tf

import t2t_lite
from t2t_lite.bin import train as train_cli
from t2t_lite.decode import loading
from t2t_lite.modeling.architectures import build_model
from t2t_lite.rundir import checkpoints, run_files
from t2t_lite.train import averaging, optimization, trainer

TINY = "num_layers=1,d_model=32,d_ff=64,num_heads=2,batch_size=256,max_length=24,dropout=0.1"
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="-1")


def _train(model_dir, data_dir, problem="algorithmic_reverse", metrics=None, log=None,
           hparams=TINY, **config):
  """Trains in this process; `metrics`: the dev metric each evaluation reports, in turn."""
  problem = t2t_lite.get_problem(problem) if isinstance(problem, str) else problem
  values = dict(model_dir=str(model_dir), train_steps=4, eval_steps=0, xla=False, log_every=1,
                seed=3, eval_decode_examples=0, checkpoint_every_minutes=1e-9)
  values.update(config)
  script = iter(metrics or [])
  t = trainer.Trainer(
      problem, t2t_lite.get_hparams("transformer_tiny", hparams), str(data_dir),
      trainer.TrainConfig(**values), problem.tokenizer(str(data_dir)).vocab_size,
      metric_fn=(lambda model: {"dev_accuracy": next(script)}) if metrics else None,
      log=log or (lambda line: None))
  return t, t.train()


def _weights(prefix):
  """{variable path from the model: value} of a checkpoint's model."""
  reader = tf.train.load_checkpoint(prefix)
  return {path: reader.get_tensor(key)
          for path, (key, _) in averaging.model_variables(prefix).items()}


@pytest.fixture(scope="module")
def stopped_early(reverse_dir, tmp_path_factory):
  """A run that evaluates at every step, its dev metric scripted, and stops early (patience 2)
  -> (its model_dir, train's summary, its log lines). best_metric: auto, which is the dev
  metric in a run whose evaluations decode (the cooldown test below names dev_metric)."""
  model_dir, lines = tmp_path_factory.mktemp("stopped_early") / "run", []
  _, result = _train(model_dir, reverse_dir, metrics=[10.0, 30.0, 20.0, 25.0, 40.0],
                     train_steps=10, eval_steps=1, eval_every=1, eval_decode_examples=4,
                     patience=2, log=lines.append)
  return model_dir, result, lines


def test_the_best_checkpoint_is_the_best_evaluation_not_the_last(stopped_early):
  run_dir, result, _ = stopped_early
  best = json.loads((run_dir / "best" / "best.json").read_text())
  assert result["best"] == {"metric": "dev_accuracy", "value": 30.0, "step": 2}
  assert {key: best[key] for key in result["best"]} == result["best"]
  assert result["step"] == 4  # the last evaluation, 25.0, is not the best
  kept = checkpoints.list_checkpoints(str(run_dir / "best"))
  assert [os.path.basename(p) for p in kept] == ["ckpt-2"]
  ours, trainers = _weights(kept[0]), _weights(str(run_dir / "ckpt-2"))
  assert ours.keys() == trainers.keys() and len(ours) > 10
  for name in ours:  # the weights of step 2, as the trainer saved them then
    np.testing.assert_array_equal(ours[name], trainers[name], err_msg=name)
  texts, _ = t2t_lite.translate(str(run_dir / "best"), ["3 9 4"])  # a run directory
  assert len(texts) == 1


def test_early_stopping_stops_at_the_right_evaluation_and_a_resume_does_not_train_on(
    stopped_early, reverse_dir, tmp_path):
  run_dir, result, lines = stopped_early
  assert result["stopped"] == "early" and result["step"] == 4
  assert "stopping at step 4: dev_accuracy did not improve in 2 evaluations (patience 2); the " \
         "best, 30.0000, was at step 2" in lines
  best = json.loads((run_dir / "best" / "best.json").read_text())
  assert best["step"] == 2 and best["stopped_early"]["step"] == 4
  assert tf.train.latest_checkpoint(str(run_dir)).endswith("ckpt-4")
  shutil.copytree(run_dir, tmp_path / "run")  # resumed: a copy, the run is shared
  lines = []
  _, resumed = _train(tmp_path / "run", reverse_dir, metrics=[99.0], train_steps=10,
                      eval_steps=1, eval_every=1, eval_decode_examples=4, patience=2,
                      log=lines.append)
  assert resumed["stopped"] == "early" and resumed["step"] == 4 and resumed["losses"] == []
  assert any(line.startswith(f"{tmp_path}/run stopped early at step 4: ") for line in lines)


def test_a_run_whose_metric_stalls_cools_down_from_there_and_a_resume_does_not_train_on(
    reverse_dir, tmp_path, fake_clock):
  """cooldown_patience: the learning rate falls to 0 from the evaluation where the metric
  stalled, not at the end of the budget, and the run stops when it is at 0."""
  config = dict(train_steps=1000, train_minutes=10, cooldown_minutes=0.25, cooldown_patience=1,
                eval_steps=1, eval_every=1, eval_decode_examples=4, best_metric="dev_metric",
                checkpoint_every_minutes=60)  # the checkpoint at the stop is the one resumed
  lines = []
  _, result = _train(tmp_path / "run", reverse_dir, metrics=[10.0, 30.0, 20.0] + [25.0] * 99,
                     log=lines.append, **config)
  step = result["step"]
  assert result["stopped"] == "early" and 5 < step < 30  # the fake clock's 10 minutes would be about 300 steps
  assert "dev_accuracy did not improve in 1 evaluation(s) (cooldown_patience 1): the learning " \
         "rate falls to 0 over the cooldown from here, then the run stops" in lines
  assert lines[-1] == (f"stopping at step {step}: the cooldown from step 3, where the dev "
                       "metric stalled, is done")
  hparams = t2t_lite.get_hparams("transformer_tiny", TINY)
  rates = [float(lr) for lr in re.findall(r"  lr ([0-9.e+-]+)  ", "\n".join(lines))]
  factors = [rate / float(optimization.learning_rate(
      s, hparams.d_model, hparams.warmup_steps, hparams.learning_rate))
      for s, rate in enumerate(rates, 1)]
  assert len(factors) == step and factors[:3] == pytest.approx([1, 1, 1], rel=1e-3)
  assert all(later < earlier for earlier, later in zip(factors[2:], factors[3:]))
  assert factors[-1] < 0.3
  best = json.loads((tmp_path / "run" / "best" / "best.json").read_text())
  assert best["step"] == 2 and best["cooldown_from_step"] == 3
  assert best["stopped_early"] == {"step": step, "reason": (
      "dev_accuracy stalled at step 3 (cooldown_patience 1) and the cooldown from there is "
      "done; the best, 30.0000, was at step 2")}
  lines.clear()
  _, resumed = _train(tmp_path / "run", reverse_dir, metrics=[99.0], log=lines.append, **config)
  assert resumed["stopped"] == "early" and resumed["step"] == step and resumed["losses"] == []
  for bad in (dict(config, cooldown_patience=0), dict(config, cooldown_minutes=None)):
    with pytest.raises(trainer.TrainerError, match="cooldown_patience must be >= 1 and needs"):
      trainer.TrainConfig(model_dir="m", **bad)


def test_the_best_checkpoint_survives_sigkill_and_resume(reverse_dir, tmp_path):
  model_dir = tmp_path / "run"
  command = [sys.executable, "-m", "t2t_lite.bin.train", "--problem=algorithmic_reverse",
             "--hparams=transformer_tiny", f"--hparams_overrides={TINY}",
             f"--data_dir={reverse_dir}", f"--model_dir={model_dir}", "--train_steps=5",
             "--eval_every=1", "--eval_steps=1", "--eval_decode_examples=0", "--noxla",
             "--log_every=1", "--seed=5", "--checkpoint_every_minutes=0.000001",
             "--best_metric=loss"]
  killed = subprocess.Popen(command, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
  lines = []
  for line in killed.stdout:
    lines.append(line)
    if line.startswith("eval at step 2:"):
      break
  killed.send_signal(signal.SIGKILL)
  killed.wait()
  assert loading.load(str(model_dir / "best")).checkpoint  # what it kept still loads
  resumed = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=300)
  assert resumed.returncode == 0, resumed.stderr
  losses = {int(s): float(v) for s, v in re.findall(
      r"^eval at step (\d+): loss ([0-9.]+)", "".join(lines) + resumed.stdout, re.M)}
  assert sorted(losses)[-1] == 5
  best = json.loads((model_dir / "best" / "best.json").read_text())
  step = min(losses, key=losses.get)
  assert best["metric"] == "loss" and best["value"] == pytest.approx(losses[step], abs=1e-4)
  assert best["step"] == step and os.path.exists(model_dir / "best" / f"ckpt-{step}.index")


class _Stopped(Exception):
  """What _snapshot_at(..., stop=True) raises to end the run."""


def _snapshot_at(prefix, box, t_ref, stop=False):
  """A log function that keeps the model's weights when a line starts with `prefix`; with
  `stop`, it then ends the run there (raising _Stopped), for a test of the weights a run starts
  from, which needs no step (a first step costs seconds of tracing)."""
  def log(line):
    if line.startswith(prefix):
      box.append([v.numpy() for v in t_ref[0].model.trainable_variables])
      if stop:
        raise _Stopped(line)
  return log


@pytest.fixture(scope="module")
def source_run(reverse_dir, tmp_path_factory):
  root = tmp_path_factory.mktemp("source")
  _train(root / "run", reverse_dir, train_steps=1)
  return root / "run"


def test_fine_tuning_starts_from_the_other_runs_weights(source_run, reverse_dir, tmp_path):
  # A new run's step 0: the weights when the trainer says it initialised them.
  box, holder = [], []
  log = _snapshot_at("initialised from", box, holder)
  problem = t2t_lite.get_problem("algorithmic_reverse")
  config = trainer.TrainConfig(model_dir=str(tmp_path / "tuned"), train_steps=3, eval_steps=0,
                               xla=False, seed=9, eval_decode_examples=0,
                               init_from=str(source_run))
  holder.append(trainer.Trainer(problem, t2t_lite.get_hparams("transformer_tiny", TINY),
                                str(reverse_dir), config, 13, log=log))
  result = holder[0].train()
  assert result["step"] == 3 and len(box) == 1
  source = loading.load(str(source_run), precision="none").model  # its float32 weights
  for ours, theirs in zip(box[0], source.trainable_variables):
    np.testing.assert_array_equal(ours, theirs.numpy())
  run = json.loads((tmp_path / "tuned" / "run.json").read_text())
  assert run["init_from"] == f"{source_run}/ckpt-1"
  # Resumed, it goes on from its own checkpoint, not from the source again.
  _, resumed = _train(tmp_path / "tuned", reverse_dir, train_steps=4, seed=9,
                      init_from=str(source_run))
  assert [step for step, _ in resumed["losses"]] == [4]


def _multi30k_data(root, words):
  """A multi30k_ende data_dir of tiny raw files made of `words`."""
  import gzip
  import random
  raw = root / "raw"
  raw.mkdir(parents=True)
  rng = random.Random(len(words))
  for stem in ("train", "val", "test_2016_flickr"):
    lines = "".join(" ".join(rng.choice(words) for _ in range(5)) + "\n" for _ in range(60))
    for lang in ("en", "de"):
      (raw / f"{stem}.{lang}.gz").write_bytes(gzip.compress(lines.encode()))
  t2t_lite.get_problem("multi30k_ende").prepare(str(root / "data"), str(raw))
  return root / "data"


def test_fine_tuning_onto_a_new_vocabulary_keeps_the_shared_tokens_rows(tmp_path):
  old_data = _multi30k_data(tmp_path / "a", "a man rides horse the dog runs".split())
  new_data = _multi30k_data(tmp_path / "b", "a man walks the cat sleeps".split())
  problem = t2t_lite.get_problem("multi30k_ende")
  old, new = (problem.tokenizer(str(d)).pieces() for d in (old_data, new_data))
  shared = [p for p in new if p in old]
  assert old != new and 40 < len(shared) < len(new)
  hparams = t2t_lite.get_hparams("transformer_tiny", TINY)
  # The source: a run directory of the old vocabulary with random weights, read back as decode
  # reads a run (a trained source: the test above).
  run_files.write_run_files(str(tmp_path / "source"), hparams, {"problem": "multi30k_ende"},
                            str(old_data))
  source = build_model(hparams, len(old), seed=1)
  tf.train.Checkpoint(model=source).save(str(tmp_path / "source" / "ckpt"))
  box, holder = [], []
  config = trainer.TrainConfig(model_dir=str(tmp_path / "tuned"), train_steps=1, eval_steps=0,
                               xla=False, seed=9, eval_decode_examples=0,
                               init_from=str(tmp_path / "source"))
  holder.append(trainer.Trainer(problem, hparams, str(new_data), config, len(new),
                                log=_snapshot_at("initialised from", box, holder, stop=True)))
  with pytest.raises(_Stopped, match="tokens shared with its"):
    holder[0].train()
  model = holder[0].model
  table = box[0][[v is model.embedding.embeddings for v in model.trainable_variables].index(True)]
  old_table = source.embedding.embeddings.numpy()
  # The rows a new model of this run draws (its seed, 9) for the tokens the source lacks.
  fresh = build_model(hparams, len(new), seed=9).embedding.embeddings.numpy()
  for i, piece in enumerate(new):
    expected = old_table[old.index(piece)] if piece in old else fresh[i]
    np.testing.assert_array_equal(table[i], expected, err_msg=piece)


def test_the_moving_average_is_its_definition(reverse_dir, tmp_path):
  decay, box, holder = 0.8, [], []

  def log(line):  # the weights before training, then after each step
    if line.startswith(("training ", "step ")):
      box.append([v.numpy().astype(np.float64) for v in holder[0].model.trainable_variables])

  problem = t2t_lite.get_problem("algorithmic_reverse")
  config = trainer.TrainConfig(model_dir=str(tmp_path / "run"), train_steps=3, eval_steps=0,
                               xla=False, seed=3, log_every=1, eval_decode_examples=0,
                               ema_decay=decay)
  holder.append(trainer.Trainer(problem, t2t_lite.get_hparams("transformer_tiny", TINY),
                                str(reverse_dir), config, 13, log=log))
  holder[0].train()
  assert len(box) == 4
  averages = box[0]
  for t, weights in enumerate(box[1:], 1):
    d = min(decay, (1 + t) / (10 + t))
    averages = [d * a + (1 - d) * w for a, w in zip(averages, weights)]
  for expected, got in zip(averages, holder[0].ema.averages):
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-7)
  # Decode and export take the averages: what loading the run directory restores.
  loaded = loading.load(str(tmp_path / "run"), precision="none")  # float32, as averaged
  for expected, got in zip(averages, loaded.model.trainable_variables):
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-7)


# ------------------------------------------------------------------------------ bad input
@pytest.mark.parametrize("case, message", [
    ("missing", "--init_from {source}/nothing: neither a run directory nor a checkpoint (no "
                "{source}/nothing.index)"),
    ("damaged", "--init_from {source}/damaged: no checkpoint of {source}/damaged reads (tried "
                "{source}/damaged/ckpt-1)"),
    ("architecture", "--init_from {source}/run: its model has d_model=32, this run's 16; "
                     "fine-tuning needs the same architecture"),
    ("patience", "patience must be >= 1, got 0"),
])
def test_bad_fine_tuning_and_patience_are_one_line_and_write_nothing(
    source_run, reverse_dir, tmp_path, capsys, case, message):
  import shutil
  root = source_run.parent
  if case == "damaged" and not (root / "damaged").exists():
    shutil.copytree(source_run, root / "damaged")
    data = root / "damaged" / "ckpt-1.data-00000-of-00001"
    os.truncate(data, data.stat().st_size // 2)
  flags = {"missing": ["--init_from", root / "nothing"],
           "damaged": ["--init_from", root / "damaged"],
           "architecture": ["--init_from", source_run, "--hparams_overrides",
                            TINY.replace("d_model=32", "d_model=16")],
           "patience": ["--patience=0"]}[case]
  code = train_cli.main(["--problem=algorithmic_reverse", "--hparams=transformer_tiny",
                         f"--hparams_overrides={TINY}", f"--data_dir={reverse_dir}",
                         f"--model_dir={tmp_path}/model", "--noxla", "--eval_steps=0",
                         "--eval_decode_examples=0", *map(str, flags)])
  err = capsys.readouterr().err
  assert code == 2
  assert err.splitlines()[-1].startswith("t2t-lite-train: error: " + message.format(source=root))
  assert not (tmp_path / "model").exists()
