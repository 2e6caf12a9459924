"""TensorBoard reads the trainer's summaries as scalars: with its own event-file reader, and
through the `tensorboard` command's HTTP API (what its scalars dashboard shows)."""
import importlib.metadata
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from tensorboard import context
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer

import t2t_lite
from t2t_lite.train import trainer

TINY = "num_layers=1,d_model=32,d_ff=64,num_heads=2,batch_size=256,max_length=24"
TRAIN_TAGS = {"loss", "learning_rate", "tokens_per_second", "gradient_norm"}
EVAL_TAGS = {"loss", "perplexity", "accuracy", "tokens", "dev_accuracy"}


@pytest.fixture(scope="module")
def model_dir(reverse_dir, tmp_path_factory):
  """4 steps of algorithmic_reverse (the session's data, which training only reads), logged
  every 2 and evaluated (with decoding) every 2."""
  model_dir = str(tmp_path_factory.mktemp("tensorboard") / "model")
  problem = t2t_lite.get_problem("algorithmic_reverse")
  hparams = t2t_lite.get_hparams("transformer_tiny", TINY)
  config = trainer.TrainConfig(model_dir=model_dir, train_steps=4, eval_every=2, eval_steps=1,
                               eval_decode_examples=4, log_every=2, xla=False, seed=3)
  trainer.train(problem, hparams, reverse_dir, config, log=lambda line: None)
  return model_dir


def test_event_files_load_as_scalars(model_dir):
  multiplexer = plugin_event_multiplexer.EventMultiplexer()
  multiplexer.AddRunsFromDirectory(model_dir)
  multiplexer.Reload()
  provider = data_provider.MultiplexerDataProvider(multiplexer, model_dir)
  scalars = provider.list_scalars(context.RequestContext(), experiment_id="", plugin_name="scalars")
  assert {run: set(tags) for run, tags in scalars.items()} == {"train": TRAIN_TAGS,
                                                                "eval": EVAL_TAGS}
  series = provider.read_scalars(context.RequestContext(), experiment_id="", plugin_name="scalars",
                                 downsample=100)
  for run, tags in series.items():
    for tag, points in tags.items():
      assert [p.step for p in points] == [2, 4], (run, tag)
  learning_rates = [p.value for p in series["train"]["learning_rate"]]
  assert 0 < learning_rates[0] < learning_rates[1]  # warming up
  assert all(0 <= p.value <= 100 for p in series["eval"]["dev_accuracy"])
  assert all(p.value > 0 for p in series["eval"]["tokens"])


def _tensorboard_command():
  """The `tensorboard` console script of this environment (where pip installed it)."""
  entry_points = importlib.metadata.distribution("tensorboard").entry_points
  assert any(e.name == "tensorboard" and e.group == "console_scripts" for e in entry_points)
  script = shutil.which("tensorboard", path=os.path.dirname(sys.executable))
  # A venv layered over another (as in development) has the script in the lower one.
  return [script] if script else [sys.executable, "-m", "tensorboard.main"]


def _free_port():
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def test_tensorboard_command_serves_the_scalars(model_dir):
  port = _free_port()
  server = subprocess.Popen(
      _tensorboard_command() + ["--logdir", model_dir, "--port", str(port), "--host",
                                "localhost", "--load_fast=false"],
      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
  url = f"http://localhost:{port}/data/plugin/scalars"
  try:
    deadline, tags = time.time() + 120, None
    while time.time() < deadline:
      assert server.poll() is None, server.stderr.read()
      try:
        with urllib.request.urlopen(f"{url}/tags", timeout=5) as response:
          tags = json.loads(response.read())
        if tags:  # an empty dict until its first load of the logdir
          break
      except OSError:
        pass
      time.sleep(1)
    assert {run: set(t) for run, t in tags.items()} == {"train": TRAIN_TAGS, "eval": EVAL_TAGS}
    with urllib.request.urlopen(f"{url}/scalars?run=train&tag=loss", timeout=5) as response:
      points = json.loads(response.read())  # [[wall_time, step, value], ...]
    assert [step for _, step, _ in points] == [2, 4]
  finally:
    server.terminate()
    server.wait(timeout=30)
