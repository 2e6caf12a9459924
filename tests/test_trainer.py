"""The trainer: strategies give the same steps, runs resume exactly, failures are clear.

Runs that need their own TensorFlow process (logical devices, multi-worker) are subprocesses;
the rest share this process (a SIGKILLed run's resume: tests/test_run_dir.py). Models are transformer_tiny shrunk further.
"""
import json
import os
import re
import socket
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
import tensorflow as tf

import t2t_lite
from t2t_lite.bin import train as train_cli
from t2t_lite.data import tokenizers
from t2t_lite.data.problem_base import Problem
from t2t_lite.decode import export
from t2t_lite.train import optimization, trainer

TINY = "num_layers=1,d_model=32,d_ff=64,num_heads=2,batch_size=256,max_length=24"
TINY_DROPOUT = TINY + ",dropout=0.2"  # dropout masks must follow the same schedule too
ENV = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="-1")


def _config(model_dir, steps, **kwargs):
  values = dict(model_dir=model_dir, train_steps=steps, eval_steps=0, xla=False, log_every=1,
                seed=3, mixed_precision="none")  # float32: the references below are
  values.update(kwargs)
  return trainer.TrainConfig(**values)


def _train(problem, data_dir, config, overrides=TINY):
  hparams = t2t_lite.get_hparams("transformer_tiny", overrides)
  lines = []
  t = trainer.Trainer(problem, hparams, data_dir, config, problem.tokenizer(data_dir).vocab_size,
                      {"problem": problem.name}, log=lines.append)
  result = t.train()
  return t, result, lines


class FixedLengthProblem(Problem):
  """Random sequences of one fixed length (one batch shape: one XLA compilation)."""
  name = "fixed_length_test"
  length = 12

  def tokenizer(self, data_dir=None):
    return tokenizers.WordTokenizer([str(i) for i in range(20)])

  def dataset(self, split, data_dir, hparams, training, *, batch_tokens=None, seed=None,
              input_context=None, static_shapes=False, **unused):
    rows = batch_tokens // self.length

    def make(index):
      shape = [rows, self.length]
      ids = tf.random.stateless_uniform(shape, [seed or 0, index], 3, 23, tf.int32)
      eos = tf.one_hot(self.length - 1, self.length, dtype=tf.int32)[None]
      ids = ids * (1 - eos) + eos  # ends in EOS (id 1)
      return {"inputs": ids, "targets": tf.concat([tf.reverse(ids[:, :-1], [1]), ids[:, -1:]], 1)}

    return tf.data.Dataset.range(10 ** 6).map(make)


@pytest.fixture(scope="module")
def float32_losses(tmp_path_factory):
  """3 steps of FixedLengthProblem in float32 without XLA: the reference of the next tests.
  With dropout: the masks must be the same with and without XLA."""
  model_dir = str(tmp_path_factory.mktemp("float32"))
  _, result, _ = _train(FixedLengthProblem(), None, _config(model_dir, 3), TINY_DROPOUT)
  losses = [loss for _, loss in result["losses"]]
  assert len(losses) == 3 and losses[2] < losses[0]  # it trains
  return losses


def test_xla_on_and_off_give_the_same_loss(float32_losses, tmp_path):
  _, result, _ = _train(FixedLengthProblem(), None, _config(str(tmp_path), 3, xla=True),
                        TINY_DROPOUT)
  np.testing.assert_allclose([loss for _, loss in result["losses"]], float32_losses, rtol=2e-5)


def test_rdrop_trains_as_without_it_when_nothing_drops_and_otherwise_not(float32_losses,
                                                                        tmp_path):
  def losses(overrides, **config):
    _, result, _ = _train(FixedLengthProblem(), None,
                          _config(str(tmp_path / overrides / str(config)), 3, **config),
                          overrides)
    return [loss for _, loss in result["losses"]]

  # Without dropout the two copies agree: no divergence and no gradient from it.
  np.testing.assert_allclose(losses(TINY + ",rdrop=5.0"), losses(TINY), rtol=1e-5)
  # With dropout the divergence term changes the steps (the logged loss is the cross entropy,
  # close to the plain run's at the first step); the step without XLA (its loss XLA-compiled
  # alone) takes the XLA step's steps.
  rdrop = losses(TINY_DROPOUT + ",rdrop=5.0")
  assert rdrop[0] == pytest.approx(float32_losses[0], rel=0.05) and rdrop[2] < rdrop[0]
  assert abs(rdrop[2] - float32_losses[2]) > 1e-4
  np.testing.assert_allclose(losses(TINY_DROPOUT + ",rdrop=5.0", xla=True), rdrop, rtol=2e-5)


@pytest.mark.parametrize("precision, expected_dtype", [("bf16", "bfloat16"), ("fp16", "float16")])
def test_mixed_precision_trains_close_to_float32(precision, expected_dtype, float32_losses,
                                                 tmp_path):
  t, result, _ = _train(FixedLengthProblem(), None,
                        _config(str(tmp_path), 3, mixed_precision=precision), TINY_DROPOUT)
  assert t.model.compute_dtype == expected_dtype
  assert t.model.trainable_variables[0].dtype == "float32"  # master weights stay float32
  assert isinstance(t.optimizer, keras.optimizers.LossScaleOptimizer) == (precision == "fp16")
  np.testing.assert_allclose([loss for _, loss in result["losses"]], float32_losses, rtol=2e-2)


def test_ram_filesystem_run_writes_and_resumes(reverse_dir):
  problem = t2t_lite.get_problem("algorithmic_reverse")
  model_dir = "ram://t2t_lite_test/run"
  t, _, lines = _train(problem, reverse_dir, _config(model_dir, 3))
  assert t.step == 3 and t.micro_batch_tokens == 256
  assert tf.train.latest_checkpoint(model_dir) == model_dir + "/ckpt-3"
  for name in ("hparams.json", "run.json", "manifest.json", "ckpt-3.index"):
    assert tf.io.gfile.exists(f"{model_dir}/{name}"), name
  with tf.io.gfile.GFile(f"{model_dir}/run.json") as f:
    run = json.load(f)
  assert (run["problem"], run["vocab_size"], run["grad_accum_steps"]) == (
      "algorithmic_reverse", 13, 1)
  assert t2t_lite.HParams.load(f"{model_dir}/hparams.json").d_model == 32
  assert tf.io.gfile.glob(f"{model_dir}/train/events.out.tfevents.*")

  t, resumed, lines = _train(problem, reverse_dir, _config(model_dir, 5))
  assert lines[:3] == ["computing in none (asked for)", "XLA off (asked for)",
                       f"restored {model_dir}/ckpt-3 (step 3)"]
  assert [s for s, _ in resumed["losses"]] == [4, 5]
  assert tf.train.latest_checkpoint(model_dir) == model_dir + "/ckpt-5"
  assert tf.io.gfile.exists(f"{model_dir}/ckpt-3.index")  # kept (keep_checkpoints=20)

  # Decode and export from ram:// too: model_dir alone is enough, the export lands in ram://.
  texts = ["3 9 4", "5 6"]
  expected, scores = t2t_lite.translate(model_dir, texts, beam_size=2)
  assert len(expected) == 2 and np.all(np.isfinite(scores))
  path = export.export_model_dir(model_dir, "ram://t2t_lite_test/exports", beam_size=2)
  assert path == "ram://t2t_lite_test/exports/1"
  served = tf.saved_model.load(path).signatures["serving_default"](inputs=tf.constant(texts))
  assert [s.decode() for s in served["outputs"].numpy()] == expected


def test_nan_loss_stops_and_keeps_the_last_good_checkpoint(reverse_dir, tmp_path):
  problem = t2t_lite.get_problem("algorithmic_reverse")
  model_dir = str(tmp_path / "nan")
  config = _config(model_dir, 20, checkpoint_every_minutes=1e-9)  # a checkpoint every step
  with pytest.raises(trainer.TrainerError) as error:
    _train(problem, reverse_dir, config, TINY + ",learning_rate=1e30")
  message = str(error.value)
  assert message.startswith("loss became ") and "last good checkpoint" in message, message
  latest = tf.train.latest_checkpoint(model_dir)
  assert latest is not None and latest in message
  good_step = int(latest.rsplit("-", 1)[1])
  assert f"between steps {good_step} and {good_step + 1}" in message
  reader = tf.train.load_checkpoint(latest)
  floats = [n for n, d in reader.get_variable_to_dtype_map().items() if d.is_floating]
  assert len(floats) > 30
  for name in floats:
    assert np.all(np.isfinite(reader.get_tensor(name))), name


def test_time_budget_stops_the_run_even_with_frequent_checkpoints(reverse_dir, tmp_path,
                                                                  fake_clock):
  """train_minutes counts from the start of training; saving a checkpoint does not restart it.
  The budget's clock is fake_clock's: 3 seconds are a few readings, not a machine's speed."""
  problem = t2t_lite.get_problem("algorithmic_reverse")
  model_dir = str(tmp_path / "budget")
  config = _config(model_dir, 100_000, train_minutes=0.05, checkpoint_every_minutes=1e-9)
  t, result, lines = _train(problem, reverse_dir, config)
  assert 1 <= t.step < 100_000
  assert lines[-1] == f"stopping at step {t.step}: the 0.05 minute budget is spent"
  etas = re.findall(r"ETA 0:00:(\d\d)$", "\n".join(lines), re.M)  # the budget, not 100k steps
  assert len(etas) == t.step and all(int(s) <= 3 for s in etas)
  assert tf.train.latest_checkpoint(model_dir).endswith(f"ckpt-{t.step}")


def test_cooldown_brings_the_learning_rate_to_zero_by_the_end_of_the_budget(
    reverse_dir, tmp_path, fake_clock):
  problem = t2t_lite.get_problem("algorithmic_reverse")
  config = _config(str(tmp_path / "cooldown"), 100_000, train_minutes=0.5, cooldown_minutes=0.25)
  t, result, lines = _train(problem, reverse_dir, config)
  assert result["stopped"] == "time"
  rates = [float(lr) for lr in re.findall(r"  lr ([0-9.e+-]+)  ", "\n".join(lines))]
  assert len(rates) == t.step >= 5
  hparams = t2t_lite.get_hparams("transformer_tiny", TINY)
  # The factor on the paper's rate: 1 for the first 15 of the 30 seconds, then falling to 0.
  factors = [rate / float(optimization.learning_rate(
      step, hparams.d_model, hparams.warmup_steps, hparams.learning_rate))
      for step, rate in enumerate(rates, 1)]
  assert factors[0] == pytest.approx(1, rel=1e-3) and factors[-1] < 0.2
  assert all(later <= earlier + 1e-3 for earlier, later in zip(factors, factors[1:]))
  assert any(0.2 < factor < 0.9 for factor in factors)
  with pytest.raises(trainer.TrainerError, match="cooldown_minutes must be > 0 and at most"):
    _config("m", 1, train_minutes=1, cooldown_minutes=2)


def test_batch_too_small_for_accumulation_is_refused(reverse_dir, tmp_path):
  problem = t2t_lite.get_problem("algorithmic_reverse")
  with pytest.raises(trainer.TrainerError, match=r"256 global tokens / \(1 replicas x 16 "
                     r"accumulation steps\) = 16 tokens per micro-batch, less than max_length=24"):
    _train(problem, reverse_dir, _config(str(tmp_path / "m"), 2, grad_accum_steps=16))


# ------------------------------------------------------------------------------ subprocesses
def _run_script(tmp_path, name, code, env=None, **kwargs):
  path = tmp_path / f"{name}.py"
  path.write_text(textwrap.dedent(code))
  return subprocess.Popen([sys.executable, str(path)], env=env or ENV, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, **kwargs)


def _finish(process, timeout=240):
  output, _ = process.communicate(timeout=timeout)
  assert process.returncode == 0, output[-3000:]
  return output


MIRRORED_SCRIPT = """
import json, sys, tensorflow as tf
cpu = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
import t2t_lite
from t2t_lite.decode import export
from t2t_lite.train import distribute, trainer
data_dir, out_dir, overrides = sys.argv[1:]
problem = t2t_lite.get_problem("algorithmic_reverse")
hparams = t2t_lite.get_hparams("transformer_tiny", overrides)
out = {}
for name, strategy, accum in [
    ("mirrored", tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"]), 1),
    ("one", tf.distribute.get_strategy(), 2)]:
  config = trainer.TrainConfig(model_dir=f"{out_dir}/{name}", train_steps=2, eval_steps=0,
                               xla=False, log_every=1, grad_accum_steps=accum, seed=3)
  t = trainer.Trainer(problem, hparams, data_dir, config, 13,
                      platform=distribute.Platform.make(strategy=strategy), log=lambda line: None)
  result = t.train()
  out[name] = dict(losses=[l for _, l in result["losses"]], replicas=t.num_replicas,
                   micro=t.micro_batch_tokens)
print("RESULT", json.dumps(out))
"""


@pytest.fixture(scope="module", autouse=True)
def mirrored_run(request, reverse_dir, tmp_path_factory):
  """Started when this module starts, so that it runs while the in-process tests do."""
  if not any(item.name.startswith("test_mirrored") for item in request.session.items):
    yield None  # not selected (-k): don't start it
    return
  out_dir = tmp_path_factory.mktemp("mirrored")
  script = out_dir / "mirrored.py"
  script.write_text(MIRRORED_SCRIPT)
  process = subprocess.Popen([sys.executable, str(script), reverse_dir, str(out_dir),
                              TINY_DROPOUT],
                             env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                             text=True)
  yield process
  if process.poll() is None:
    process.kill()
    process.communicate()


def test_mirrored_two_devices_match_one_device_accumulating(mirrored_run):
  """2 replicas x 1 micro-batch and 1 device x 2 micro-batches read the same batches and draw
  the same dropout masks: the same steps. Two steps are enough: the second step's loss is of the
  weights the first one's combined gradients made, computed with the second step's masks."""
  result = json.loads(_finish(mirrored_run).split("RESULT ", 1)[1])
  mirrored, one = result["mirrored"], result["one"]
  assert (mirrored["replicas"], mirrored["micro"]) == (2, 128)
  assert (one["replicas"], one["micro"]) == (1, 128)
  assert len(mirrored["losses"]) == 2
  np.testing.assert_allclose(mirrored["losses"], one["losses"], rtol=1e-5)


def _free_ports(count):
  sockets = [socket.socket() for _ in range(count)]
  for s in sockets:
    s.bind(("127.0.0.1", 0))
  ports = [s.getsockname()[1] for s in sockets]
  for s in sockets:
    s.close()
  return ports


def test_multi_worker_two_processes_end_with_identical_weights(reverse_dir, tmp_path):
  # With dropout: keras' own stateless dropout failed here under TF 2.21 ("counter must be a
  # vector with length at least 2"); t2t_lite.modeling.dropout must not.
  workers = [f"127.0.0.1:{port}" for port in _free_ports(2)]
  model_dir = tmp_path / "multi_worker"
  code = f"""
  import json, numpy as np, t2t_lite
  from t2t_lite.train import trainer
  problem = t2t_lite.get_problem("algorithmic_reverse")
  hparams = t2t_lite.get_hparams("transformer_tiny", "{TINY_DROPOUT}")
  config = trainer.TrainConfig(model_dir="{model_dir}", train_steps=2, eval_steps=0, xla=False,
                               log_every=1, strategy="multi_worker", seed=3,
                               checkpoint_every_minutes=1e-9)  # workers agree to save each step
  t = trainer.Trainer(problem, hparams, "{reverse_dir}", config, 13, log=lambda line: None)
  result = t.train()
  weights = [v.numpy().astype(np.float64) for v in t.model.trainable_variables]
  print("RESULT", json.dumps(dict(step=t.step, chief=t.is_chief, replicas=t.num_replicas,
        sums=[float(w.sum()) for w in weights], norms=[float((w * w).sum()) for w in weights])))
  """
  processes = []
  for index in range(2):
    tf_config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
    processes.append(_run_script(tmp_path, f"worker{index}", code,
                                 env=dict(ENV, TF_CONFIG=json.dumps(tf_config))))
  results = [json.loads(_finish(p).split("RESULT ", 1)[1]) for p in processes]
  assert [(r["step"], r["chief"], r["replicas"]) for r in results] == [(2, True, 2),
                                                                      (2, False, 2)]
  assert results[0]["sums"] == results[1]["sums"]
  assert results[0]["norms"] == results[1]["norms"]
  assert tf.train.latest_checkpoint(str(model_dir)).endswith("ckpt-2")
  assert not tf.io.gfile.glob(f"{model_dir}/workertemp_*")


# ------------------------------------------------------------------------------ the CLI
def _main(argv, capsys):
  code = train_cli.main(argv)
  captured = capsys.readouterr()
  return code, captured.out, captured.err


def test_cli_lists_problems_and_hparams(capsys):
  code, out, _ = _main(["--list"], capsys)
  assert code == 0
  problems, hparams = out.splitlines()
  assert "algorithmic_reverse" in problems.split() and "multi30k_ende" in problems.split()
  assert "transformer_big" in hparams.split() and "transformer_tiny" in hparams.split()


@pytest.mark.parametrize("flags, message", [
    (["--problem=algorithmic_revers"],
     "unknown problem 'algorithmic_revers'; did you mean 'algorithmic_reverse'"),
    (["--problem=algorithmic_reverse", "--hparams=transformer_bas"],
     "unknown hparams 'transformer_bas'; did you mean 'transformer_base'"),
    (["--problem=algorithmic_reverse", "--hparams_overrides=dropot=0.1"],
     "unknown hparam 'dropot'; did you mean 'dropout'"),
    (["--problem=algorithmic_reverse", "--hparams_overrides=num_layers=two"],
     "bad value for hparam 'num_layers': 'two' is not an integer"),
    (["--problem=algorithmic_reverse", "--grad_accum_steps=0"],
     "grad_accum_steps must be positive, got 0"),
    (["--problem=algorithmic_reverse", "--train_minutes=nan"],
     "train_minutes must be positive, got nan"),
    (["--problem=algorithmic_reverse", "--checkpoint_every_minutes=0"],
     "checkpoint_every_minutes must be positive, got 0.0"),
    (["--problem=algorithmic_reverse", "--eval_decode_examples=-1"],
     "eval_decode_examples must be >= 0, got -1"),
    (["--problem=algorithmic_reverse", "--problem_settings=eval_size=-1"],
     "algorithmic_reverse: eval_size must be >= 0, got -1"),
    (["--problem=wsj_parsing", "--problem_settings=min_word_count=0"],
     "wsj_parsing: min_word_count must be >= 1, got 0"),
    (["--problem=multi30k_ende", "--problem_settings=vocab_type=words"],
     "multi30k_ende: vocab_type must be one of ('bpe', 'unigram'), not 'words'"),
])
def test_cli_bad_input_is_one_line_and_exit_2(flags, message, tmp_path, capsys):
  code, _, err = _main(flags + [f"--data_dir={tmp_path}/d", f"--model_dir={tmp_path}/m"], capsys)
  assert code == 2
  assert err.startswith("t2t-lite-train: error: " + message), err
  assert err.count("\n") == 1 and "Traceback" not in err


def test_cli_refuses_to_resume_with_other_hparams(tmp_path, capsys):
  model_dir = tmp_path / "m"
  model_dir.mkdir()
  t2t_lite.get_hparams("transformer_tiny").save(str(model_dir / "hparams.json"))
  code, _, err = _main(["--problem=algorithmic_reverse", "--hparams=transformer_tiny",
                        "--hparams_overrides=d_model=128", f"--data_dir={tmp_path}/d",
                        f"--model_dir={model_dir}"], capsys)
  assert code == 2
  assert err == (f"t2t-lite-train: error: {model_dir} was trained with d_model=64, not 128 "
                 "(hparams set transformer_tiny with 'd_model=128'): resume with the same "
                 f"hparams (see {model_dir}/hparams.json) or use a new --model_dir\n")
  assert not (tmp_path / "d").exists()  # refused before any data was prepared


def test_cli_refuses_to_resume_another_problem(tmp_path, capsys):
  model_dir = tmp_path / "m"
  model_dir.mkdir()
  (model_dir / "run.json").write_text(json.dumps({"problem": "algorithmic_copy"}))
  code, _, err = _main(["--problem=algorithmic_reverse", f"--data_dir={tmp_path}/d",
                        f"--model_dir={model_dir}"], capsys)
  assert code == 2
  assert err == (f"t2t-lite-train: error: {model_dir} was trained on problem "
                 "'algorithmic_copy', not 'algorithmic_reverse': use a new --model_dir\n")


def test_cli_requires_a_problem(capsys):
  with pytest.raises(SystemExit) as exit_:
    train_cli.main(["--hparams=transformer_tiny"])
  assert exit_.value.code == 2
  assert "--problem is required (or --list)" in capsys.readouterr().err


def test_cli_puts_data_and_run_under_t2t_lite_home(tmp_path):
  args = train_cli.parse_args(["--problem=wmt_ende", "--hparams=transformer_big"])
  chosen = train_cli.default_dirs(args, {"T2T_LITE_HOME": str(tmp_path)})
  assert chosen == ["data_dir", "model_dir"]
  assert args.data_dir == str(tmp_path / "data" / "wmt_ende")
  assert args.model_dir == str(tmp_path / "runs" / "wmt_ende-transformer_big")
  args = train_cli.parse_args(["--problem=wmt_ende", f"--model_dir={tmp_path}/m"])
  assert train_cli.default_dirs(args, {}) == ["data_dir"]
  assert args.data_dir.endswith("/t2t_lite/data/wmt_ende") and args.model_dir == f"{tmp_path}/m"
