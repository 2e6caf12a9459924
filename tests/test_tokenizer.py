"""Tokenizers: lossless round trips, Python == in-graph, reserved ids, SavedModel use."""
import gzip

import numpy as np
import pytest
from conftest import normalize
import tensorflow as tf

import t2t_lite
from t2t_lite.data import tokenizers
from t2t_lite.data.tokenizers import EOS_ID, PAD_ID, UNK_ID


def _val_lines(multi30k_dir, lang):
  with gzip.open(multi30k_dir / f"val.{lang}.gz", "rt", encoding="utf-8") as f:
    return f.read().split("\n")[:-1]


def _tokenizer(multi30k_data, name):
  return t2t_lite.get_problem(name).tokenizer(multi30k_data[name])


def test_normalize_is_nfkc_and_space_collapsing():
  assert normalize("  Un  homme\u00a0à  vélo ") == "Un homme à vélo"
  assert normalize("ﬁne ½") == "fine 1⁄2"
  assert normalize("") == ""


@pytest.mark.parametrize("name,lang", [
    ("multi30k_ende", "en"), ("multi30k_ende", "de"), ("multi30k_enfr", "en"),
    ("multi30k_enfr", "fr")])
def test_every_multi30k_val_sentence_round_trips(multi30k_dir, multi30k_data, name, lang):
  tok = _tokenizer(multi30k_data, name)
  lines = _val_lines(multi30k_dir, lang)
  assert len(lines) == 1014
  for line in lines:
    ids = tok.encode(line)
    assert UNK_ID not in ids and PAD_ID not in ids and EOS_ID not in ids
    assert tok.decode(ids) == normalize(line)
  if lang == "fr":  # The French val set has leading and doubled spaces: normalised away.
    assert sum(line != normalize(line) for line in lines) > 0


def test_text_never_seen_in_training_round_trips_through_bytes(multi30k_data):
  tok = _tokenizer(multi30k_data, "multi30k_ende")
  text = "日本語 ☃ Ωmega \t tab"
  assert UNK_ID not in tok.encode(text)
  assert tok.decode(tok.encode(text)) == text


@pytest.mark.parametrize("lang", ["en", "de"])
def test_in_graph_tokenize_matches_python(multi30k_dir, multi30k_data, lang):
  tok = _tokenizer(multi30k_data, "multi30k_ende")
  lines = _val_lines(multi30k_dir, lang)
  for add_eos in (False, True):
    graph_ids = tok.tokenize(tf.constant(lines), add_eos=add_eos).to_list()
    assert graph_ids == [tok.encode(line, add_eos=add_eos) for line in lines]
  assert tok.tokenize(tf.constant(lines[0])).numpy().tolist() == tok.encode(lines[0])


def test_in_graph_detokenize_matches_python(multi30k_dir, multi30k_data):
  tok = _tokenizer(multi30k_data, "multi30k_ende")
  lines = _val_lines(multi30k_dir, "de")
  ids = tok.tokenize(tf.constant(lines), add_eos=True).to_tensor()  # [B, T], 0-padded.
  graph_text = [t.decode("utf-8") for t in tok.detokenize(ids).numpy()]
  assert graph_text == [tok.decode(row) for row in ids.numpy()]
  assert graph_text == [normalize(line) for line in lines]
  # Arbitrary model outputs (byte pieces, invalid UTF-8 sequences, PAD, EOS) too.
  random_ids = np.random.default_rng(0).integers(0, tok.vocab_size, size=(300, 12))
  graph_text = [t.decode("utf-8") for t in tok.detokenize(tf.constant(random_ids)).numpy()]
  assert graph_text == [tok.decode(row) for row in random_ids]


def test_decoding_stops_at_eos_and_skips_padding(multi30k_data):
  tok = _tokenizer(multi30k_data, "multi30k_ende")
  ids = tok.encode("A man rides a bike.")
  noisy = [PAD_ID] + ids[:2] + [PAD_ID] + ids[2:] + [EOS_ID] + ids
  assert tok.decode(noisy) == "A man rides a bike."
  assert tok.detokenize(tf.constant(noisy)).numpy().decode() == "A man rides a bike."
  assert tok.encode("A man rides a bike.", add_eos=True) == ids + [EOS_ID]


def test_reserved_ids_and_vocabulary_size(multi30k_data):
  for name in ("multi30k_ende", "multi30k_enfr"):
    tok = _tokenizer(multi30k_data, name)
    assert tok.vocab_size == 8000
    assert tok.tokenize(tf.constant(["<pad> </s>"])).to_list()[0][0] not in (PAD_ID, EOS_ID)


def test_sentencepiece_model_goes_through_gfile(tmp_path):
  path = "ram://t2t_lite_test/vocab.model"
  texts = ["a cat sat on the mat", "der Hund lief", "le chat est noir"] * 20
  tok = tokenizers.train_sentencepiece(texts, path, vocab_size=8000, model_type="unigram")
  assert tok.vocab_size < 8000  # A soft limit: a tiny corpus gets a smaller vocabulary.
  reloaded = tokenizers.SentencePieceTokenizer.load(path)
  assert reloaded.encode("the cat") == tok.encode("the cat")
  assert reloaded.decode(tok.encode("le chien")) == "le chien"
  with pytest.raises(ValueError, match="model_type"):
    tokenizers.train_sentencepiece(texts, str(tmp_path / "v.model"), 100, model_type="word")


def test_word_tokenizer_exact_ids():
  tok = tokenizers.WordTokenizer([str(i) for i in range(10)])
  assert tok.vocab_size == 13
  assert tok.encode("3 9 4") == [6, 12, 7]
  assert tok.encode("3 x", add_eos=True) == [6, UNK_ID, EOS_ID]
  assert tok.decode([7, 12, 6, EOS_ID, 5, 0]) == "4 9 3"
  ids = tok.tokenize(tf.constant(["3 9 4", "0"]), add_eos=True)
  assert ids.to_list() == [[6, 12, 7, EOS_ID], [3, EOS_ID]]
  text = tok.detokenize(tf.constant([[7, 12, 6, EOS_ID, 9], [3, 0, 0, 0, 0]])).numpy()
  assert text.tolist() == [b"4 9 3", b"0"]


def test_tokenizers_work_inside_a_saved_model(multi30k_data, tmp_path):
  module = tf.Module()
  module.sp = _tokenizer(multi30k_data, "multi30k_ende")
  module.words = tokenizers.WordTokenizer(["a", "b"])

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
  def round_trip(text):
    ids = module.sp.tokenize(text, add_eos=True).to_tensor()
    words = module.words.detokenize(module.words.tokenize(text).to_tensor())
    return {"ids": ids, "text": module.sp.detokenize(ids), "words": words}

  module.round_trip = round_trip
  tf.saved_model.save(module, str(tmp_path))
  loaded = tf.saved_model.load(str(tmp_path))
  out = loaded.round_trip(tf.constant(["Two dogs  play.", "a b c"]))
  expected = [module.sp.encode("Two dogs  play.", add_eos=True), module.sp.encode("a b c", True)]
  assert [[i for i in row if i] for row in out["ids"].numpy().tolist()] == expected
  assert out["text"].numpy().tolist() == [b"Two dogs play.", b"a b c"]
  assert out["words"].numpy().tolist() == [b"<unk> <unk> <unk>", b"a b <unk>"]


def test_pieces_that_would_go_on_a_word_are_told_by_their_text_or_their_byte(multi30k_data):
  # What may not follow a target prefix or a phrase (continues_word): a piece without "▁" that
  # starts with a letter or digit, and the byte-fallback pieces of letters, digits and of the
  # bytes of multi-byte characters, but not those of punctuation or space.
  tok = _tokenizer(multi30k_data, "multi30k_ende")
  pieces = [tok._sp.id_to_piece(i) for i in range(tok.vocab_size)]
  ids = {piece: i for i, piece in enumerate(pieces)}
  continues = tok.continues_word(tf.range(tok.vocab_size)).numpy()
  expected = {"<0x44>": True, "<0x7A>": True, "<0x30>": True, "<0xC3>": True, "<0x2E>": False,
              "<0x20>": False, "<0x5B>": False, "<0x7B>": False}
  assert {piece: bool(continues[ids[piece]]) for piece in expected} == expected
  words = [p for p in pieces if p.startswith("▁") and len(p) > 1]
  inner = [p for p in pieces if not p.startswith(("▁", "<")) and p[0].isalnum()]
  assert words and inner and not continues[[ids[p] for p in words]].any()
  assert continues[[ids[p] for p in inner]].all()
