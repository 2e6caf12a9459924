"""The paper's hparams sets: base, big, parsing, every Table 3 variant, and a tiny one for tests.

Each set is a few lines over `transformer_base`, as in tensor2tensor, but with nothing hidden:
`t2t-lite-train --list` prints them and every run saves the full set as hparams.json.
"""
from t2t_lite.hyperparams import HParams
from t2t_lite.registry import register_hparams


@register_hparams()
def transformer_base():
  """Section 3 / 5: N=6, d_model=512, d_ff=2048, h=8, P_drop=0.1, eps_ls=0.1 (65M params)."""
  return HParams()


@register_hparams()
def transformer_big():
  """Table 3 'big': d_model=1024, d_ff=4096, h=16, P_drop=0.3 (213M params), EN-DE."""
  return transformer_base().replace(d_model=1024, d_ff=4096, num_heads=16, dropout=0.3)


@register_hparams()
def transformer_big_enfr():
  """Big model for EN-FR: the paper used P_drop=0.1 instead of 0.3 (section 6.1)."""
  return transformer_big().replace(dropout=0.1)


@register_hparams()
def transformer_parsing():
  """Section 6.3: 4 layers, d_model=1024, rest as base; beam 21, alpha 0.3, max = input+300."""
  return transformer_base().replace(
      num_layers=4, d_model=1024, num_heads=16, beam_size=21, alpha=0.3, extra_length=300,
      max_length=512)


@register_hparams()
def transformer_parsing_small():
  """wsj_parsing on a ~3,000-sentence treebank sample (NLTK's) trained on a small CPU: 2+2
  layers of d_model 256 with the source pointer (pointer.py), ~4k-token batches, input + 300 as
  the paper. The pointer tells the decoder which word it has reached, which 3,000 trees teach
  the paper's attention slowly: dev F1 69.1 against 56.2 without it at step 1,000 of the
  t2t-lite-tune study, and 2 layers make ~1.3x the steps a minute of 3. It learns in 10
  minutes what the 3+3 set did in 40, and then overfits: dropout 0.3 and attention dropout
  0.1 keep its dev F1 rising to the end of 40 minutes (72.5 against ~71 at dropout 0.1); with
  them the problem's default every-tag targets (target_tags=all) parse best (73.7), and word
  dropout 0.5 (rare words trained as unknown ones) a little better (74.1; docs/parsing.md).
  Beam and alpha were chosen on the dev split; the paper's beam 21 would multiply a CPU's
  decoding time."""
  return transformer_base().replace(
      num_layers=2, d_model=256, d_ff=1024, num_heads=4, dropout=0.3, attention_dropout=0.1,
      word_dropout=0.5, batch_size=4096, warmup_steps=800, beam_size=8, alpha=0.6,
      extra_length=300, max_length=256, source_pointer=True)


@register_hparams()
def transformer_parsing_spans():
  """wsj_parsing_spans on the treebank sample: a span-classifying parser (an encoder of 4
  layers of d_model 256 that labels every span, CKY for the tree; modeling/span_parser.py),
  which a scratch probe of the same design put 4 F1 above transformer_parsing_small in the same
  40 CPU minutes (docs/parsing.md). Its targets grow as the square of a sentence's length:
  max_length bounds them (a 125-word sentence has 8,000), and batches of 20,000 of them hold
  the probe's ~1,500 words. Learning rate: the probe's peak of 8e-4 after 300 steps. Bracket
  offset 1.0: its precision ran 7 points above its recall, and on all 406 dev sentences of a
  40-minute run 1.0 scored 0.66 F1 above 0 (0.5 and 1.5 less). In 15-minute trials of
  t2t-lite-tune neither weight decay with FFN dropout nor d_model 512 beat it on dev
  (docs/benchmarks.md). Dropout 0.3: since the span head's step got faster, 40 minutes are ~11k
  steps, and its dev loss rose from step 2,000 at 0.2; 0.3 scored 80.88 on all of dev against
  80.65 in the 40-minute bench. Word dropout 0.85: ~200 epochs overfit the words above all (the
  dev loss fell as it rose); on all of dev 0.3 / 0.5 / 0.7 / 0.85 scored 80.88 / 81.31 / 81.99
  / 83.01 in that bench (0.85 drops a word seen once 85% of the time, "the" 0.2%)."""
  return transformer_base().replace(
      architecture="span_parser", num_layers=4, d_model=256, d_ff=1024, num_heads=4,
      dropout=0.3, attention_dropout=0.1, label_smoothing=0.0, word_dropout=0.85,
      learning_rate=0.22, warmup_steps=300, batch_size=20000, max_length=8192, beam_size=1,
      alpha=0.0, extra_length=300, bracket_offset=1.0)


@register_hparams()
def transformer_multi30k():
  """multi30k_ende (29k pairs) in 40 minutes of a 2-core CPU, the best dev BLEU of the
  t2t-lite-tune studies (docs/benchmarks.md): 2+2 layers of d_model 256, small enough to see
  the corpus ~35 times in those minutes (3+3 makes a fifth fewer steps and scored lower on
  dev), with the strong dropout, label smoothing and weight decay a corpus that small wants,
  and an 8k vocabulary (over 4k on dev). Dropout 0.2: the studies picked 0.3, but since bias
  gradients are kept in float32, 0.2 leads it on dev for two seeds on two AMD EPYC kinds (not
  measured on an Intel). Alpha 1.5: these models' outputs run short, and it beat 0.6 by 0.75
  BLEU on all of the dev split. Train it with an EMA of the weights (0.998). Where one core
  trains it ~3,500 steps in the budget, two of it trained side by side (a core each) and
  decoded as an ensemble beat one on both cores: bench/multi30k_quality.sh's MODELS."""
  return transformer_base().replace(
      num_layers=2, d_model=256, d_ff=1024, num_heads=4, dropout=0.2, attention_dropout=0.1,
      label_smoothing=0.2, weight_decay=0.1, learning_rate=1.0, warmup_steps=500,
      batch_size=4096, beam_size=4, alpha=1.5)


@register_hparams()
def transformer_tiny():
  """A small model for tests and demos: trains in seconds on a CPU."""
  return transformer_base().replace(
      num_layers=2, d_model=64, d_ff=256, num_heads=4, dropout=0.0, label_smoothing=0.0,
      warmup_steps=100, learning_rate=0.5, batch_size=2048, max_length=64)


# Table 3 of the paper: one set per row, named after the row and what it changes.
_TABLE3 = {
    # (A) heads, with h x d_k = 512 (computation constant).
    "transformer_base_a_h1": dict(num_heads=1, d_k=512, d_v=512),
    "transformer_base_a_h4": dict(num_heads=4, d_k=128, d_v=128),
    "transformer_base_a_h16": dict(num_heads=16, d_k=32, d_v=32),
    "transformer_base_a_h32": dict(num_heads=32, d_k=16, d_v=16),
    # (B) smaller attention key size only (d_v stays 64).
    "transformer_base_b_dk16": dict(d_k=16),
    "transformer_base_b_dk32": dict(d_k=32),
    # (C) model size.
    "transformer_base_c_n2": dict(num_layers=2),
    "transformer_base_c_n4": dict(num_layers=4),
    "transformer_base_c_n8": dict(num_layers=8),
    "transformer_base_c_d256": dict(d_model=256, d_k=32, d_v=32),
    "transformer_base_c_d1024": dict(d_model=1024, d_k=128, d_v=128),
    "transformer_base_c_ff1024": dict(d_ff=1024),
    "transformer_base_c_ff4096": dict(d_ff=4096),
    # (D) dropout and label smoothing.
    "transformer_base_d_drop0": dict(dropout=0.0),
    "transformer_base_d_drop2": dict(dropout=0.2),
    "transformer_base_d_ls0": dict(label_smoothing=0.0),
    "transformer_base_d_ls2": dict(label_smoothing=0.2),
    # (E) learned positional embedding instead of sinusoids.
    "transformer_base_e_learned": dict(position_encoding="learned"),
}


def _table3_set(changes):
  return lambda: transformer_base().replace(**changes)


for _name, _changes in _TABLE3.items():
  register_hparams(_name)(_table3_set(_changes))
