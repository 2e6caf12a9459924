"""A trained model as a CTranslate2 model directory: `t2t-lite-export --format=ctranslate2`.

  path = ctranslate2_export.export_model_dir("runs/ende", "exports/ende-ct2", quantization="int8")
  translator = ctranslate2.Translator(path)  # then docs/serving.md's snippet, or `translate`

Written against ctranslate2 4.8.5, an optional dependency (`pip install -e '.[ctranslate2]'`),
imported only here and only when asked for. What the directory carries, exactly:
  - the weights of the checkpoint the SavedModel export takes (loading.py: the run's best model
    when it kept one, else its newest; or --checkpoint_path), in float32 unless quantized;
  - post-norm blocks (section 3.1), or pre-norm ones with the stacks' final LayerNorms; ReLU
    FFNs; LayerNorm epsilon 1e-6;
  - the shared embedding (3.4): source and target embeddings, scaled by sqrt(d_model)
    (CTranslate2's scale_embeddings), and the pre-softmax projection, unscaled;
  - the position encodings as our own table, given whole: sinusoids interleaved as section 3.5
    writes them (CTranslate2's own sinusoids are laid out otherwise) for every position our
    decoding reaches (max_input_length, at least hparams max_length, + extra_length), or the
    learned table;
  - the vocabulary: every id's piece, in id order, as CTranslate2's one shared token list; EOS
    "</s>", UNK "<unk>", the decoder starting from id 0 ("<pad>") as ours does, and the EOS our
    inputs end with appended by CTranslate2 (add_source_eos);
  - PAD never an output: the projection's bias is _NEVER at id 0 and 0 elsewhere, which is our
    search's renormalisation without PAD (search.without_pad), so no option is needed for it.
Beside them: the run's SentencePiece model (sentencepiece.model) and t2t_lite_export.json, the
decoding settings with the translate_batch options that give them.

CTranslate2's length penalty is not ours: it ranks log P(Y) / |Y|^length_penalty, |Y| without
the EOS, and stops a sentence once beam_size hypotheses have finished; ours ranks
log P(Y) / ((5 + |Y|) / 6)^alpha (GNMT), |Y| with the EOS, and stops when no live hypothesis can
beat its worst finished one. Both keep the same live hypotheses and finish the same ones, so
`translate` decodes as t2t-lite-decode does: CTranslate2 collects the finished hypotheses
(`translate_options`), each sentence with its own max_decoding_length = its pieces + 1 (EOS) +
extra_length, and they are ranked by our score (`ranked`). docs/serving.md shows both that and
the plain length_penalty=alpha, which is close (see there).
"""
import json
import os
import shutil

import numpy as np

from t2t_lite.data import data_files
from t2t_lite.decode import loading, translation
from t2t_lite.decode.export_checks import CTranslate2ExportError, check_ctranslate2_export
from t2t_lite.errors import RunFailure, reason
from t2t_lite.modeling.embedding import sinusoid_positions
from t2t_lite.modeling.transformer import LAYER_NORM_EPSILON

SENTENCEPIECE_FILE = "sentencepiece.model"
SETTINGS_FILE = "t2t_lite_export.json"
INSTALL = "pip install -e '.[ctranslate2]'"
# The projection bias of PAD: exp(_NEVER) is 0 in every precision CTranslate2 computes in, and
# -1e4 stays finite in float16 and bfloat16 (our search adds -1e7 to PAD's float32 logit).
_NEVER = -1.0e4
# translate_options': not 0, which would make CTranslate2 stop a sentence at its first finished
# best hypothesis, and too small to change a float32 score (|Y|^1e-9 rounds to 1).
_NO_PENALTY = 1e-9
# Finished hypotheses collected a sentence, in beams: with 2, CTranslate2 gave our outputs on
# all of Multi30k's test_2016_flickr (1 gave 98.5%): ours can find its best after beam_size
# hypotheses have finished.
PATIENCE = 2


def require_ctranslate2():
  """The ctranslate2 module, or a one-line error naming how to install it."""
  try:
    import ctranslate2
  except ImportError as e:
    raise CTranslate2ExportError(f"--format=ctranslate2 needs the ctranslate2 package "
                                 f"({reason(e)}): {INSTALL}") from None
  return ctranslate2


def _linear(spec, *layers):
  """CTranslate2 Linear (weight [out, in]) from one or more of our kernels [in..., out...] and
  biases, fused along the output (QKV, KV)."""
  def flat(layer):  # [in..., out...] -> [in, out]; Dense and [D, H, K] have 1 input axis
    kernel = layer.kernel.numpy()
    inputs = int(np.prod(kernel.shape[:getattr(layer, "input_axes", 1)]))
    return kernel.reshape(inputs, -1)
  spec.weight = np.concatenate([flat(layer) for layer in layers], axis=1).T  # [out, in]
  spec.bias = np.concatenate([layer.bias.numpy().reshape(-1) for layer in layers])  # [out]


def _norm(spec, norm):
  spec.gamma, spec.beta = norm.gamma.numpy(), norm.beta.numpy()  # [D]


def _ffn(spec, layer, norm):
  _linear(spec.linear_0, layer.ffn.inner)  # [F, D]
  _linear(spec.linear_1, layer.ffn.outer)  # [D, F]
  _norm(spec.layer_norm, norm)


def _attention(spec, layer, norm):
  _linear(spec.linear[0], layer.query_dense, layer.key_dense, layer.value_dense)  # [3D, D]
  _linear(spec.linear[1], layer.output_dense)  # [D, H*V]
  _norm(spec.layer_norm, norm)  # post-norm: after the residual; pre-norm: before the sublayer


def _positions(model, side, length):
  """float32 [length, D] of the sinusoid table, or the learned one of `side` ([max_length, D])."""
  hp = model.hparams
  if hp.position_encoding == "learned":
    return getattr(model, f"{side}_positions").positions.numpy()
  return sinusoid_positions(length, hp.d_model).numpy()


def model_spec(model, tokens, position_length):
  """Our float32 Transformer and its vocabulary (every id's token, in id order) -> a
  ctranslate2 TransformerSpec (see the module doc); sinusoids for `position_length` positions."""
  from ctranslate2.specs import transformer_spec
  hp = model.hparams
  spec = transformer_spec.TransformerSpec.from_config(
      (hp.num_layers, hp.decoder_depth), hp.num_heads, pre_norm=hp.norm_type == "pre")
  spec.config.layer_norm_epsilon = LAYER_NORM_EPSILON
  spec.config.add_source_eos = True
  spec.config.bos_token = spec.config.decoder_start_token = tokens[0]  # our decoder's start id
  spec.config.eos_token, spec.config.unk_token = tokens[1], tokens[2]
  embeddings = model.embedding.embeddings.numpy()  # [V, D]
  spec.encoder.embeddings[0].weight = embeddings  # scale_embeddings (sqrt(D)) is on by default
  spec.decoder.embeddings.weight = embeddings
  spec.decoder.projection.weight = embeddings  # tied pre-softmax projection [V, D]
  spec.decoder.projection.bias = np.where(np.arange(len(tokens)) == 0, _NEVER, 0.0).astype(
      np.float32)  # [V]
  for side, side_spec in (("encoder", spec.encoder), ("decoder", spec.decoder)):
    side_spec.position_encodings.encodings = _positions(model, side, position_length)
    if hp.norm_type == "pre":
      _norm(side_spec.layer_norm, getattr(model, f"{side}_norm"))
  for layer, layer_spec in zip(model.encoder_layers, spec.encoder.layer):
    _attention(layer_spec.self_attention, layer.self_attention, layer.norm1)
    _ffn(layer_spec.ffn, layer, layer.norm2)
  for layer, layer_spec in zip(model.decoder_layers, spec.decoder.layer):
    _attention(layer_spec.self_attention, layer.self_attention, layer.norm1)
    cross, cross_spec = layer.cross_attention, layer_spec.attention
    _linear(cross_spec.linear[0], cross.query_dense)  # [D, D]
    _linear(cross_spec.linear[1], cross.key_dense, cross.value_dense)  # [2D, D]
    _linear(cross_spec.linear[2], cross.output_dense)
    _norm(cross_spec.layer_norm, layer.norm2)
    _ffn(layer_spec.ffn, layer, layer.norm3)
  spec.register_source_vocabulary(list(tokens))
  spec.register_target_vocabulary(list(tokens))
  return spec


def save(spec, directory, quantization="none", vmap=None):
  """Writes `spec` (quantized: export_checks.QUANTIZATIONS) as a CTranslate2 model directory,
  which must not exist yet; `vmap`: an optional vocabulary map file. Returns directory."""
  if vmap is not None:
    spec.register_vocabulary_mapping(vmap)
  spec.validate()
  spec.optimize(quantization=None if quantization == "none" else quantization)
  os.makedirs(directory)
  spec.save(directory)
  return directory


def export_model_dir(model_dir, export_dir, *, checkpoint_path=None, quantization="none",
                     max_input_length=None, with_alignments=False, precision="auto",
                     **settings):
  """Writes the model trained in model_dir, from the checkpoint `checkpoint_path` names (as
  t2t-lite-decode and the SavedModel export: loading.py), as a CTranslate2 model directory
  export_dir (new or empty), with its weights quantized as `quantization`
  (export_checks.QUANTIZATIONS). `settings`: DecodeSettings' fields, resolved as
  t2t-lite-decode resolves them, recorded in t2t_lite_export.json; max_input_length (default:
  hparams max_length) and extra_length decide how many sinusoid positions are kept. Returns
  export_dir. Everything is checked before anything is written (export_checks.py first), and a
  failed write leaves nothing behind."""
  ctranslate2 = require_ctranslate2()
  check_ctranslate2_export(model_dir, export_dir, quantization=quantization, precision=precision,
                           with_alignments=with_alignments, max_input_length=max_input_length,
                           **settings)
  if isinstance(model_dir, (list, tuple)):
    model_dir = model_dir[0]
  loaded = loading.load(model_dir, checkpoint_path, "none")
  problem = loaded.problem
  if (getattr(problem, "decode_constraint", None) or getattr(problem, "decode_output_fn", None)):
    raise CTranslate2ExportError(f"--format=ctranslate2 with {problem.name}: its output "
                                 "constraint and output form run in our search only")
  resolved = translation.DecodeSettings.resolve(problem, loaded.hparams, **settings)
  max_input_length = max_input_length or loaded.hparams.max_length
  record = dict(
      format="ctranslate2", ctranslate2_version=ctranslate2.__version__,
      quantization=quantization, model_dir=model_dir, checkpoint=loaded.checkpoint,
      checkpoint_chosen=loaded.which(), problem=problem.name, **resolved.as_kwargs(),
      max_input_length=max_input_length,
      position_encodings=f"{loaded.hparams.position_encoding}, "
                         f"{_position_count(loaded.hparams, max_input_length, resolved)} positions",
      translate_batch=translate_options(resolved, max_input_length),
      max_decoding_length="each sentence's pieces (after max_input_length) + 1 + extra_length",
      ranking="best of the hypotheses by score / ((5 + min(len(hypothesis) + 1, "
              "max_decoding_length)) / 6) ** alpha")
  spec = model_spec(loaded.model, loaded.tokenizer.pieces(),
                    _position_count(loaded.hparams, max_input_length, resolved))
  vocabulary = data_files.vocab_path(model_dir)
  return _write(spec, export_dir, quantization, record,
                vocabulary if os.path.isfile(vocabulary) else None)


def _position_count(hparams, max_input_length, settings):
  """Rows of the position table: the learned one's, or every position our decoding reaches."""
  if hparams.position_encoding == "learned":
    return hparams.max_length
  return max(max_input_length, hparams.max_length) + settings.extra_length


def translate_options(settings, max_input_length):
  """The options of ctranslate2.Translator.translate_batch under which our search's outputs are
  among its hypotheses, to be ranked by `best` (max_decoding_length is each sentence's own).

  Both searches keep the same live hypotheses (the beam_size best expansions that do not end)
  and finish the same ones (an EOS among the beam_size best); they differ in ranking and in
  when they stop. So: a length_penalty so small that it changes no score but turns off
  CTranslate2's early exit at the first finished best hypothesis; `patience` beams' worth of
  finished hypotheses, all returned with their log-probabilities; EOS allowed as the first
  token (CTranslate2's min_decoding_length is 1 by default, ours 0)."""
  options = {"beam_size": settings.beam_size, "min_decoding_length": 0,
             "max_input_length": max_input_length, "return_scores": True}
  if settings.beam_size > 1:
    options.update(length_penalty=_NO_PENALTY, patience=PATIENCE,
                   num_hypotheses=settings.beam_size * PATIENCE)
  return options


def ranked(result, alpha, max_decoding_length):
  """A translate_batch result (under translate_options) -> its hypotheses (token lists), best
  first by our score log P(Y) / ((5 + |Y|) / 6)^alpha, |Y| counting the EOS (which a
  hypothesis of max_decoding_length tokens did not reach)."""
  def score(pair):
    tokens, logprob = pair
    return logprob / ((5 + min(len(tokens) + 1, max_decoding_length)) / 6) ** alpha
  return [tokens for tokens, _ in sorted(zip(result.hypotheses, result.scores), key=score,
                                         reverse=True)]


def _write(spec, export_dir, quantization, record, sentencepiece_model):
  """The model directory written to a temporary sibling, then renamed to export_dir."""
  parent = os.path.dirname(os.path.abspath(export_dir))
  temp = os.path.join(parent, f".{os.path.basename(os.path.abspath(export_dir))}.tmp-{os.getpid()}")
  existed = os.path.isdir(export_dir)
  try:
    os.makedirs(parent, exist_ok=True)
    if os.path.exists(temp):
      shutil.rmtree(temp)
    save(spec, temp, quantization)
    if sentencepiece_model:
      shutil.copyfile(sentencepiece_model, os.path.join(temp, SENTENCEPIECE_FILE))
    with open(os.path.join(temp, SETTINGS_FILE), "w") as f:
      f.write(json.dumps(record, indent=2, sort_keys=True) + "\n")
    if existed:
      os.rmdir(export_dir)  # Empty (check_ctranslate2_export): renamed over below.
    os.rename(temp, export_dir)
  except OSError as e:  # A full disk, a quota: nothing half-written stays.
    shutil.rmtree(temp, ignore_errors=True)
    raise RunFailure(f"writing the CTranslate2 model to {export_dir} failed: {reason(e)}; "
                     f"nothing was left in {parent}") from None
  return export_dir


def translate(translator, sentencepiece, lines, settings, max_input_length, max_batch_size=32):
  """Lines decoded by a ctranslate2.Translator as t2t-lite-decode decodes them: `settings` a
  DecodeSettings, `sentencepiece` the sentencepiece.SentencePieceProcessor of the export's
  model. Sentences of one length are decoded together, so that each gets its own
  max_decoding_length; blank lines give "". -> the best output of each line, in order."""
  pieces = [sentencepiece.encode(line, out_type=str) if line.strip() else [] for line in lines]
  by_length = {}
  for i, line_pieces in enumerate(pieces):
    if line_pieces:
      by_length.setdefault(min(len(line_pieces), max_input_length - 1), []).append(i)
  outputs = [""] * len(lines)
  options = translate_options(settings, max_input_length)
  alpha = settings.alpha if settings.beam_size > 1 else 0.0  # beam 1 is greedy, as ours
  for length, indices in sorted(by_length.items()):
    for start in range(0, len(indices), max_batch_size):
      chunk = indices[start:start + max_batch_size]
      limit = length + 1 + settings.extra_length
      results = translator.translate_batch([pieces[i] for i in chunk],
                                           max_decoding_length=limit, **options)
      for i, result in zip(chunk, results):
        outputs[i] = sentencepiece.decode(ranked(result, alpha, limit)[0])
  return outputs
