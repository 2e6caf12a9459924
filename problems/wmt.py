"""WMT 2014 English-German and English-French (the paper's tasks), read through TFDS.

raw_dir is the TFDS data_dir (None = TFDS's default, ~/tensorflow_datasets); the data is
downloaded and prepared there by TFDS on first use. Splits: train; dev = newstest2013 (TFDS
"validation"); test = newstest2014 (TFDS "test").
"""
from t2t_lite.problem import Problem, ProblemError
from t2t_lite.registry import register_problem

_TFDS_SPLITS = {"train": "train", "dev": "validation", "test": "test"}


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
    builder = tfds.builder(self.tfds_name, data_dir=raw_dir)
    try:
      builder.download_and_prepare()
    except Exception as e:  # Network, disk or TFDS errors: report them on one line.
      reason = (str(e).splitlines() or [""])[0]
      raise ProblemError(
          f"{self.name}: TFDS {self.tfds_name} is not prepared in "
          f"{raw_dir or 'the TFDS default data_dir'} and could not be downloaded "
          f"({type(e).__name__}: {reason}); run where it can be downloaded, then pass that "
          "TFDS data_dir as --raw_dir") from None
    return builder

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
