"""t2t-lite-attention: the paper's attention pictures (figures 3-5) for your own sentence.

  t2t-lite-attention --model_dir=runs/ende --text="The law will never be perfect." \\
      --output_dir=attention/

Translates --text (or takes --target as the output), runs the model once over (source, output)
and writes one PNG heatmap per layer and head for each of the three kinds of attention:
  encoder_self_layer<l>_head<h>.png     source tokens x source tokens
  decoder_self_layer<l>_head<h>.png     output tokens x output tokens (masked: lower triangle)
  encoder_decoder_layer<l>_head<h>.png  output tokens (rows) x source tokens (columns)
Rows are the attending positions (queries), columns the attended ones (keys). A decoder row
is labelled with the token that position predicts; the decoder reads the previous one. The
model is the run's best when it kept one (--checkpoint_path), named on stderr with why.
"""
import json
import logging
import os
import sys

from t2t_lite import files
from t2t_lite.bin import cli, flags
from t2t_lite.decode.decode_settings import DecodeSettings, DecodingError
from t2t_lite.errors import T2TLiteError
from t2t_lite.rundir import run_files

# TensorFlow, matplotlib and the model are imported by the functions that use them: the flags,
# --text and model_dir are checked first, without them.

KINDS = ("encoder_self", "decoder_self", "encoder_decoder")
logger = logging.getLogger("t2t-lite-attention")


def token_labels(tokenizer, ids):
  """One printable label per id: the token's text, "</s>" for EOS."""
  from t2t_lite.data.tokenizers import EOS_ID
  return ["</s>" if i == EOS_ID else (tokenizer.decode([i]) or f"#{i}") for i in ids]


def plot_heatmap(weights, row_labels, column_labels, title, path):
  """weights [rows, columns] -> a PNG at `path` (any tf.io.gfile path)."""
  import matplotlib
  matplotlib.use("Agg")  # Files; no display.
  import matplotlib.pyplot as plt
  rows, columns = weights.shape
  size = (max(4.0, 0.35 * columns + 2.0), max(3.5, 0.35 * rows + 1.5))
  figure, axes = plt.subplots(figsize=size)
  image = axes.imshow(weights, cmap="viridis", vmin=0.0, vmax=1.0, aspect="auto")
  axes.set_xticks(range(columns), column_labels, rotation=90, fontsize=8)
  axes.set_yticks(range(rows), row_labels, fontsize=8)
  axes.set_title(title, fontsize=9)
  axes.set_xlabel("attended to (keys)", fontsize=8)
  axes.set_ylabel("attending (queries)", fontsize=8)
  figure.colorbar(image, ax=axes, fraction=0.04)
  figure.tight_layout()
  local = path if "://" not in path else None
  if local:
    figure.savefig(local, dpi=100)
  else:
    import io

    import tensorflow as tf
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    with tf.io.gfile.GFile(path, "wb") as f:
      f.write(buffer.getvalue())
  plt.close(figure)


def write_attention_pictures(model, tokenizer, source_ids, target_ids, output_dir):
  """Writes every layer's and head's heatmaps for one (source, target) pair; returns the paths.

  source_ids / target_ids: lists of ids, each ending in EOS.
  """
  import numpy as np
  import tensorflow as tf
  maps = model.attention_maps(tf.constant([source_ids], tf.int32),
                              tf.constant([target_ids], tf.int32))
  source_labels = token_labels(tokenizer, source_ids)
  target_labels = token_labels(tokenizer, target_ids)
  axes = {"encoder_self": (source_labels, source_labels),
          "decoder_self": (target_labels, target_labels),
          "encoder_decoder": (target_labels, source_labels)}
  with files.writing(output_dir):
    tf.io.gfile.makedirs(output_dir)
  paths = []
  for kind in KINDS:
    rows, columns = axes[kind]
    for layer, weights in enumerate(maps[kind]):
      weights = np.asarray(weights)[0]  # [H, T_q, T_k]
      for head in range(weights.shape[0]):
        path = os.path.join(output_dir, f"{kind}_layer{layer}_head{head}.png")
        with files.writing(path):  # A full disk: one line naming the picture.
          plot_heatmap(weights[head], rows, columns,
                       f"{kind.replace('_', '-')} attention, layer {layer}, head {head}", path)
        paths.append(path)
  return paths


def parse_args(argv=None):
  parser = cli.ArgumentParser(prog="t2t-lite-attention", description=__doc__.split("\n")[0])
  flags.add_model_flags(parser)
  parser.add_argument("--text", required=True, help="the source sentence")
  parser.add_argument("--target", default=None,
                      help="the output to show (default: the model's own translation)")
  parser.add_argument("--output_dir", required=True,
                      help="the directory the PNG files go to (created; not a file)")
  flags.add_fields(parser, DecodeSettings, ("beam_size", "alpha", "extra_length"))
  flags.add_verbose_flag(parser)
  return parser.parse_args(argv)


def main(argv=None):
  args = parse_args(argv)
  cli.configure_logging(args.verbose)
  if not args.text.strip():
    return cli.fail("t2t-lite-attention", "--text is empty")
  try:  # The paths before TensorFlow loads.
    files.check_not_a_file(args.output_dir, "--output_dir", DecodingError)
    run_files.check_run_dir(args.model_dir)
    from t2t_lite.decode import translation
    translator = translation.Translator.from_model_dir(
        args.model_dir, args.checkpoint_path, precision=args.precision,
        **flags.field_values(args, DecodeSettings))
  except T2TLiteError as e:
    return cli.fail("t2t-lite-attention", e, e.exit_status)
  if translator.loaded.hparams.architecture != "transformer":
    return cli.fail("t2t-lite-attention", f"{args.model_dir} is a "
                    f"{translator.loaded.hparams.architecture}: attention pictures are of an "
                    "encoder-decoder Transformer's attention")
  logger.info("attention of %s; %s", translator.loaded.which(), translator.loaded.computing())
  tokenizer = translator.tokenizer
  source_ids = list(tokenizer.encode(args.text, add_eos=True))
  if len(source_ids) > translator.max_input_length:
    print(f"t2t-lite-attention: warning: --text is longer than {translator.max_input_length} "
          "tokens: truncated", file=sys.stderr)
    from t2t_lite.data.tokenizers import EOS_ID
    source_ids = source_ids[:translator.max_input_length - 1] + [EOS_ID]
  if args.target is None:
    (target,), _ = translator.translate([args.text])
  else:
    target = args.target
  target_ids = list(tokenizer.encode(target, add_eos=True))
  try:
    paths = write_attention_pictures(translator.model, tokenizer, source_ids, target_ids,
                                     args.output_dir)
  except T2TLiteError as e:  # A full disk.
    return cli.fail("t2t-lite-attention", e, e.exit_status)
  print(json.dumps({"output_dir": args.output_dir, "pictures": len(paths), "target": target}))
  return 0


if __name__ == "__main__":
  sys.exit(main())
