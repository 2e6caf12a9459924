"""Text to ids and back without TensorFlow, as the run's tokenizers do in the graph
(t2t_lite/data/tokenizers.py; tests/test_litert_runtime.py checks them against it): blank lines
as translation._BLANK sees them, invalid UTF-8 replaced by U+FFFD, SentencePiece through the
`sentencepiece` package from the export's .model, and the words of a fixed list split at ASCII
whitespace (tf.strings.split's), unknown words UNK.
"""
import re

from t2t_lite.litert.exported import LiteRTError, MissingRuntime

PAD_ID, EOS_ID, UNK_ID = 0, 1, 2  # tokenizers.py's (every vocabulary reserves them)
_RESERVED = ("<pad>", "</s>", "<unk>")
_ASCII_SPACE = re.compile(r"[ \t\n\v\f\r]+")


def is_blank(line):
  """Whether a line is blank (translation._BLANK: whitespace as Python's str.isspace())."""
  return not line.strip()


def valid_utf8(raw):
  """bytes or str -> str, invalid UTF-8 (or a lone surrogate) replaced by U+FFFD, as the graph's
  unicode_transcode(errors="replace") does."""
  if isinstance(raw, str):
    raw = raw.encode("utf-8", errors="surrogatepass")
  return raw.decode("utf-8", errors="replace")


def _until_eos(ids):
  """Ids before the first EOS, without PAD (tokenizers._truncate)."""
  out = []
  for i in ids:
    i = int(i)
    if i == EOS_ID:
      break
    if i != PAD_ID:
      out.append(i)
  return out


class SentencePiece:
  """An export's SentencePiece model (the run's vocabulary file, copied beside the model)."""

  def __init__(self, path):
    try:
      import sentencepiece as spm
    except ImportError:
      raise MissingRuntime("the LiteRT engine needs sentencepiece: pip install -e "
                           "'.[litert]'") from None
    try:
      self._sp = spm.SentencePieceProcessor(model_file=path)
    except (OSError, RuntimeError) as e:
      raise LiteRTError(f"{path} is not a SentencePiece model: {' '.join(str(e).split())}"
                        ) from None
    if self._sp.pad_id() != PAD_ID or self._sp.eos_id() != EOS_ID:
      raise LiteRTError(f"{path} has pad_id={self._sp.pad_id()}, eos_id={self._sp.eos_id()}; "
                        f"t2t-lite's vocabularies have {PAD_ID} and {EOS_ID}")

  @property
  def vocab_size(self):
    return self._sp.get_piece_size()

  def encode(self, texts):
    """list[str] -> list[list[int]] without EOS."""
    return self._sp.encode(list(texts), num_threads=0) if texts else []

  def decode(self, ids):
    """int ids (to the first EOS, PAD dropped) -> str."""
    data = self._sp.decode(_until_eos(ids), out_type=bytes)
    return valid_utf8(data)


class Words:
  """A fixed word list (tokenizers.WordTokenizer): the export's file holds one word a line in id
  order, with or without the reserved <pad>, </s>, <unk> first."""

  def __init__(self, path):
    try:
      with open(path, encoding="utf-8") as f:
        words = f.read().split("\n")
    except (OSError, UnicodeDecodeError) as e:
      raise LiteRTError(f"{path} is not a word vocabulary: {e}") from None
    if words and words[-1] == "":
      words.pop()
    if tuple(words[:len(_RESERVED)]) != _RESERVED:
      words = list(_RESERVED) + words
    if len(set(words)) != len(words):
      raise LiteRTError(f"{path} has duplicate words")
    self.vocabulary = words
    self._ids = {w: i for i, w in enumerate(words)}

  @property
  def vocab_size(self):
    return len(self.vocabulary)

  def encode(self, texts):
    return [[self._ids.get(w, UNK_ID) for w in _ASCII_SPACE.split(text) if w] for text in texts]

  def decode(self, ids):
    return " ".join(self.vocabulary[i] for i in _until_eos(ids))


def tokenizer(kind, path):
  """The export's tokenizer: kind "sentencepiece" or "words" (export_dir checked which)."""
  return SentencePiece(path) if kind == "sentencepiece" else Words(path)
