"""Tokenizers that run the same in Python and in-graph (tf.data, exported SavedModels).

Every vocabulary reserves id 0 = PAD and id 1 = EOS (and id 2 = UNK).

Two kinds:
  SentencePieceTokenizer  subword vocabulary trained by `train_sentencepiece` (BPE or unigram);
                          Python side = the `sentencepiece` package, graph side =
                          `tensorflow_text.SentencepieceTokenizer` built from the same model proto.
  WordTokenizer           a fixed, tiny word list (the algorithmic problems).

Both have `encode(str) -> list[int]`, `decode(list[int]) -> str`, `tokenize(tf.string [B]) ->
int32 RaggedTensor [B, (T)]`, `detokenize(int32 [B, T]) -> tf.string [B]`, `vocab_size` and
`pieces()`.
`decode` / `detokenize` stop at the first EOS and ignore PAD, so model outputs decode directly.

Losslessness: `decode(encode(s)) == normalize(s)`, where `normalize` is NFKC, then runs of
spaces collapsed to one and leading/trailing spaces removed (SentencePiece's "nfkc" rule with
`remove_extra_whitespaces`). Characters outside the learned pieces are not mapped to UNK: the
models use `byte_fallback`, so any UTF-8 text round-trips.
"""
import io
import os
import re

import sentencepiece as spm
import tensorflow as tf
import tensorflow_text as tf_text

from t2t_lite.errors import T2TLiteError

PAD_ID = 0
EOS_ID = 1
UNK_ID = 2
_RESERVED = ("<pad>", "</s>", "<unk>")
# A piece that goes on the word before it (SentencePieceTokenizer.continues_word): a letter or
# digit first, or the byte-fallback piece of an ASCII digit (0x30-0x39), letter (0x41-0x5A,
# 0x61-0x7A) or of any byte of a multi-byte UTF-8 character (0x80-0xFF).
_CONTINUES_WORD = (r"[\p{L}\p{N}].*|<0x(3[0-9]|4[1-9A-F]|5[0-9A]|6[1-9A-F]|7[0-9A]|"
                   r"[89A-F][0-9A-F])>")


def _truncate(ids):
  """Drops PAD and everything from the first EOS on: a list of ints."""
  ids = [int(i) for i in ids]
  if EOS_ID in ids:
    ids = ids[:ids.index(EOS_ID)]
  return [i for i in ids if i != PAD_ID]


def _truncate_tensor(ids):
  """int32 [B, T] (dense or ragged) -> ragged [B, (T')] without PAD and from the first EOS on."""
  if isinstance(ids, tf.RaggedTensor):
    ids = ids.to_tensor(default_value=PAD_ID)
  ids = tf.cast(ids, tf.int32)
  before_eos = tf.equal(tf.cumsum(tf.cast(tf.equal(ids, EOS_ID), tf.int32), axis=-1), 0)
  return tf.ragged.boolean_mask(ids, before_eos & tf.not_equal(ids, PAD_ID))


class _Tokenizer(tf.Module):
  """Shared in-graph API; subclasses implement `_tokenize` and `_detokenize` on batches."""

  def tokenize(self, strings, add_eos=False):
    """tf.string [B] -> int32 ragged [B, (T)]; a scalar string -> int32 [T]."""
    strings = tf.convert_to_tensor(strings, tf.string)
    ids = self._tokenize(tf.reshape(strings, [-1]), add_eos)  # [B, (T)]
    return ids[0] if strings.shape.rank == 0 else ids

  def detokenize(self, ids):
    """int [B, T] (dense or ragged) -> tf.string [B]; int [T] -> a scalar string.

    Ids from the first EOS on, and PAD anywhere, are ignored."""
    if not isinstance(ids, tf.RaggedTensor):
      ids = tf.convert_to_tensor(ids)
    if ids.shape.rank == 1:
      return self._detokenize(_truncate_tensor(ids[tf.newaxis]))[0]
    return self._detokenize(_truncate_tensor(ids))  # [B]

  def encode_batch(self, texts, add_eos=False):
    """list[str] -> list[list[int]]."""
    return [self.encode(text, add_eos) for text in texts]


class SentencePieceTokenizer(_Tokenizer):
  """A trained SentencePiece model; in-graph ops are tf-text's, built from the same proto."""

  def __init__(self, model_proto, name=None):
    super().__init__(name=name)
    self._sp = spm.SentencePieceProcessor(model_proto=model_proto)
    self._tf_sp = tf_text.SentencepieceTokenizer(model=model_proto, out_type=tf.int32)
    self._tf_sp_eos = tf_text.SentencepieceTokenizer(
        model=model_proto, out_type=tf.int32, add_eos=True)
    if self._sp.pad_id() != PAD_ID or self._sp.eos_id() != EOS_ID:
      raise ValueError(f"SentencePiece model has pad_id={self._sp.pad_id()}, "
                       f"eos_id={self._sp.eos_id()}; expected {PAD_ID} and {EOS_ID}")

  def __reduce__(self):
    # Pickled as its model proto (its TF objects do not pickle): prepare's worker processes
    # rebuild the tokenizer from it.
    return type(self), (self._sp.serialized_model_proto(),)

  @classmethod
  def load(cls, path):
    with tf.io.gfile.GFile(path, "rb") as f:
      return cls(f.read())

  @property
  def vocab_size(self):
    return self._sp.get_piece_size()

  def pieces(self):
    """Every id's piece, in id order (what a fine-tuned run's vocabulary is matched by)."""
    return [self._sp.id_to_piece(i) for i in range(self.vocab_size)]

  def word_starts(self, ids):
    """int32 [N, T] -> bool [N, T]: whether each piece begins a word (its "▁"), in the graph:
    how word alignments map pieces back to words."""
    return tf.strings.regex_full_match(self._tf_sp.id_to_string(ids), "\u2581.*")

  def continues_word(self, ids):
    """int32 [...] -> bool [...]: whether each piece would go on the word before it (no "▁",
    and a letter or digit first: "im" after "▁Be"; or a byte-fallback piece of an ASCII letter
    or digit, or of a byte of a multi-byte character, most of which are letters: "<0x44>" is
    "D"), in the graph: what may not follow a target prefix or a phrase of whole words."""
    return tf.strings.regex_full_match(self._tf_sp.id_to_string(ids), _CONTINUES_WORD)

  def encode(self, text, add_eos=False):
    return self._sp.encode(text, add_eos=add_eos)

  def encode_batch(self, texts, add_eos=False):
    """Many strings at once, multi-threaded."""
    return self._sp.encode(list(texts), add_eos=add_eos, num_threads=0)

  def decode(self, ids):
    return self._sp.decode(_truncate(ids))

  def _tokenize(self, strings, add_eos):
    return (self._tf_sp_eos if add_eos else self._tf_sp).tokenize(strings)

  def _detokenize(self, ids):
    return self._tf_sp.detokenize(ids)


class WordTokenizer(_Tokenizer):
  """A fixed word list; words are separated by single spaces. Unknown words map to UNK."""

  def __init__(self, words, name=None):
    super().__init__(name=name)
    self.vocabulary = list(_RESERVED) + list(words)
    if len(set(self.vocabulary)) != len(self.vocabulary):
      raise ValueError(f"duplicate words in vocabulary {self.vocabulary}")
    self._ids = {w: i for i, w in enumerate(self.vocabulary)}
    self._table = tf.lookup.StaticHashTable(
        tf.lookup.KeyValueTensorInitializer(
            tf.constant(self.vocabulary), tf.range(len(self.vocabulary), dtype=tf.int32)),
        default_value=UNK_ID)
    self._words = tf.constant(self.vocabulary)

  def __reduce__(self):  # As SentencePieceTokenizer's: the words rebuild it.
    return type(self), (list(self.vocabulary[len(_RESERVED):]),)

  @property
  def vocab_size(self):
    return len(self.vocabulary)

  def pieces(self):
    """Every id's word, in id order."""
    return list(self.vocabulary)

  def word_starts(self, ids):
    """int32 [N, T] -> bool [N, T]: every token is a word."""
    return tf.ones_like(ids, tf.bool)

  def continues_word(self, ids):
    """int32 [...] -> bool [...]: no token goes on the word before it."""
    return tf.zeros_like(ids, tf.bool)

  def encode(self, text, add_eos=False):
    ids = [self._ids.get(w, UNK_ID) for w in text.split()]
    return ids + [EOS_ID] if add_eos else ids

  def decode(self, ids):
    return " ".join(self.vocabulary[i] for i in _truncate(ids))

  def _tokenize(self, strings, add_eos):
    ids = tf.ragged.map_flat_values(self._table.lookup, tf.strings.split(strings))  # [B, (T)]
    if add_eos:
      eos = tf.fill([tf.shape(strings)[0], 1], EOS_ID)
      ids = tf.concat([ids, tf.RaggedTensor.from_tensor(eos)], axis=1)
    return ids

  def _detokenize(self, ids):
    words = tf.ragged.map_flat_values(tf.gather, self._words, ids)  # [B, (T)]
    return tf.strings.reduce_join(words, axis=-1, separator=" ")


class VocabularyError(T2TLiteError, ValueError):
  """A vocabulary that cannot be learned from the text given (one-line message)."""


class _Texts:
  """The non-blank texts of an iterable, keeping the exception that ended them: SentencePiece
  calls the iterator from C++ and wraps anything it raises (a malformed raw file's one-line
  ProblemError) in a RuntimeError of its own."""

  def __init__(self, texts):
    self._texts, self.error = texts, None

  def __iter__(self):
    try:
      for text in self._texts:
        if text.strip():
          yield text
    except Exception as e:
      self.error = e
      raise


def train_sentencepiece(texts, path, vocab_size, model_type="bpe", max_sentences=None):
  """Trains a SentencePiece model on an iterable of strings; writes it to `path` (gfile).

  `vocab_size` is a soft limit (a tiny corpus gets a smaller vocabulary instead of an error);
  `max_sentences` makes SentencePiece sample that many sentences at random. Returns the
  loaded `SentencePieceTokenizer`. An error raised by `texts` is raised as it is; a vocab_size
  below what the text needs (its characters, 256 byte pieces, PAD / EOS / UNK) is a
  VocabularyError saying how many pieces it needs.
  """
  if model_type not in ("bpe", "unigram"):
    raise ValueError(f"model_type must be 'bpe' or 'unigram', got {model_type!r}")
  texts = _Texts(texts)
  proto = io.BytesIO()
  try:
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(texts), model_writer=proto, vocab_size=vocab_size,
        model_type=model_type, pad_id=PAD_ID, eos_id=EOS_ID, unk_id=UNK_ID, bos_id=-1,
        normalization_rule_name="nfkc", remove_extra_whitespaces=True, byte_fallback=True,
        character_coverage=1.0, hard_vocab_limit=False, input_sentence_size=max_sentences or 0,
        shuffle_input_sentence=True, max_sentence_length=16384, num_threads=2, minloglevel=2)
  except RuntimeError as e:
    if texts.error is not None:
      raise texts.error from None
    needed = re.search(r"smaller than required_chars\. (\d+) vs (\d+)", str(e))
    if needed:
      raise VocabularyError(
          f"vocab_size={vocab_size} is smaller than the {needed.group(2)} pieces a SentencePiece "
          f"vocabulary of this text needs (each of its characters, 256 byte pieces, PAD, EOS, "
          f"UNK): use vocab_size >= {needed.group(2)}") from None
    raise
  if os.path.dirname(path):
    tf.io.gfile.makedirs(os.path.dirname(path))
  with tf.io.gfile.GFile(path, "wb") as f:
    f.write(proto.getvalue())
  return SentencePieceTokenizer(proto.getvalue())
