"""t2t-lite-score: the model's log-probability of given outputs (forced decoding), e.g. to filter
a corpus or rerank an n-best list.

  t2t-lite-score --model_dir=runs/ende --source_file=corpus.en --target_file=corpus.de
  t2t-lite-decode --model_dir=runs/a --n_best=4 --input_file=test.en > nbest.txt
  t2t-lite-score --model_dir=runs/b --source_file=test.en --nbest_file=nbest.txt

For each (source, target) pair one line "logprob<TAB>tokens<TAB>score": log P(target + EOS |
source) under the model (or the ensemble of several --model_dir), the target's tokens with
EOS, and logprob / lp(tokens) with --alpha (default: the decoding alpha), which is the score beam
search ranks outputs by. With --nbest_file (Moses' "i ||| output ||| score" lines, as
t2t-lite-decode --n_best writes them), it writes the same lines with this model's score as a
fourth field (a line without a number as its score is refused, naming it). On stderr, a line
naming the checkpoint and why it was chosen (the run's best model when it kept one; see
--checkpoint_path), then one JSON line: sentences, tokens, the summed log-probability and the
corpus perplexity exp(-logprob / tokens) (null for no tokens: empty files give no lines and 0
sentences). Sources longer than max_length are cut, with a warning naming the line.
"""
import json
import logging
import math
import sys

from t2t_lite.bin import cli, flags
from t2t_lite.bin.text_lines import check_input_file, check_output_file, read_lines, write_lines
from t2t_lite.decode.decode_settings import DecodeSettings, DecodingError
from t2t_lite.errors import T2TLiteError
from t2t_lite.rundir import run_files

PROG = "t2t-lite-score"
logger = logging.getLogger(PROG)


def parse_args(argv):
  parser = cli.ArgumentParser(prog=PROG, description=__doc__.split("\n")[0])
  flags.add_model_flags(parser, ensemble=True)
  parser.add_argument("--source_file", required=True, help="one source a line")
  targets = parser.add_mutually_exclusive_group(required=True)
  targets.add_argument("--target_file", help="one target a line, parallel to --source_file")
  targets.add_argument("--nbest_file",
                       help="Moses n-best lines 'i ||| output ||| score' (i: the source line, "
                            "0-based), e.g. t2t-lite-decode --n_best's")
  parser.add_argument("--output_file", default="-",
                      help="- = stdout; not an input file (refused under any name)")
  flags.add_fields(parser, DecodeSettings, ("alpha",))  # the score's penalty
  parser.add_argument("--batch_size", type=flags.positive_int, default=32,
                      help="pairs per batch")
  flags.add_verbose_flag(parser)
  return parser.parse_args(argv)


def read_pairs(args):
  """(sources, targets, n-best lines or None) of the pairs to score."""
  sources = read_lines(args.source_file)
  if args.target_file:
    targets = read_lines(args.target_file)
    if len(targets) != len(sources):
      raise DecodingError(f"{args.target_file} has {len(targets)} lines but "
                          f"{args.source_file} has {len(sources)}")
    return sources, targets, None
  nbest = read_lines(args.nbest_file)
  pairs = []
  for number, line in enumerate(nbest, 1):
    fields = line.split(" ||| ")
    if len(fields) < 2 or not fields[0].strip().isdigit() or int(fields[0]) >= len(sources):
      raise DecodingError(
          f"{args.nbest_file}:{number}: not an n-best line 'i ||| output ||| ...' with i < "
          f"{len(sources)}, the lines of {args.source_file}")
    if len(fields) < 3 or not _is_number(fields[2]):
      what = f"score {fields[2]!r} is not a number" if len(fields) > 2 else "no score"
      raise DecodingError(f"{args.nbest_file}:{number}: {what}: Moses n-best lines are 'i ||| "
                          "output ||| score'")
    pairs.append((sources[int(fields[0])], fields[1]))
  return [s for s, _ in pairs], [t for _, t in pairs], nbest


def _is_number(text):
  """Whether text is a finite number (a score)."""
  try:
    return math.isfinite(float(text))
  except ValueError:
    return False


def main(argv=None):
  args = parse_args(argv)
  cli.configure_logging(args.verbose, logging.INFO)
  try:
    # The paths first: checking them needs no TensorFlow, which reading the files and loading
    # the model import.
    check_output_file(args.output_file, (args.source_file, args.target_file, args.nbest_file))
    for model_dir in args.model_dir:
      run_files.check_run_dir(model_dir)
    for path in (args.source_file, args.target_file or args.nbest_file):
      check_input_file(path)
    sources, targets, nbest = read_pairs(args)
    from t2t_lite.decode import translation
    translator = translation.Translator.from_model_dir(
        flags.model_dirs(args), args.checkpoint_path, precision=args.precision,
        **flags.field_values(args, DecodeSettings))
  except T2TLiteError as e:
    return cli.fail(PROG, e, e.exit_status)
  except FileNotFoundError as e:
    return cli.fail(PROG, e)
  logger.info("scoring %d pairs with %s; %s", len(sources), translator.loaded.which(),
              translator.loaded.computing())
  scored = translator.score(sources, targets, args.batch_size)
  if nbest is None:
    lines = [f"{logprob:.6f}\t{tokens}\t{score:.6f}" for logprob, tokens, score in
             zip(scored["logprob"], scored["tokens"], scored["score"])]
  else:
    lines = [f"{line} ||| {s:.6f}" for line, s in zip(nbest, scored["score"])]
  try:
    write_lines(args.output_file, lines)
  except T2TLiteError as e:  # A full disk.
    return cli.fail(PROG, e, e.exit_status)
  logprob, tokens = sum(scored["logprob"]), sum(scored["tokens"])
  print(json.dumps({"sentences": len(sources), "tokens": tokens, "logprob": logprob,
                    "perplexity": math.exp(-logprob / tokens) if tokens else None}),
        file=sys.stderr)
  return 0


if __name__ == "__main__":
  sys.exit(main())
