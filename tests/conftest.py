"""Shared fixtures. Real data is read from ../shared/data (never copied into the project)."""
import gc
import os
import pathlib
import re
import subprocess
import typing
import unicodedata

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
if os.environ.get("PYTEST_XDIST_WORKER"):
  # README's test command runs three pytest workers (pytest-xdist) on the CI machine's two
  # cores: many tests wait on the tools they start, and the third worker fills those waits.
  # Each worker and the tools it starts then use one thread for an op's inner loops:
  # TensorFlow's default pool of one thread per core would spin-wait against the other
  # workers' on the same cores. Set here so that the tools' processes inherit it.
  os.environ.setdefault("TF_NUM_INTRAOP_THREADS", "1")


# The files that take longest, first; the others after them, as collected. pytest-xdist hands
# whole files to the workers in this order (pytest.ini's --no-loadscope-reorder: by default it
# starts the files with the most tests first), so that no long file starts while the other
# workers have nothing left to take. A new long file goes in here.
LONGEST_FILES = ("test_run_dir.py", "test_bad_input.py", "test_outputs.py", "test_export.py",
                 "test_selection.py", "test_trainer.py", "test_decoding.py", "test_parsing.py",
                 "test_tune.py", "test_shortlist.py", "test_model.py", "test_decode_stream.py",
                 "test_bad_decode_input.py", "test_precision_choice.py", "test_packing.py")


def pytest_collection_modifyitems(items):
  rank = {name: i for i, name in enumerate(LONGEST_FILES)}
  items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: files stay whole


@pytest.hookimpl(tryfirst=True)
def pytest_unconfigure(config):
  """pytest's last act is a few full garbage collections (to report unraisable exceptions),
  which in a worker that ran TensorFlow tests spend seconds finalizing its objects one by one;
  the process ends right after and frees them at once, so they are frozen first."""
  gc.freeze()


def normalize(text):
  """What the tokenizers' decode(encode(text)) gives (t2t_lite/data/tokenizers.py's
  losslessness): NFKC, then runs of spaces collapsed and the ends stripped."""
  return re.sub(" +", " ", unicodedata.normalize("NFKC", text)).strip(" ")


SHARED_DATA = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data"


def require_shared_data(subdir):
  """Path to ../shared/data/<subdir>; fails under CI=true when absent, skips otherwise."""
  path = SHARED_DATA / subdir
  if not path.is_dir():
    message = f"shared data {path} is missing (see ../shared/data/README.md)"
    if os.environ.get("CI", "").lower() == "true":
      pytest.fail(message)
    pytest.skip(message)
  return path


@pytest.fixture(scope="session")
def multi30k_dir():
  return require_shared_data("multi30k")


@pytest.fixture(scope="session")
def ptb_dir():
  return require_shared_data("ptb_sample")


def _shared_root(tmp_path_factory):
  """This session's directory, shared by its pytest-xdist workers."""
  root = tmp_path_factory.getbasetemp()
  return root.parent if os.environ.get("PYTEST_XDIST_WORKER") else root


def _prepared_once(tmp_path_factory, name, *raw_dir, datagen=None):
  """The data_dir of problem `name` prepared once per session: once for all pytest-xdist
  workers, in the directory they share, the first to come preparing it while the others wait
  on a lock (the other workers only check what it prepared). datagen: flags with which the
  first prepares it by running t2t-lite-datagen as a process, as a user does; what the tool
  printed is kept in shared_<name>.datagen.json (see multi30k_datagen_run)."""
  import fcntl
  import json
  import sys

  import t2t_lite
  root = _shared_root(tmp_path_factory)
  data_dir = str(root / f"shared_{name}")
  with open(root / f"shared_{name}.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    printed = root / f"shared_{name}.datagen.json"
    if datagen is not None and not printed.exists():
      run = subprocess.run(
          [os.path.join(os.path.dirname(sys.executable), "t2t-lite-datagen"),
           f"--problem={name}", f"--data_dir={data_dir}", *[f"--raw_dir={d}" for d in raw_dir],
           *datagen], capture_output=True, text=True, timeout=900)
      printed.write_text(json.dumps(dict(returncode=run.returncode, stdout=run.stdout,
                                         stderr=run.stderr, flags=list(datagen))))
    # Checks what the tool prepared (and prepares it here if the tool failed: its test says so).
    t2t_lite.get_problem(name).prepare(data_dir, *map(str, raw_dir))
  return data_dir


# multi30k_ende is prepared by the tool, whose progress lines tests/test_progress.py checks:
# one preparation of Multi30k (its SentencePiece vocabulary) for both.
MULTI30K_DATAGEN = ("--progress_seconds=0.1",)


@pytest.fixture(scope="session")
def multi30k_data(multi30k_dir, tmp_path_factory):
  """{"multi30k_ende": data_dir, "multi30k_enfr": data_dir}, prepared once per session
  (multi30k_ende by a t2t-lite-datagen process: multi30k_datagen_run)."""
  return {name: _prepared_once(tmp_path_factory, name, multi30k_dir,
                               datagen=MULTI30K_DATAGEN if name == "multi30k_ende" else None)
          for name in ("multi30k_ende", "multi30k_enfr")}


@pytest.fixture(scope="session")
def multi30k_datagen_run(multi30k_data, tmp_path_factory):
  """What the t2t-lite-datagen process that prepared multi30k_data's multi30k_ende (with
  MULTI30K_DATAGEN's flags) printed: {"returncode", "stdout", "stderr", "flags"}."""
  import json
  root = _shared_root(tmp_path_factory)
  return json.loads((root / "shared_multi30k_ende.datagen.json").read_text())


def train_in_process(problem, data_dir, model_dir, overrides, steps, hparams_set="transformer_tiny",
                     **config):
  """A `hparams_set` run (hparams `overrides`; transformer_tiny unless told) of `steps` steps
  trained in this process and recorded as t2t-lite-train records it (its hparams set and
  overrides): for a run that tests only resume, decode or damage, whose trainer is not what
  they test (a process of its own would only add TensorFlow's start). `config`: more
  TrainConfig fields."""
  import t2t_lite
  from t2t_lite.train import trainer
  config = dict(dict(train_steps=steps, eval_steps=0, eval_decode_examples=0, xla=False),
                **config)
  trainer.train(t2t_lite.get_problem(problem),
                t2t_lite.get_hparams(hparams_set, overrides), str(data_dir),
                trainer.TrainConfig(model_dir=str(model_dir), **config),
                run_info={"hparams_set": hparams_set, "hparams_overrides": overrides},
                log=lambda line: None)


class TrainedModel(typing.NamedTuple):
  """How a trained model that tests share is made: a train_in_process run."""
  problem: str
  overrides: str
  steps: int
  config: dict = {}  # more TrainConfig fields
  hparams_set: str = "transformer_tiny"
  raw: typing.Optional[str] = None  # its problem's raw data, a ../shared/data subdirectory


# The trained models that tests share, by kind (trained_model). One more is a line here and a
# small fixture below.
TRAINED_MODELS = {
    # 1,000 steps of 512-token batches decode about 90% of 100 random lines exactly and align
    # over 90% of their words as reversed (800 steps of 2,048 tokens: 93% exact in twice the
    # time; 400 steps at twice the learning rate: 2%).
    "reverser": TrainedModel("algorithmic_reverse", "batch_size=512", 1000,
                             dict(mixed_precision="none")),
}
REPO = pathlib.Path(__file__).resolve().parents[1]
_MODEL_CODE = ("t2t_lite", "problems", "hparams")  # the code a trained model is made by


def trained_model_key(kind):
  """What a trained model of `kind` is made from, as a sha256: every .py file under t2t_lite/,
  problems/ and hparams/ (path and bytes, in path order), how it is trained
  (TRAINED_MODELS[kind]), its raw data's files if it has any, and the installed TensorFlow and
  Keras (their kernels and initializers). A change to any of them is another key, so another
  model, never a stale one; a change anywhere else (the tests, the docs) keeps the one built."""
  import hashlib
  import importlib.metadata
  spec = TRAINED_MODELS[kind]
  digest = hashlib.sha256(repr((kind, spec)).encode())
  code = sorted(path for name in _MODEL_CODE for path in (REPO / name).rglob("*.py"))
  files = [(REPO, path) for path in code]
  if spec.raw:
    raw_dir = require_shared_data(spec.raw)
    files += [(raw_dir, path) for path in sorted(raw_dir.rglob("*")) if path.is_file()]
  for root, path in files:
    digest.update(f"{path.relative_to(root)}\0".encode() + path.read_bytes() + b"\0")
  for package in ("tensorflow", "keras"):
    digest.update(f"{package}=={importlib.metadata.version(package)}\0".encode())
  return digest.hexdigest()


def _trained_once(config, tmp_path_factory, kind):
  """The model_dir of a TRAINED_MODELS[kind] run, trained once for every pytest-xdist worker
  and every later session with the same trained_model_key: in pytest's cache
  (.pytest_cache/d/t2t_lite_models/<kind>/<key>; the session's shared directory when the cache
  is off), the first worker to come training it under a lock while the others wait. It is
  trained into a temporary sibling and renamed into place when complete, so that a build cut
  short (a crash, a SIGKILL) never looks done; what it left is removed at the next use. Models
  of the kind's other keys (code since changed) go once unused for a week."""
  import fcntl
  import shutil
  import time
  cache = getattr(config, "cache", None)  # None under -p no:cacheprovider
  root = cache.mkdir("t2t_lite_models") if cache else _shared_root(tmp_path_factory)
  (root / kind).mkdir(exist_ok=True)
  model_dir = root / kind / trained_model_key(kind)[:16]
  with open(root / f"{kind}.lock", "w") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)  # Builds and removals of this kind happen under it.
    for left in (root / kind).glob(".tmp-*"):  # a build cut short
      shutil.rmtree(left)
    if not model_dir.is_dir():
      temp = root / kind / f".tmp-{os.getpid()}"
      spec = TRAINED_MODELS[kind]
      raw_dir = (require_shared_data(spec.raw),) if spec.raw else ()
      train_in_process(spec.problem, _prepared_once(tmp_path_factory, spec.problem, *raw_dir),
                       temp, spec.overrides, spec.steps, spec.hparams_set, **spec.config)
      os.rename(temp, model_dir)
    os.utime(model_dir)  # its last use
    for other in (root / kind).iterdir():
      if other != model_dir and time.time() - other.stat().st_mtime > 7 * 24 * 3600:
        shutil.rmtree(other)
  return str(model_dir)


@pytest.fixture(scope="session")
def trained_model(request, tmp_path_factory):
  """-> get(kind): the model_dir of a TRAINED_MODELS[kind] run, trained once (_trained_once)
  and shared: read only, so a test that changes a model_dir works on a copy (the session
  checks at its end that none changed). Its run.json names the data_dir of the session that
  trained it, gone since: a test that needs the data prepares it (e.g. reverse_dir)."""
  got = {}

  def get(kind):
    if kind not in got:
      model_dir = _trained_once(request.config, tmp_path_factory, kind)
      got[kind] = (model_dir, file_hashes(model_dir))
    return got[kind][0]

  yield get
  for kind, (model_dir, hashes) in got.items():
    assert file_hashes(model_dir) == hashes, f"a test changed the shared {kind} in {model_dir}"


@pytest.fixture(scope="session")
def reversing_model(trained_model):
  """A transformer_tiny trained to reverse (TRAINED_MODELS["reverser"])."""
  return trained_model("reverser")


@pytest.fixture(scope="session")
def make_random_model_dir(tmp_path_factory):
  """-> make(name, words, checkpoint_number=1, overrides=""): a multi30k_ende model_dir with a
  400-piece SentencePiece vocabulary learned from 500 random sentences of `words` and the random
  weights (seed 1) of transformer_tiny (hparams `overrides`) saved as ckpt-<checkpoint_number>.
  No data needed."""
  import random

  import keras
  import tensorflow as tf

  import t2t_lite
  from t2t_lite.rundir import run_files
  from t2t_lite.data import tokenizers

  def make(name, words, checkpoint_number=1, overrides=""):
    root = tmp_path_factory.mktemp(name)
    rng = random.Random(0)
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(3, 12))) for _ in range(500)]
    data_dir, model_dir = str(root / "data"), str(root / "model")
    vocab = tokenizers.train_sentencepiece(texts, os.path.join(data_dir, "vocab.model"), 400)
    hparams = t2t_lite.get_hparams("transformer_tiny", overrides)
    run_files.write_run_files(model_dir, hparams, {"problem": "multi30k_ende"}, data_dir)
    keras.utils.set_random_seed(1)
    model = t2t_lite.build_model(hparams, vocab.vocab_size)
    tf.train.CheckpointManager(tf.train.Checkpoint(model=model), model_dir,
                               max_to_keep=1).save(checkpoint_number=checkpoint_number)
    return model_dir

  return make


class _Clock:
  """A clock that reads 0.5 s later at every reading."""

  def __init__(self):
    self.now = 0.0

  def time(self):
    self.now += 0.5
    return self.now


@pytest.fixture()
def fake_clock(monkeypatch):
  """The clock of run budgets and cooldowns (run_schedule's) reads 0.5 s later at every
  reading: a budget in minutes becomes one in steps, not in machine speed."""
  from t2t_lite.train import run_schedule
  monkeypatch.setattr(run_schedule, "time", _Clock())


@pytest.fixture(scope="session")
def reverse_dir(tmp_path_factory):
  """algorithmic_reverse prepared with its registered settings (so the CLI can use it too), once
  per session; tests that change it work on a copy."""
  return _prepared_once(tmp_path_factory, "algorithmic_reverse")


def _mounted_tmpfs(path, options):
  """Mounts a tmpfs at path (needs root and mount; skips the test where that is refused)."""
  path.mkdir()
  if subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)],
                    capture_output=True).returncode:
    pytest.skip("cannot mount a tmpfs here")
  return path


@pytest.fixture()
def small_disk(tmp_path):
  """A 64 MB file system."""
  yield _mounted_tmpfs(tmp_path / "disk", "size=64m")
  subprocess.run(["umount", str(tmp_path / "disk")], check=True)


@pytest.fixture()
def tiny_disk(tmp_path):
  """A 256 kB file system: room for a run's small files, not for a checkpoint or an export."""
  yield _mounted_tmpfs(tmp_path / "tiny", "size=256k")
  subprocess.run(["umount", str(tmp_path / "tiny")], check=True)


@pytest.fixture()
def read_only_disk(tmp_path):
  yield _mounted_tmpfs(tmp_path / "ro", "ro,size=1m")
  subprocess.run(["umount", str(tmp_path / "ro")], check=True)


def write_records(path, examples):
  """Writes (inputs, targets) id lists as one TFRecord file of the pipeline's examples."""
  import tensorflow as tf
  from t2t_lite.data import pipeline
  with tf.io.TFRecordWriter(str(path)) as writer:
    for inputs, targets in examples:
      writer.write(pipeline.serialize_example(inputs, targets))


def file_hashes(root):
  """{relative path: sha256} of every file under root ({} when root does not exist)."""
  import hashlib
  root = pathlib.Path(root)
  return {str(path.relative_to(root)): hashlib.sha256(path.read_bytes()).hexdigest()
          for path in sorted(root.rglob("*")) if path.is_file()}


# tensorflow_text: its ops (SentencePiece's) registered, as TF Serving links them in. argv[2]: a
# JSON list of [signature, {input name: nested lists of strings}], each answered in turn.
_TF1_CLIENT = """import json, sys, numpy, tensorflow as tf, tensorflow_text
text = lambda v: v.decode() if isinstance(v, bytes) else v
answers = []
with tf.Graph().as_default(), tf.compat.v1.Session() as s:
  g = tf.compat.v1.saved_model.loader.load(s, ['serve'], sys.argv[1])
  for signature, request in json.loads(sys.argv[2]):
    sig = g.signature_def[signature]
    try:
      out = s.run({k: v.name for k, v in sig.outputs.items()},
                  {sig.inputs[k].name: numpy.array(v, object) for k, v in request.items()})
    except tf.errors.OpError as e:  # a request the export refuses
      answers.append({"error": [type(e).__name__, e.message]})
      continue
    answers.append({k: numpy.vectorize(text, otypes=[object])(v).tolist()
                    for k, v in out.items()})
print(json.dumps(answers))
"""


def tf1_serve_all(export_path, requests):
  """The export's answers to `requests`, [(signature, {input name: nested lists of strings})],
  through TF Serving's loader (the TF1 session path, by tensor name) in one fresh process that
  loads the export once: a list of {output name: nested lists, strings decoded}, or
  {"error": [the exception's class name, its message]} for a request the export refused."""
  import json
  import sys
  run = subprocess.run([sys.executable, "-c", _TF1_CLIENT, export_path,
                        json.dumps([[signature, request] for signature, request in requests])],
                       capture_output=True, text=True, check=False)
  assert run.returncode == 0, run.stderr[-3000:]
  return json.loads(run.stdout.splitlines()[-1])


def tf1_serve(export_path, signature, sentences, **inputs):
  """The export's answer to `sentences` (and other string inputs of the signature, e.g.
  prefixes=[...]) through TF Serving's loader in a fresh process (tf1_serve_all's):
  {output name: nested lists, strings decoded}."""
  (answer,) = tf1_serve_all(export_path, [(signature, dict(inputs, inputs=list(sentences)))])
  assert "error" not in answer, answer
  return answer
