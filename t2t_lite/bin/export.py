"""t2t-lite-export: write a trained model_dir as a SavedModel that TF Serving answers from raw text.

  t2t-lite-export --model_dir=runs/ende --export_dir=exports/ende
  # prints exports/ende/1 (then 2, 3, ... on later exports: TF Serving serves the highest)

The `serving_default` signature takes a batch of UTF-8 strings and returns the translations
("outputs") and their scores; `translate_ids` takes and returns token ids. Tokenization, beam
search and detokenization all run in the graph. The decoding flags are t2t-lite-decode's (made
from DecodeSettings' fields; --sample exports a sampler): beam size, alpha and the extra output
length default to hparams.json's, else the problem's (the paper: 4, 0.6, 50); inputs longer
than --max_input_length tokens (default: hparams max_length) are cut. The weights are the run's
best model when it kept one (--checkpoint_path), named on stderr with why; export_dir must be
new, empty or hold only earlier versions. See docs/serving.md.

  t2t-lite-export --format=ctranslate2 --quantization=int8 --model_dir=runs/ende \
      --export_dir=exports/ende-ct2
  # writes a model directory ctranslate2.Translator loads (the same checkpoint's weights, the
  # SentencePiece model beside them), into a new or empty export_dir; needs the optional
  # ctranslate2 package (pip install -e '.[ctranslate2]'). See docs/serving.md.

  t2t-lite-export --format=litert --quantization=int8 --model_dir=runs/ende \
      --export_dir=exports/ende-litert
  # writes model.tflite (the encoder and the whole beam search, builtin ops only), the
  # tokenizer's file and t2t_lite_litert.json into a new or empty export_dir, for
  # ai_edge_litert's Interpreter (t2t-lite-decode --engine=litert, a phone). See docs/serving.md.
"""
import logging
import sys

from t2t_lite.bin import cli, flags
from t2t_lite.decode import export_checks
from t2t_lite.decode.decode_settings import DecodeSettings, forced
from t2t_lite.errors import T2TLiteError


def parse_args(argv):
  parser = cli.ArgumentParser(prog="t2t-lite-export", description=__doc__.split("\n")[0])
  flags.add_model_flags(parser, ensemble=True)
  parser.add_argument("--export_dir", required=True,
                      help="TF Serving's --model_base_path: the export goes to a new "
                           "<export_dir>/<version>/ (--format=ctranslate2: the model directory "
                           "itself, new or empty)")
  flags.add_fields(parser, DecodeSettings)
  parser.add_argument("--max_input_length", type=int, default=None,
                      help="longer inputs are cut to this many tokens, EOS included "
                           "(default: hparams max_length)")
  parser.add_argument("--with_alignments", action="store_true",
                      help="serving_default also answers each output's word alignment")
  parser.add_argument("--target_prefix", action="store_true",
                      help="also export the translate_with_prefix signature: inputs and "
                           "target prefixes in, outputs that start with their prefixes out")
  parser.add_argument("--constraints", action="store_true",
                      help="also export the translate_with_constraints signature: inputs and "
                           "target phrases in, outputs that contain them out (with "
                           "--target_prefix, also translate_with_prefix_and_constraints)")
  parser.add_argument("--format", default="savedmodel",
                      choices=["savedmodel", "ctranslate2", "litert"],
                      help="savedmodel: TF Serving's versioned SavedModel; ctranslate2: a "
                           "CTranslate2 model directory; litert: a LiteRT (.tflite) model "
                           "directory (docs/serving.md)")
  parser.add_argument("--quantization", default=None, choices=list(dict.fromkeys(
      export_checks.QUANTIZATIONS + export_checks.LITERT_QUANTIZATIONS)),
                      help="the weights' type: --format=ctranslate2's (default none: float32) "
                           "or --format=litert's (float32, the default, float16 or int8)")
  flags.add_verbose_flag(parser)
  return parser.parse_args(argv)


def main(argv=None):
  args = parse_args(argv)
  cli.configure_logging(args.verbose, logging.INFO)
  try:
    path = _export(args)
  except T2TLiteError as e:
    return cli.fail("t2t-lite-export", e, e.exit_status)
  print(path)
  return 0


def _export(args):
  """The export --format asks for -> its path. Its settings, export_dir and model_dir are
  checked before the export's modules load TensorFlow, by the check the export itself runs
  first (export_checks.py), so that the tool refuses at once and as the Python API does."""
  settings = flags.field_values(args, DecodeSettings)
  model_dir = flags.model_dirs(args)
  if args.format == "ctranslate2":
    if args.target_prefix or args.constraints:
      raise export_checks.ExportError(
          "--target_prefix and --constraints are SavedModel signatures; CTranslate2 takes "
          "target_prefix= in translate_batch and has no lexical constraints")
    export_checks.check_ctranslate2_export(
        model_dir, args.export_dir, quantization=args.quantization or "none",
        precision=args.precision, with_alignments=args.with_alignments,
        max_input_length=args.max_input_length, **settings)
    from t2t_lite.decode import ctranslate2_export
    return ctranslate2_export.export_model_dir(
        model_dir, args.export_dir, checkpoint_path=args.checkpoint_path,
        quantization=args.quantization or "none", max_input_length=args.max_input_length,
        with_alignments=args.with_alignments, precision=args.precision, **settings)
  if args.format == "litert":
    weights = args.quantization or "float32"
    request = dict(precision=args.precision, with_alignments=args.with_alignments,
                   max_input_length=args.max_input_length,
                   forcing=forced(False, args.constraints), **settings)
    export_checks.check_litert_export(model_dir, args.export_dir, quantization=weights,
                                      **request)
    from t2t_lite.decode import litert_export
    return litert_export.export_model_dir(model_dir, args.export_dir, weights=weights,
                                          checkpoint_path=args.checkpoint_path, **request)
  if args.quantization is not None:
    raise export_checks.ExportError("--quantization is --format=ctranslate2's and litert's: a "
                                    "SavedModel computes in --precision")
  export_checks.check_saved_model_export(
      model_dir, args.export_dir, args.precision,
      forced(args.target_prefix, args.constraints), args.max_input_length, **settings)
  from t2t_lite.decode import export
  return export.export_model_dir(
      model_dir, args.export_dir, checkpoint_path=args.checkpoint_path,
      max_input_length=args.max_input_length, precision=args.precision,
      with_alignments=args.with_alignments, with_prefix=args.target_prefix,
      with_constraints=args.constraints, **settings)


if __name__ == "__main__":
  sys.exit(main())
