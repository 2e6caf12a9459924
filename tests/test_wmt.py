"""WMT14 preparation through TFDS's own `wmt14_translate` builder, on local stand-in archives.

Only the network fetch of TFDS's download manager is replaced (`DownloadManager._download`,
which would fetch each URL and check it against TFDS's registered checksums): it hands back a
small archive that the test writes with the layout of the real one. Everything after it is the
code a user runs: TFDS's extraction of the .tgz / .tar archives, its SGML, text and gzip
parsers, its TFRecord writing and reading, then t2t-lite's vocabulary and TFRecords.
"""
import gzip
import io
import os
import re
import socket
import subprocess
import sys
import tarfile

import numpy as np
import pytest
import tensorflow_datasets as tfds

import t2t_lite
from t2t_lite.data.tokenizers import EOS_ID

# English, German, French; quotes, apostrophes, "&", hyphenated compounds, numbers.
SENTENCES = [
    ("The Two-Class Society is here.", "Die Zwei-Klassen-Gesellschaft ist da.",
     "La société à deux classes est là."),
    ("He said \"no\" & left.", "Er sagte \"nein\" & ging.", "Il a dit « non » et il est parti."),
    ("It's the children's day.", "Es ist der Tag der Kinder.", "C'est la journée des enfants."),
    ("Prices rose by 3.5%.", "Die Preise stiegen um 3,5 %.", "Les prix ont augmenté de 3,5 %."),
]


def _wmt_module():
  """The module that registers the WMT problems (where its network check lives)."""
  return sys.modules[type(t2t_lite.get_problem("wmt_ende")).__module__]


def _file_bytes(path, sentences):
  """A file of the real layout: SGML segments, plain lines, or gzipped lines."""
  if path.endswith(".sgm"):
    segs = "".join(f'<seg id="{i + 1}">{s}</seg>\n' for i, s in enumerate(sentences))
    return f'<srcset setid="x">\n<doc docid="d1">\n{segs}</doc>\n</srcset>\n'.encode()
  data = "".join(s + "\n" for s in sentences).encode()
  return gzip.compress(data) if path.endswith(".gz") else data


def _is_english(path):
  name = path[:-len(".gz")] if path.endswith(".gz") else path
  return name.endswith((".en", ".en.sgm"))


def write_stand_ins(builder, root):
  """Writes, for every URL the builder downloads, an archive holding its files at the paths
  the builder reads, with a few pairs per subset -> ({url: archive}, {split: [(en, other)]})."""
  from tensorflow_datasets.translate import wmt  # The builder's own table of sources.
  source = builder.builder_config.language_pair[0]  # "de" or "fr"; the target is "en"
  column = {"de": 1, "fr": 2}[source]
  members, expected = {}, {}
  for split, names in builder.subsets.items():
    expected[split] = []
    for name in names:
      dataset = wmt.DATASET_MAP[name]
      pairs = [(f"{row[0]} ({name} {i})", f"{row[column]} ({name} {i})")
               for i, row in enumerate(SENTENCES)]
      expected[split] += pairs
      (url,) = dataset.get_url(source)
      for path in dataset.get_path(source):
        sentences = [en if _is_english(path) else other for en, other in pairs]
        members.setdefault(url, {})[path] = _file_bytes(path, sentences)
  archives = {}
  for i, (url, files) in enumerate(sorted(members.items())):
    name = os.path.basename(url)
    archives[url] = os.path.join(root, f"{i}-{name}")
    with tarfile.open(archives[url], "w:gz" if name.endswith(".tgz") else "w") as tar:
      for path, data in files.items():
        info = tarfile.TarInfo(path)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
  return archives, expected


@pytest.mark.parametrize("name,config,vocab_type", [
    ("wmt_ende", "de-en", "bpe"), ("wmt_enfr", "fr-en", "unigram")])
def test_wmt_prepares_through_the_real_tfds_builder(tmp_path, monkeypatch, name, config,
                                                    vocab_type):
  from etils import epath
  import promise
  tfds_dir = str(tmp_path / "tfds")
  builder = tfds.builder(f"wmt14_translate/{config}", data_dir=tfds_dir)
  archives, expected = write_stand_ins(builder, str(tmp_path))
  fetched = []

  def fetch(manager, resource):  # In place of the HTTP download and its checksum check.
    fetched.append(resource.url)
    return promise.Promise.resolve(epath.Path(archives[resource.url]))

  monkeypatch.setattr(tfds.download.DownloadManager, "_download", fetch)
  monkeypatch.setattr(_wmt_module(), "_unreachable", lambda hosts: None)  # Offline here.
  problem = type(t2t_lite.get_problem(name))(vocab_size=600)
  data_dir = str(tmp_path / "data")
  stats = problem.prepare(data_dir, tfds_dir)

  assert sorted(set(fetched)) == sorted(archives)  # every source archive, each fetched once
  splits = {"train": "train", "dev": "validation", "test": "test"}
  assert {split: s["examples"] for split, s in stats.items()} == {
      split: len(expected[tfds_split]) for split, tfds_split in splits.items()}
  assert len(expected["train"]) == {"de-en": 12, "fr-en": 20}[config]  # 3 or 5 corpora
  for split in ("dev", "test"):  # TFDS orders examples by a hash of their keys
    assert sorted(problem.text_pairs(split, data_dir)) == sorted(expected[splits[split]])
  assert problem.manifest(data_dir)["settings"]["vocab_type"] == vocab_type
  tok = problem.tokenizer(data_dir)
  source, target = sorted(problem.text_pairs("test", data_dir))[0]
  assert tok.decode(tok.encode(target)) == target and tok.decode(tok.encode(source)) == source
  hparams = t2t_lite.get_hparams("transformer_tiny")
  batch = next(iter(problem.dataset("train", data_dir, hparams, training=True, seed=0,
                                    batch_tokens=512)))
  targets = batch["targets"].numpy()
  assert targets.size <= 512 and batch["inputs"].numpy().size <= 512
  lengths = np.count_nonzero(targets, axis=1)
  assert (targets[np.arange(len(targets)), lengths - 1] == EOS_ID).all()


def _resolves(host):
  try:
    socket.getaddrinfo(host, 80)
    return True
  except OSError:
    return False


def test_offline_training_stops_with_one_line_naming_the_network(tmp_path):
  if _resolves("www.statmt.org"):
    pytest.skip("this machine reaches www.statmt.org: the offline case cannot be shown")
  env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
  for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY"):
    env.pop(name, None)
  run = subprocess.run(
      [sys.executable, "-m", "t2t_lite.bin.train", "--problem=wmt_ende",
       "--hparams=transformer_big", f"--data_dir={tmp_path / 'data'}",
       f"--raw_dir={tmp_path / 'tfds'}", f"--model_dir={tmp_path / 'model'}"],
      capture_output=True, text=True, env=env, timeout=300, check=False)
  assert run.returncode == 1, run.stderr[-2000:]  # a run-time failure, not bad usage
  errors = [line for line in run.stderr.splitlines() if line.startswith("t2t-lite-train:")]
  assert errors == run.stderr.splitlines()[-1:], run.stderr[-2000:]  # one line, the last
  assert errors[0].startswith("t2t-lite-train: error: wmt_ende: cannot download WMT14")
  assert re.search(r"no network connection to (www|data)\.statmt\.org", errors[0])
  assert "--raw_dir" in errors[0] and "Traceback" not in run.stderr


class _FailingBuilder:
  """Stands in for a TFDS builder whose preparation fails with `error`."""

  def __init__(self, error):
    self.error = error

  def is_prepared(self):
    return False

  def download_and_prepare(self):
    raise self.error


def _missing_module():
  try:
    import a_module_tfds_would_need  # noqa: F401
  except ModuleNotFoundError as e:
    return e


@pytest.mark.parametrize("error,message", [
    (_missing_module(), "wmt_enfr: TFDS needs the Python module 'a_module_tfds_would_need' to "
                        "prepare wmt14_translate/fr-en, and it is not installed: "
                        "pip install a_module_tfds_would_need"),
    (OSError(28, "No space left on device"), "wmt_enfr: TFDS could not prepare "
     "wmt14_translate/fr-en in /x: OSError: [Errno 28] No space left on device"),
    (RuntimeError("bad\nsecond line"), "wmt_enfr: TFDS could not prepare "
     "wmt14_translate/fr-en in /x: RuntimeError: bad"),
])
def test_preparation_errors_are_reported_as_what_they_are(monkeypatch, error, message):
  from t2t_lite.data.problem_base import ProblemError
  monkeypatch.setattr(tfds, "builder", lambda name, data_dir: _FailingBuilder(error))
  monkeypatch.setattr(_wmt_module(), "_download_hosts", lambda builder: ["www.statmt.org"])
  monkeypatch.setattr(_wmt_module(), "_unreachable", lambda hosts: None)
  with pytest.raises(ProblemError) as raised:
    list(t2t_lite.get_problem("wmt_enfr").raw_pairs("dev", "/x"))
  assert str(raised.value) == message
