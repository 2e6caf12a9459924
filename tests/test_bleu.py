"""The two BLEUs: the paper's (tensor2tensor's get_ende_bleu.sh) and sacreBLEU's, and how
t2t-lite-decode and the training log print them."""
import json
import os
import re
import subprocess
import sys

import pytest
import sacrebleu

from t2t_lite.decode import translation
from t2t_lite.data import scoring

# German pairs with hyphenated compounds, ASCII and German quotes, apostrophes, `&`, `|`,
# brackets, an abbreviation with inner dots and a number with a comma.
HYPOTHESES = [
    'Der "Fußball-Weltmeister" gewann das Spiel.',
    "Tom's Auto & Peters Rad-Tour kosten 5,300 Euro.",
    "Sie sagte: 'Wir fahren nach Baden-Württemberg.'",
    "Die E-Mail-Adresse steht z.B. im U-Bahn-Plan (Seite 3).",
    "Rot|Grün [oder] Blau-Gelb",
]
REFERENCES = [
    "Der „Fußball-Weltmeister“ gewann das Spiel.",
    "Toms Auto & Peters Fahrrad-Tour kostet 5,300 Euro.",
    "Sie sagte: 'Wir fahren heute nach Baden-Württemberg.'",
    "Die E-Mail-Adresse steht z.B. auf dem U-Bahn-Plan (Seite 3).",
    "Rot|Grün [oder] Blau-Gelb",
]
# Written out by hand from tokenizer.perl's rules (-l de, no -a): punctuation other than
# . ' ` , - split off; German splits ' on both sides; "5,300" and "z.B." stay whole; the
# sentence-final period splits; then & | < > ' " [ ] are escaped. Then the ##AT## split.
HYPOTHESES_TOKENIZED = [
    "Der &quot; Fußball ##AT##-##AT## Weltmeister &quot; gewann das Spiel .",
    "Tom &apos; s Auto &amp; Peters Rad ##AT##-##AT## Tour kosten 5,300 Euro .",
    "Sie sagte : &apos; Wir fahren nach Baden ##AT##-##AT## Württemberg . &apos;",
    "Die E ##AT##-##AT## Mail ##AT##-##AT## Adresse steht z.B. im "
    "U ##AT##-##AT## Bahn ##AT##-##AT## Plan ( Seite 3 ) .",
    "Rot &#124; Grün &#91; oder &#93; Blau ##AT##-##AT## Gelb",
]
REFERENCES_TOKENIZED = [
    "Der „ Fußball ##AT##-##AT## Weltmeister “ gewann das Spiel .",
    "Toms Auto &amp; Peters Fahrrad ##AT##-##AT## Tour kostet 5,300 Euro .",
    "Sie sagte : &apos; Wir fahren heute nach Baden ##AT##-##AT## Württemberg . &apos;",
    "Die E ##AT##-##AT## Mail ##AT##-##AT## Adresse steht z.B. auf dem "
    "U ##AT##-##AT## Bahn ##AT##-##AT## Plan ( Seite 3 ) .",
    "Rot &#124; Grün &#91; oder &#93; Blau ##AT##-##AT## Gelb",
]


def test_paper_tokenization_is_moses_then_compound_split():
  assert [scoring.paper_tokenize(h) for h in HYPOTHESES] == HYPOTHESES_TOKENIZED
  assert [scoring.paper_tokenize(r) for r in REFERENCES] == REFERENCES_TOKENIZED
  assert scoring.split_compounds("a-b-c") == "a ##AT##-##AT## b-c"  # Perl s///g: no overlap
  # EN-FR: French rules (the elided article keeps its apostrophe), no compound split.
  assert scoring.paper_tokenize("L'homme porte un T-shirt & un \"chapeau\".", "fr") == (
      "L&apos; homme porte un T-shirt &amp; un &quot; chapeau &quot; .")


def test_paper_bleu_equals_bleu_of_the_hand_tokenized_text():
  expected = sacrebleu.corpus_bleu(HYPOTHESES_TOKENIZED, [REFERENCES_TOKENIZED],
                                   tokenize="none", force=True, smooth_method="none")
  result = scoring.paper_bleu(HYPOTHESES, REFERENCES)
  assert result["bleu"] == pytest.approx(expected.score, abs=1e-9)
  assert round(result["bleu"], 2) == 68.59
  assert result["signature"].startswith("tokenizer.perl -l de (sacremoses ")
  assert "+ ##AT## compound split + multi-bleu (sacreBLEU nrefs:1|case:mixed|eff:no|tok:none|" \
         "smooth:none|version:" in result["signature"]
  detok = scoring.sacrebleu_bleu(HYPOTHESES, REFERENCES)
  assert detok["signature"].startswith("sacreBLEU nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp")
  assert round(detok["bleu"], 2) == 65.41
  fr = scoring.paper_bleu(HYPOTHESES, REFERENCES, lang="fr")
  assert "compound" not in fr["signature"] and fr["bleu"] != result["bleu"]


def test_paper_bleu_counts_compound_parts_as_multi_bleu():
  hypothesis, reference = "das Fußball-Spiel ist gut", "das Tennis-Spiel ist gut"
  # Split: 5/6 unigrams, 3/5 bigrams, 2/4 trigrams, 1/3 4-grams match, no brevity penalty.
  expected = 100 * (5 / 6 * 3 / 5 * 2 / 4 * 1 / 3) ** 0.25
  assert scoring.paper_bleu([hypothesis], [reference])["bleu"] == pytest.approx(expected)
  # multi-bleu.perl does not smooth: no matching 4-gram anywhere gives 0.
  assert scoring.paper_bleu(["a b c d"], ["a b c e"])["bleu"] == 0.0
  with pytest.raises(scoring.MetricError, match="1 hypotheses but 2 references"):
    scoring.paper_bleu(["a"], ["a", "b"])


def test_decode_prints_both_bleus_labelled(make_random_model_dir, tmp_path):
  words = ["Hund", "Fußball-Spiel", "Kind's", "&", "läuft", "\"schnell\"", "Rad-Tour", "."]
  model_dir = make_random_model_dir("bleu", words)
  sources = ["Hund läuft .", "Kind's Rad-Tour", "& Fußball-Spiel"]
  outputs, _ = translation.translate(model_dir, sources, beam_size=2, extra_length=5)
  # A random model's outputs are too short to score above 0: this checks that the CLI reports
  # the library's two scores with their labels.
  references = [o + " Rad-Tour" if i else o for i, o in enumerate(outputs)]
  (tmp_path / "in.txt").write_text("\n".join(sources) + "\n")
  (tmp_path / "ref.txt").write_text("\n".join(references) + "\n")
  run = subprocess.run(
      [os.path.join(os.path.dirname(sys.executable), "t2t-lite-decode"), "--model_dir",
       model_dir, "--input_file", str(tmp_path / "in.txt"), "--output_file",
       str(tmp_path / "out.txt"), "--reference_file", str(tmp_path / "ref.txt"),
       "--beam_size", "2", "--extra_length", "5", "--no_progress"],
      capture_output=True, text=True, timeout=300)
  assert run.returncode == 0, run.stderr
  assert (tmp_path / "out.txt").read_text().split("\n")[:-1] == outputs
  report = json.loads(run.stderr.strip().splitlines()[-1])
  assert report.pop("plan")["engine"] == "tensorflow"  # the decoding plan it ran (plan.py)
  assert report == dict(scoring.translation_scores(outputs, references, "de"), sentences=3)
  assert report["bleu_signature"].startswith("sacreBLEU nrefs:1|case:mixed|eff:no|tok:13a|")
  assert report["paper_bleu_signature"].startswith(
      "tokenizer.perl -l de (sacremoses ")
  assert "+ ##AT## compound split + multi-bleu (sacreBLEU " in report["paper_bleu_signature"]


def test_training_logs_both_bleus_with_signatures(multi30k_data, tmp_path):
  run = subprocess.run(
      [os.path.join(os.path.dirname(sys.executable), "t2t-lite-train"),
       "--problem=multi30k_ende", "--hparams=transformer_tiny",
       "--hparams_overrides=num_layers=1,d_model=32,d_ff=64,num_heads=2,batch_size=256",
       f"--data_dir={multi30k_data['multi30k_ende']}", f"--model_dir={tmp_path / 'model'}",
       "--train_steps=2", "--log_every=2", "--eval_every=2", "--eval_steps=1",
       "--eval_decode_examples=3", "--noxla"],
      capture_output=True, text=True, timeout=600)
  assert run.returncode == 0, run.stderr
  (line,) = [x for x in run.stdout.splitlines() if x.startswith("eval at step 2: ")]
  assert re.search(r"  dev_bleu \d+\.\d{4}  dev_bleu_signature sacreBLEU nrefs:1\|case:mixed\|"
                   r"eff:no\|tok:13a\|smooth:exp\|version:[\d.]+  dev_paper_bleu \d+\.\d{4}  "
                   r"dev_paper_bleu_signature tokenizer\.perl -l de \(sacremoses [\d.]+\) \+ "
                   r"##AT## compound split \+ multi-bleu \(sacreBLEU nrefs:1\|case:mixed\|eff:no\|"
                   r"tok:none\|smooth:none\|version:[\d.]+\)$", line), line
