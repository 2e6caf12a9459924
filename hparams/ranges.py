"""Ranged hparams: the search spaces t2t-lite-tune searches (tensor2tensor's
`@registry.register_ranged_hparams`). Each is a few lines beside the hparams set it ranges over:
a field's choices, or its int or float range (log=True: log-uniform, for rates and sizes that
matter by their ratio). Training options (ema_decay, ...) range too. `t2t-lite-tune --list`
prints them.
"""
from t2t_lite.registry import register_ranged_hparams
from t2t_lite.search_space import Choice, FloatRange, IntRange, SearchSpace


@register_ranged_hparams()
def transformer_tiny_range():
  """Over transformer_tiny, for tests and demos: seconds a trial on algorithmic_reverse."""
  return SearchSpace(
      learning_rate=FloatRange(0.2, 2.0, log=True), warmup_steps=IntRange(10, 100, log=True),
      d_model=Choice([32, 64]), dropout=FloatRange(0.0, 0.2), ema_decay=FloatRange(0.5, 0.9))


@register_ranged_hparams()
def transformer_multi30k_range():
  """Over transformer_base on multi30k_ende in a fixed number of CPU minutes: the model's size
  is free (a smaller model makes more epochs in the same minutes; decoder_layers 0 = as deep as
  the encoder), with the strong dropout small models want on Multi30k's 29k pairs, the
  optimiser's rate, warmup and batch, the moving average of the weights, and the dev decode's
  beam and alpha. Every d_model is divisible by every num_heads. Rates stop at 2 and batches at
  4096 tokens: the first study's trials beyond them diverged or made too few steps in a CPU
  trial's minutes to be compared (docs/benchmarks.md)."""
  return SearchSpace(
      num_layers=IntRange(2, 6), decoder_layers=Choice([0, 1, 2]),
      d_model=Choice([128, 256, 512]), d_ff=Choice([512, 1024, 2048]), num_heads=Choice([4, 8]),
      dropout=FloatRange(0.1, 0.4), attention_dropout=FloatRange(0.0, 0.2),
      label_smoothing=FloatRange(0.0, 0.2), weight_decay=FloatRange(1e-4, 0.1, log=True),
      learning_rate=FloatRange(0.3, 2.0, log=True), warmup_steps=IntRange(400, 2000, log=True),
      batch_size=Choice([2048, 4096]), ema_decay=FloatRange(0.99, 0.9995),
      beam_size=IntRange(1, 8), alpha=FloatRange(0.0, 1.2))


@register_ranged_hparams()
def transformer_multi30k_narrow_range():
  """Over transformer_base on multi30k_ende, for trials of 40 CPU minutes: around the best of
  the 20-minute study (2+2 layers of d_model 256, rate 0.8, warmup 500, EMA 0.998; 40.84 dev
  BLEU), whose dropout and label smoothing had no time to pay off in 20 minutes (docs/
  benchmarks.md). d_model stays 256 (512 made half the steps a minute), batches 4096 tokens
  and the dev decode's beam 4 (the test decode's). alpha reaches 1.8: these models' outputs
  are short (7% under the references at alpha 0.6), and on all 1,014 dev sentences alpha 1.5
  scored 0.75 BLEU above 0.6, where 2.0 started runaway outputs."""
  return SearchSpace(
      num_layers=IntRange(2, 3), decoder_layers=Choice([0, 1]), d_model=Choice([256]),
      d_ff=Choice([1024, 2048]), num_heads=Choice([4, 8]), batch_size=Choice([4096]),
      beam_size=Choice([4]),
      dropout=FloatRange(0.1, 0.3), attention_dropout=FloatRange(0.0, 0.1),
      label_smoothing=FloatRange(0.1, 0.2), weight_decay=FloatRange(0.01, 0.1, log=True),
      learning_rate=FloatRange(0.6, 1.2, log=True), warmup_steps=IntRange(400, 800, log=True),
      ema_decay=FloatRange(0.995, 0.999), alpha=FloatRange(0.6, 1.8))


@register_ranged_hparams()
def transformer_parsing_small_range():
  """Over transformer_parsing_small on the wsj_parsing sample: the architecture (with or
  without the source pointer; decoder_layers 0 = as deep as the encoder), dropout, word
  dropout, label smoothing, beam and alpha (the target tag mode is a problem setting,
  --problem_settings, one study each)."""
  return SearchSpace(
      source_pointer=Choice([False, True]), word_dropout=FloatRange(0.0, 0.8),
      num_layers=IntRange(2, 6), decoder_layers=Choice([0, 1, 2]),
      d_model=Choice([128, 256, 384]), d_ff=Choice([512, 1024]),
      num_heads=Choice([4, 8]), dropout=FloatRange(0.1, 0.4),
      attention_dropout=FloatRange(0.0, 0.2), label_smoothing=FloatRange(0.0, 0.2),
      learning_rate=FloatRange(0.3, 3.0, log=True), warmup_steps=IntRange(200, 2000, log=True),
      beam_size=IntRange(1, 12), alpha=FloatRange(0.0, 1.5))


@register_ranged_hparams()
def transformer_parsing_spans_range():
  """Over transformer_parsing_spans on the wsj_parsing_spans sample: the encoder's size and
  the regularisation a treebank of 2,925 trees wants (the set's 40 minutes are ~200 epochs,
  and its dev loss is lowest near step 4,000 of ~10,000), the optimiser's rate, warmup and
  batch."""
  return SearchSpace(
      num_layers=IntRange(2, 8), d_model=Choice([256, 384, 512]), d_ff=Choice([1024, 2048]),
      num_heads=Choice([4, 8]), dropout=FloatRange(0.1, 0.4),
      attention_dropout=FloatRange(0.0, 0.2), relu_dropout=FloatRange(0.0, 0.3),
      word_dropout=FloatRange(0.0, 0.9), weight_decay=FloatRange(0.0, 0.2),
      learning_rate=FloatRange(0.1, 0.6, log=True), warmup_steps=IntRange(150, 1000, log=True),
      batch_size=Choice([10000, 20000, 40000]))
