"""Problems: preparation, the cache, bad input, TFDS (mocked) WMT, algorithmic, datagen."""
import concurrent.futures
import gzip
import itertools
import json
import logging
import os
import urllib.error
import urllib.request

import pytest
from conftest import normalize

import t2t_lite
from t2t_lite.problems import multi30k
from t2t_lite.bin import datagen
from t2t_lite.decode.translation import DecodeSettings
from t2t_lite.data import preparation
from t2t_lite.data.problem_base import ProblemError

EOS = 1
_FILES = ("train", "val", "test_2016_flickr")


def _fake_multi30k(raw_dir, overrides=None):
  """A tiny Multi30k-shaped raw_dir; `overrides` maps file name -> list of lines (or bytes)."""
  raw_dir.mkdir(exist_ok=True)
  lines = {"en": [f"a dog number {i} runs on the grass" for i in range(40)],
           "de": [f"ein hund nummer {i} läuft auf dem gras" for i in range(40)]}
  for name in _FILES:
    for lang in ("en", "de"):
      content = (overrides or {}).get(f"{name}.{lang}.gz", lines[lang])
      data = content if isinstance(content, bytes) else ("\n".join(content) + "\n").encode()
      with gzip.open(raw_dir / f"{name}.{lang}.gz", "wb") as f:
        f.write(data)
  return raw_dir


def _small_ende(**settings):
  return multi30k.Multi30kEnDe(vocab_size=300, **settings)


def test_every_problem_is_registered():
  assert {"algorithmic_copy", "algorithmic_reverse", "multi30k_ende", "multi30k_enfr",
          "wmt_ende", "wmt_enfr"} <= set(t2t_lite.list_problems())


def test_metrics_and_paper_decode_settings():
  assert t2t_lite.get_problem("wmt_ende").metric == "bleu"
  assert t2t_lite.get_problem("algorithmic_reverse").metric == "accuracy"
  wmt = t2t_lite.get_problem("wmt_enfr")
  assert DecodeSettings.resolve(wmt) == DecodeSettings(beam_size=4, alpha=0.6, extra_length=50)
  parsing_hparams = t2t_lite.get_hparams("transformer_parsing")
  assert DecodeSettings.resolve(wmt, parsing_hparams) == DecodeSettings(
      beam_size=21, alpha=0.3, extra_length=300)
  assert DecodeSettings.resolve(wmt, t2t_lite.get_hparams("transformer_base", "beam_size=2")) == (
      DecodeSettings(beam_size=2, alpha=0.6, extra_length=50))
  # A flag wins over hparams.json, which wins over the problem.
  assert DecodeSettings.resolve(wmt, parsing_hparams, alpha=1.0) == DecodeSettings(
      beam_size=21, alpha=1.0, extra_length=300)
  # A span parser's bracket offset: the problem's 0, its hparams set's (chosen on dev), a flag.
  spans, spans_hparams = (t2t_lite.get_problem("wsj_parsing_spans"),
                          t2t_lite.get_hparams("transformer_parsing_spans"))
  assert DecodeSettings.resolve(spans).bracket_offset == 0.0
  assert DecodeSettings.resolve(spans, spans_hparams).bracket_offset == 1.0
  assert DecodeSettings.resolve(spans, spans_hparams, bracket_offset=0.0).bracket_offset == 0.0


def test_vocabulary_settings_match_the_paper():
  ende, enfr = t2t_lite.get_problem("wmt_ende"), t2t_lite.get_problem("wmt_enfr")
  assert (ende.vocab_type, ende.vocab_size) == ("bpe", 37000)
  assert (enfr.vocab_type, enfr.vocab_size) == ("unigram", 32000)
  assert t2t_lite.get_problem("multi30k_ende").vocab_size == 8000
  with pytest.raises(ProblemError, match="did you mean 'vocab_size'"):
    multi30k.Multi30kEnDe(vocab_sise=10)


def test_multi30k_prepare_counts_every_split(multi30k_data, multi30k_dir):
  data_dir = multi30k_data["multi30k_ende"]
  problem = t2t_lite.get_problem("multi30k_ende")
  manifest = problem.manifest(data_dir)
  assert manifest["problem"] == "multi30k_ende" and manifest["vocab_size"] == 8000
  counts = {split: (s["pairs"], s["examples"], s["empty"])
            for split, s in manifest["splits"].items()}
  assert counts == {"train": (29000, 29000, 0), "dev": (1014, 1014, 0), "test": (1000, 1000, 0)}
  assert sum(manifest["splits"]["train"]["lengths"].values()) == 29000
  # Idempotent: a second prepare returns the same stats and rewrites nothing.
  vocab = os.path.join(data_dir, "vocab.model")
  before = os.path.getmtime(vocab)
  assert problem.prepare(data_dir, str(multi30k_dir)) == manifest["splits"]
  assert os.path.getmtime(vocab) == before
  with pytest.raises(ProblemError, match="prepared with"):
    multi30k.Multi30kEnDe(vocab_size=4000).prepare(data_dir, str(multi30k_dir))


def test_multi30k_text_and_eval_dataset_hold_the_val_set(multi30k_data, multi30k_dir):
  data_dir = multi30k_data["multi30k_ende"]
  problem = t2t_lite.get_problem("multi30k_ende")
  pairs = problem.text_pairs("validation", data_dir)
  assert pairs[0] == ("A group of men are loading cotton onto a truck",
                      "Eine Gruppe von Männern lädt Baumwolle auf einen Lastwagen")
  assert len(pairs) == 1014
  tok = problem.tokenizer(data_dir)
  hparams = t2t_lite.get_hparams("transformer_base")
  decoded = []
  for batch in problem.dataset("dev", data_dir, hparams, training=False):
    decoded += [(tok.decode(s), tok.decode(t))
                for s, t in zip(batch["inputs"].numpy(), batch["targets"].numpy())]
  assert sorted(decoded) == sorted((normalize(s), normalize(t)) for s, t in pairs)


def test_unprepared_data_dir_says_how_to_prepare(tmp_path):
  problem = t2t_lite.get_problem("multi30k_ende")
  hparams = t2t_lite.get_hparams("transformer_tiny")
  with pytest.raises(ProblemError) as error:
    problem.dataset("train", str(tmp_path / "nothing"), hparams, training=True)
  message = str(error.value)
  assert "no manifest.json" in message and "t2t-lite-datagen --problem=multi30k_ende" in message
  assert "\n" not in message
  with pytest.raises(ProblemError, match="vocab.model is missing"):
    problem.tokenizer(str(tmp_path))
  with pytest.raises(ProblemError, match="unknown split 'tset'"):
    problem.dataset("tset", str(tmp_path), hparams, training=True)


def test_missing_raw_files_are_named_with_where_to_get_them(tmp_path, monkeypatch):
  def offline(url, timeout=None):
    raise urllib.error.URLError("no network")

  monkeypatch.setattr(urllib.request, "urlopen", offline)
  raw_dir = _fake_multi30k(tmp_path / "raw")
  (raw_dir / "val.de.gz").unlink()
  with pytest.raises(ProblemError) as error:
    _small_ende().prepare(str(tmp_path / "data"), str(raw_dir))
  message = str(error.value)
  assert f"raw_dir {raw_dir} lacks val.de.gz and downloading them from " in message
  assert multi30k.URL in message and "(no network)" in message and "\n" not in message


def test_empty_and_overlong_pairs_are_counted_and_reported(tmp_path, caplog):
  english = [f"a dog number {i} runs on the grass" for i in range(40)]
  english[2] = "   "
  english[9] = "a very long caption " * 20
  raw_dir = _fake_multi30k(tmp_path / "raw", {"train.en.gz": english})
  problem = _small_ende()
  with caplog.at_level(logging.WARNING):
    stats = problem.prepare(str(tmp_path / "data"), str(raw_dir))
  train = stats["train"]
  assert (train["pairs"], train["examples"], train["empty"], train["empty_pairs"]) == (
      40, 39, 1, [3])
  assert "multi30k_ende train: skipped 1 of 40 pairs with an empty side (pair numbers [3])" in (
      caplog.text)
  assert problem.count_overlong("train", str(tmp_path / "data"), 30) == 1
  hparams = t2t_lite.get_hparams("transformer_tiny", "max_length=30")
  caplog.clear()
  with caplog.at_level(logging.WARNING):
    dataset = problem.dataset("train", str(tmp_path / "data"), hparams, training=False)
  assert "multi30k_ende train: dropping 1 of 39 examples longer than max_length=30" in (
      caplog.text)
  assert sum(len(batch["inputs"]) for batch in dataset) == 38


def test_unparallel_files_are_reported_with_file_and_line(tmp_path):
  german = [f"ein hund {i}" for i in range(41)]
  raw_dir = _fake_multi30k(tmp_path / "raw", {"val.de.gz": german})
  with pytest.raises(ProblemError) as error:
    _small_ende().prepare(str(tmp_path / "data"), str(raw_dir))
  assert str(error.value).startswith(f"{raw_dir}/val.de.gz:41: line has no counterpart in "
                                     f"{raw_dir}/val.en.gz (41 vs 40 lines")


def test_non_utf8_line_is_reported_with_file_and_line(tmp_path):
  raw_dir = _fake_multi30k(tmp_path / "raw", {"test_2016_flickr.en.gz": b"ok\nfine\n\xff\xfe\n"})
  with pytest.raises(ProblemError, match=r"test_2016_flickr\.en\.gz:3: not UTF-8"):
    _small_ende().prepare(str(tmp_path / "data"), str(raw_dir))


def test_algorithmic_problems_are_generated_deterministically(tmp_path):
  reverse = t2t_lite.get_problem("algorithmic_reverse")
  pairs = list(reverse.raw_pairs("train"))
  assert len(pairs) == 20000 and pairs[:50] == list(reverse.raw_pairs("train"))[:50]
  assert all(target.split() == source.split()[::-1] for source, target in pairs)
  assert pairs[0] == ("9 1 4 1 7", "7 1 4 1 9")  # Pinned: the same in every run.
  copy_pairs = list(t2t_lite.get_problem("algorithmic_copy").raw_pairs("dev"))
  assert len(copy_pairs) == 500 and all(s == t for s, t in copy_pairs)
  assert copy_pairs[0][0] != pairs[0][0]  # Different seed per split.
  tok = reverse.tokenizer()
  assert tok.vocab_size == 13 and tok.encode("3 9 4", add_eos=True) == [6, 12, 7, EOS]


def test_algorithmic_dataset_reverses(reverse_dir):
  """On the session's algorithmic_reverse (conftest's, made by Problem.prepare): prepare of a
  prepared data_dir returns the stats it was prepared with."""
  problem = t2t_lite.get_problem("algorithmic_reverse")
  stats = problem.prepare(reverse_dir)
  assert {split: s["examples"] for split, s in stats.items()} == {
      "train": 20000, "dev": 500, "test": 500}
  hparams = t2t_lite.get_hparams("transformer_tiny")
  batch = next(iter(problem.dataset("test", reverse_dir, hparams, training=False)))
  tok = problem.tokenizer(reverse_dir)
  for source, target in zip(batch["inputs"].numpy(), batch["targets"].numpy()):
    assert tok.decode(target).split() == tok.decode(source).split()[::-1]


def test_datagen_cli(tmp_path, capsys):
  assert datagen.main(["--problem=algorithmic_copy", f"--data_dir={tmp_path}"]) == 0
  summary = json.loads(capsys.readouterr().out)
  assert summary["splits"]["train"] == {"pairs": 20000, "examples": 20000, "empty": 0}
  with pytest.raises(SystemExit) as exit_info:
    datagen.main(["--problem=algorithmic_copy", f"--data_dir={tmp_path}", "--workers=0"])
  assert exit_info.value.code == 2
  assert capsys.readouterr().err == ("t2t-lite-datagen: error: --workers must be at least 1, not 0 "
                                     "(see t2t-lite-datagen --help)\n")
  assert datagen.main(["--list"]) == 0
  assert "multi30k_ende\n" in capsys.readouterr().out
  assert datagen.main(["--problem=multi30k_endee", f"--data_dir={tmp_path}"]) == 2
  error = capsys.readouterr().err
  assert error.startswith("t2t-lite-datagen: error: unknown problem 'multi30k_endee'; "
                          "did you mean 'multi30k_ende'")
  assert error.count("\n") == 1


@pytest.mark.parametrize("name", ["algorithmic_reverse", "multi30k_ende"])
def test_prepare_in_worker_processes_writes_the_same_data(name, tmp_path, monkeypatch):
  # Small chunks, so that the workers encode most of the fake corpora; spying on the pool
  # proves that they ran.
  monkeypatch.setattr(preparation, "_CHUNK", 3)
  monkeypatch.setattr(preparation, "INLINE_CHUNKS", 2)
  pools = []

  class SpiedPool(concurrent.futures.ProcessPoolExecutor):
    def __init__(self, *args, **kwargs):
      pools.append(self)
      super().__init__(*args, **kwargs)

  monkeypatch.setattr(concurrent.futures, "ProcessPoolExecutor", SpiedPool)
  raw_dir = str(_fake_multi30k(tmp_path / "raw")) if name == "multi30k_ende" else None
  problem = _small_ende() if name == "multi30k_ende" else t2t_lite.get_problem(name)
  # Dev and test fit in the chunks encoded in this process: only train starts workers (each
  # a fresh interpreter importing TensorFlow), the same pool code for every split.
  sizes = {"train": 40, "dev": 6, "test": 6}
  problem.raw_pairs = lambda split, raw_dir=None, pairs=problem.raw_pairs: (
      itertools.islice(pairs(split, raw_dir), sizes[split]))
  results = {}
  for workers in (1, 2):
    data_dir = tmp_path / f"workers_{workers}"
    stats = problem.prepare(str(data_dir), raw_dir, workers=workers)
    assert stats["train"]["examples"] == 40 and stats["test"]["examples"] == 6
    results[workers] = (stats, {path.name: path.read_bytes() for path in data_dir.iterdir()})
    assert len(pools) == {1: 0, 2: 1}[workers]  # With 2 workers, train's pool.
  assert results[1] == results[2]
