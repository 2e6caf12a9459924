"""WMT 2014 English-German and English-French (the paper's tasks), read through TFDS.

raw_dir is the TFDS data_dir (None = TFDS's default, ~/tensorflow_datasets); the data is
downloaded and prepared there by TFDS's own `wmt14_translate` builder on first use. Splits:
train; dev = newstest2013 (TFDS "validation"); test = newstest2014 (TFDS "test").
"""
import os
import socket
import urllib.parse

from t2t_lite.data.problem_base import DownloadError, Problem, ProblemError
from t2t_lite.registry import register_problem

_TFDS_SPLITS = {"train": "train", "dev": "validation", "test": "test"}
_PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY")


def _download_hosts(builder):
  """The hosts TFDS's WMT builder downloads from, for this language pair."""
  from tensorflow_datasets.translate import wmt  # The builder's own table of sources.
  source = builder.builder_config.language_pair[0]
  hosts = set()
  for names in builder.subsets.values():
    for name in names:
      for url in wmt.DATASET_MAP[name].get_url(source):
        hosts.add(urllib.parse.urlsplit(url).hostname)
  return sorted(hosts)


def _unreachable(hosts, timeout=10.0):
  """(host, reason) of the first host this machine cannot open a connection to, else None.

  Why check first: offline, TFDS's downloader retries each URL with back-off for minutes
  before it gives up. Skipped behind a proxy, where a direct connection says nothing.
  """
  if any(os.environ.get(name) for name in _PROXY_VARIABLES):
    return None
  for host in hosts:
    try:
      socket.create_connection((host, 80), timeout=timeout).close()
    except OSError as e:
      return host, e.strerror or str(e) or type(e).__name__
  return None


def _network_error(error):
  """The exception in `error`'s chain that is a failed connection, else None."""
  while error is not None:
    if isinstance(error, (ConnectionError, socket.gaierror, TimeoutError)) or type(
        error).__name__ in ("ConnectionError", "NewConnectionError", "NameResolutionError",
                            "MaxRetryError", "ConnectTimeout", "ReadTimeout"):
      return error
    error = error.__cause__ or error.__context__
  return None


class _Wmt14(Problem):
  tfds_name = None  # e.g. "wmt14_translate/de-en".
  source_lang = "en"
  target_lang = None
  vocab_sample_size = 1_000_000  # Pairs (from the start of train) the vocabulary learns from.
  train_shards = 16
  cache_in_memory = False

  def default_raw_dir(self, data_dir):
    return None

  def _builder(self, raw_dir):
    """The TFDS builder, its data downloaded and prepared in raw_dir if not there yet."""
    import tensorflow_datasets as tfds  # Slow to import; only needed here.
    where = raw_dir or "the TFDS default data_dir (~/tensorflow_datasets)"
    try:
      builder = tfds.builder(self.tfds_name, data_dir=raw_dir)
      if builder.is_prepared():
        return builder
      unreachable = _unreachable(_download_hosts(builder))
      if unreachable:
        raise DownloadError(
            f"{self.name}: cannot download WMT14 for TFDS {self.tfds_name}: no network "
            f"connection to {unreachable[0]} ({unreachable[1]}). Prepare it where the network "
            f"is reachable and pass that TFDS data_dir as --raw_dir") from None
      builder.download_and_prepare()
    except ProblemError:
      raise
    except ModuleNotFoundError as e:  # TFDS imports some modules only while preparing.
      raise ProblemError(
          f"{self.name}: TFDS needs the Python module {e.name!r} to prepare {self.tfds_name}, "
          f"and it is not installed: pip install {e.name}") from None
    except Exception as e:  # Report what it is, on one line, with its cause.
      network = _network_error(e)
      first_line = (str(network or e).splitlines() or [""])[0]
      if network is not None:
        raise DownloadError(
            f"{self.name}: downloading WMT14 for TFDS {self.tfds_name} into {where} failed: "
            f"network error ({type(network).__name__}: {first_line})") from None
      raise ProblemError(
          f"{self.name}: TFDS could not prepare {self.tfds_name} in {where}: "
          f"{type(e).__name__}: {first_line}") from None
    return builder

  def split_size(self, split, raw_dir):
    return self._builder(raw_dir).info.splits[_TFDS_SPLITS[split]].num_examples

  def raw_pairs(self, split, raw_dir):
    dataset = self._builder(raw_dir).as_dataset(split=_TFDS_SPLITS[split], shuffle_files=False)
    for example in dataset.as_numpy_iterator():
      yield (example[self.source_lang].decode("utf-8"),
             example[self.target_lang].decode("utf-8"))


@register_problem("wmt_ende")
class WmtEnDe(_Wmt14):
  """WMT14 English -> German (4.5M pairs), shared SentencePiece BPE vocabulary of ~37k."""
  name = "wmt_ende"
  tfds_name = "wmt14_translate/de-en"
  target_lang = "de"
  vocab_type = "bpe"
  vocab_size = 37000


@register_problem("wmt_enfr")
class WmtEnFr(_Wmt14):
  """WMT14 English -> French (36M pairs), SentencePiece unigram vocabulary of 32k."""
  name = "wmt_enfr"
  tfds_name = "wmt14_translate/fr-en"
  target_lang = "fr"
  vocab_type = "unigram"
  vocab_size = 32000
