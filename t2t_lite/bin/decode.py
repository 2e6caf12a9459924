"""t2t-lite-decode: translate a file (or stdin) with a trained model_dir; score it if asked.

  t2t-lite-decode --model_dir=runs/ende --input_file=test.en --output_file=test.de.out \\
      --reference_file=test.de
  echo "A man rides a horse." | t2t-lite-decode --model_dir=runs/ende
  t2t-lite-decode --model_dir=runs/a --model_dir=runs/b --n_best=4 --input_file=test.en

One output line per input line, in input order: the problem's form of an output (a parser's
tree). The input is read in windows of --window lines, each sorted into batches of similar
length (longest first), decoded, written and flushed before the next is read; --continue_output
finishes an interrupted decode; a terminal on stdin (or --interactive) gets each line's output
as soon as the line is typed; with --target_prefix a line is 'source<TAB>prefix', and its
outputs start with the prefix's words (a translator's autocompletion); with --constraints a line
is 'source<TAB>phrase<TAB>phrase...', and its outputs contain every phrase (terminology; refused
naming the line where a phrase cannot be met); with both, 'source<TAB>prefix<TAB>phrase...' (the
prefix field blank for none). An empty input line gives an empty output line; a
line longer than the model's max_length tokens is cut to it, with a warning naming the line.
Beam size, alpha and the extra output length default to hparams.json's, else the problem's (the
paper: 4, 0.6, 50). --n_best=N writes Moses' n-best format ("i ||| output ||| score", N a line);
--sample draws outputs instead (docs/decoding.md); several --model_dir decode as one ensemble;
--with_alignments adds word alignments. It runs the same in-graph function as the exported
SavedModel (t2t_lite/decode/translation.py); --xla compiles its search. --engine=litert decodes
with an exported .tflite model instead (t2t_lite/litert/: numpy, ai_edge_litert and
sentencepiece, no TensorFlow): --model_dir is then a t2t-lite-export --format=litert directory,
or a run whose export is made on first use and kept in model_dir/litert/. The model is the run's
best when it kept one (model_dir/best/), else its newest checkpoint (--checkpoint_path chooses):
the first line on stderr names it and says why. A file that is not UTF-8 text (see
text_lines.MAX_NOT_TEXT) is refused.

With --reference_file, prints one JSON line of scores to stderr: for translation, sacrebleu's
detokenized BLEU with its signature and the paper's tokenized BLEU with compound splitting
(see t2t_lite/data/scoring.py); for parsing, EVALB's (COLLINS.prm) bracket precision, recall, F1,
exact match and the sentences scored, skipped and rejected (t2t_lite/parsing/evalb.py), and with
--evalb_report FILE evalb's per-sentence table; for the algorithmic problems, accuracy; and
the decoding plan the scores were decoded with ("plan": t2t_lite/decode/plan.py), which the
first line names too.
"""
import contextlib
import itertools
import json
import logging
import sys
import time

import tqdm

from t2t_lite.bin import cli, flags, text_lines
from t2t_lite.decode import plan as decoding_plan
from t2t_lite.decode.decode_settings import (DecodeSettings, DecodingError, check_request,
                                             forced)
from t2t_lite.errors import T2TLiteError
from t2t_lite.rundir import run_files

PROG = "t2t-lite-decode"
logger = logging.getLogger(PROG)


def parse_args(argv):
  parser = cli.ArgumentParser(prog="t2t-lite-decode", description=__doc__.split("\n")[0])
  flags.add_model_flags(parser, ensemble=True)
  parser.add_argument("--input_file", default="-", help="one sentence a line; - = stdin")
  parser.add_argument("--output_file", default="-",
                      help="- = stdout; not the input file (refused under any name)")
  parser.add_argument("--reference_file", default=None,
                      help="references, one a line: print the problem's scores (stderr, JSON) "
                           "of the best outputs")
  parser.add_argument("--evalb_report", default=None,
                      help="parsing, with --reference_file: write EVALB's per-sentence report here")
  flags.add_fields(parser, DecodeSettings)
  parser.add_argument("--with_alignments", action="store_true",
                      help="append ' ||| ' and each output's word alignment to its source, "
                           "Pharaoh pairs 's-t' of 0-based word indices (from the last decoder "
                           "layer's attention)")
  parser.add_argument("--target_prefix", action="store_true",
                      help="each input line is 'source<TAB>prefix': its outputs start with the "
                           "prefix's words, scored as part of them (a line without a TAB has "
                           "no prefix); with --constraints, 'source<TAB>prefix<TAB>phrase...'")
  parser.add_argument("--constraints", action="store_true",
                      help="each input line is 'source<TAB>phrase<TAB>phrase...': its outputs "
                           "contain every phrase, as whole words, in any order (lexical "
                           "constraints, searched with dynamic beam allocation)")
  parser.add_argument("--batch_size", type=flags.positive_int, default=32,
                      help="sentences per batch")
  parser.add_argument("--window", type=int, default=2048,
                      help="input lines read, decoded (sorted by length into batches) and "
                           "written at a time, flushed before the next are read: memory holds "
                           "one window whatever the input's length")
  parser.add_argument("--interactive", action="store_true",
                      help="decode each line as soon as it is read and print its output at once "
                           "(the default when stdin is a terminal); --verbose adds its latency")
  parser.add_argument("--continue_output", action="store_true",
                      help="after an interrupted decode: keep --output_file's complete lines and "
                           "decode from the first input line without one, appending (one "
                           "output a line: not with --n_best); an output of more lines than "
                           "the input is refused, as another input's")
  parser.add_argument("--max_input_length", type=int, default=None,
                      help="longer inputs are cut, with a warning (default: hparams max_length)")
  parser.add_argument("--xla", action="store_true",
                      help="XLA-compile the search, over fixed-size key/value buffers (as on a "
                           "TPU; one compilation per batch shape)")
  parser.add_argument("--engine", default="auto", choices=list(decoding_plan.ENGINES),
                      help="tensorflow: the run's checkpoint in TensorFlow; litert: an exported "
                           ".tflite model in ai_edge_litert's interpreter (pip install -e "
                           "'.[litert]'; --model_dir an export directory, or a run whose export "
                           "is made on first use), without sampling, --shortlist, --constraints, "
                           "alignments or an ensemble; --precision none / int8 choose its float32 "
                           "/ int8 weights; auto: tensorflow (decode's plan names it)")
  parser.add_argument("--no_progress", action="store_true", help="no progress bar on stderr")
  flags.add_verbose_flag(parser)
  return parser.parse_args(argv)


def output_lines(results, n_best, with_alignments, neg_inf, first=0):
  """The lines decode writes: one output a line; with n_best > 1 Moses' n-best format,
  "i ||| output ||| score" for each of a line's outputs, i its 0-based line number (the
  results' first line is line `first`; slots the search could not fill, scored `neg_inf`
  (the translator's NEG_INF), left out); with alignments, " ||| s-t ..." after the
  output."""
  lines = []
  for i, (outputs, scores) in enumerate(zip(results["outputs"], results["scores"]), first):
    alignments = (results["alignments"][i - first] if with_alignments
                  else [None] * len(outputs))
    for output, score, links in zip(outputs, scores, alignments):
      if n_best == 1:
        lines.append(output if links is None else f"{output} ||| {links}")
        break
      if score > neg_inf / 2:
        line = f"{i} ||| {output} ||| {score:.6f}"
        lines.append(line if links is None else f"{line} ||| {links}")
  return lines


def main(argv=None):
  args = parse_args(argv)
  cli.configure_logging(args.verbose, logging.INFO)
  wrong = _wrong_flags(args)
  if wrong:
    return cli.fail(PROG, wrong)
  interactive = args.interactive or (args.input_file == "-" and sys.stdin is not None
                                     and sys.stdin.isatty())
  try:
    engine, _ = decoding_plan.engine(args.engine)
    _check_paths(args, engine)
    check_request(forced(args.target_prefix, args.constraints), args.xla, args.max_input_length,
                  with_alignments=args.with_alignments, engine=engine,
                  ensemble=len(args.model_dir) > 1,
                  **flags.field_values(args, DecodeSettings))  # Before TensorFlow loads.
    if engine == "litert":
      _check_litert(args)
    done, keep = (text_lines.lines_done(args.output_file, args.input_file)
                  if args.continue_output else (0, None))
    total = text_lines.count_lines(args.input_file)
    windows, lines, references = _input(args, interactive, done)
    first = next(windows, [])  # Read and checked before the model is loaded.
    translator = _translator(args, engine, first, done)
  except T2TLiteError as e:
    return cli.fail(PROG, e, e.exit_status)
  except FileNotFoundError as e:
    return cli.fail(PROG, e)
  loaded = _Loaded(translator)
  if args.evalb_report and not hasattr(loaded.problem, "evalb_report"):
    return cli.fail(PROG, f"--evalb_report is for parsing problems, not {loaded.problem.name}")
  _log_start(translator, loaded, total, done, args.output_file)
  output = text_lines.StreamedOutput(args.output_file, keep)
  texts = []  # the best outputs, with --reference_file
  try:
    with contextlib.closing(output):  # Closed (and a failure to, reported) whatever happens.
      _decode_windows(translator, itertools.chain([first], windows), output, args, done,
                      total, interactive, texts if references is not None else None)
    if references is not None:
      lines = _split(lines, args)[0]
      scores = dict(loaded.problem.score(lines, texts, references), sentences=len(lines))
      print(json.dumps(dict(scores, plan=loaded.plan.record())), file=sys.stderr)
      if args.evalb_report:
        text_lines.write_lines(args.evalb_report,
                    [loaded.problem.evalb_report(lines, texts, references).rstrip("\n")])
  except KeyboardInterrupt:  # Ctrl-C, e.g. interactive: what was written stays
    return 130
  except T2TLiteError as e:  # A later window that is not text, a full disk: what was written
    return cli.fail(PROG, e, e.exit_status)  # before it stays.
  return 0


def _wrong_flags(args):
  """What is wrong with the flags alone, in one line, or None."""
  if args.window < 1:
    return f"--window must be >= 1, got {args.window}"
  if args.evalb_report and not args.reference_file:
    return "--evalb_report needs --reference_file"
  if args.continue_output and (args.output_file == "-" or args.n_best != 1
                               or args.reference_file):
    return ("--continue_output needs an --output_file of one output a line (no --n_best, no "
            "--reference_file)")
  return None


def _translator(args, engine, first, done):
  """The engine's translator of --model_dir, and the first window's prefixes and phrases
  checked (line `done` + 1 first) before anything is written."""
  if engine == "litert":
    translator = _litert_translator(args)
  else:
    from t2t_lite.decode import translation
    translator = translation.Translator.from_model_dir(
        flags.model_dirs(args), args.checkpoint_path, max_input_length=args.max_input_length,
        jit_compile=args.xla, precision=args.precision, with_alignments=args.with_alignments,
        **flags.field_values(args, DecodeSettings))
  sources, forced_lines = _split(first, args)
  if "prefixes" in forced_lines:
    translator.check_prefixes(sources, forced_lines["prefixes"], first_number=done + 1)
  if "constraints" in forced_lines:
    translator.check_constraints(sources, forced_lines["constraints"], first_number=done + 1)
  return translator


def _check_paths(args, engine):
  """Refuses a bad output file (one that is an input, too), a model_dir without a run (or,
  for the LiteRT engine, without an export either) or a missing input file before any is read:
  these checks need no TensorFlow, which reading the input and the model load."""
  reads = (args.input_file, args.reference_file)
  text_lines.check_output_file(args.output_file, reads)
  text_lines.check_output_file(args.evalb_report, reads + (args.output_file,), "--evalb_report")
  for model_dir in args.model_dir:
    if engine == "litert":
      from t2t_lite.litert import exported
      if exported.is_export(model_dir):
        continue
    run_files.check_run_dir(model_dir)
  for path in filter(None, (args.input_file, args.reference_file)):
    text_lines.check_input_file(path)


def _check_litert(args):
  """What the LiteRT engine refuses of a request before anything is read: a precision its
  exports do not hold, a checkpoint or an XLA search for an export directory, and for a run
  what its export would refuse (export_checks.check_litert_request)."""
  from t2t_lite.decode import export_checks
  from t2t_lite.litert import exported
  quantization = decoding_plan.litert_quantization(args.precision)
  (model_dir,) = args.model_dir  # An ensemble was refused (check_request).
  if exported.is_export(model_dir):
    if args.checkpoint_path:
      raise exported.LiteRTError(f"--checkpoint_path with the LiteRT export {model_dir}: it "
                                   "holds the weights it was exported with")
    return
  export_checks.check_litert_request(
      model_dir, quantization=quantization, max_input_length=args.max_input_length,
      forcing=forced(args.target_prefix, args.constraints),
      **flags.field_values(args, DecodeSettings))


def _litert_translator(args):
  """The LiteRT engine's translator: of the export directory --model_dir, or of the run's
  export (made on first use, with TensorFlow: litert.runtime.export_for)."""
  from t2t_lite.litert import runtime
  settings = flags.field_values(args, DecodeSettings)
  directory = runtime.export_for(
      args.model_dir[0], decoding_plan.litert_quantization(args.precision),
      checkpoint_path=args.checkpoint_path, max_input_length=args.max_input_length, **settings)
  precision = args.precision if directory == args.model_dir[0] else "auto"
  return runtime.LiteRTTranslator(directory, max_input_length=args.max_input_length,
                                 precision=precision, **settings)


class _Loaded:
  """What the rest of decode reads of a loaded model whatever the engine: which model
  (`which()`), the plan (`plan`, `computing()`) and, when scores are asked for, the problem
  (the LiteRT engine's from its export's JSON, imported only then)."""

  def __init__(self, translator):
    self.translator = translator
    self.loaded = getattr(translator, "loaded", None)
    self.plan = self.loaded.plan if self.loaded else translator.plan

  def which(self):
    return (self.loaded or self.translator).which()

  def computing(self):
    return self.plan.describe()

  @property
  def problem(self):
    if self.loaded:
      return self.loaded.problem
    import t2t_lite
    return t2t_lite.get_problem(self.translator.export.problem)


def _input(args, interactive, done):
  """(the input's windows, and with --reference_file all its lines and the references)."""
  if not args.reference_file:
    window = 1 if interactive else args.window
    return text_lines.read_windows(args.input_file, window, skip=done), None, None
  lines = text_lines.read_lines(args.input_file)
  references = text_lines.read_lines(args.reference_file)
  if len(references) != len(lines):  # Scores need every output: the input is read whole.
    from t2t_lite.data import scoring
    raise scoring.MetricError(f"{args.reference_file} has {len(references)} lines but "
                              f"{args.input_file} has {len(lines)}")
  windows = [lines[i:i + args.window] for i in range(0, len(lines), args.window)]
  return iter(windows), lines, references


def _split(lines, args):
  """Input lines -> (sources, decode_lines' prefixes= and / or constraints=)."""
  return text_lines.split_forcing(lines, args.target_prefix, args.constraints)


def _log_start(translator, loaded, total, done, output_file):
  """The first line: what is decoded, with which model, how, and the decoding plan (ending with
  the precision)."""
  settings = translator.settings
  how = (f"sampling {settings.n_best} a line (temperature {settings.temperature:g}, top_k "
         f"{settings.top_k}, top_p {settings.top_p:g}, seed {settings.seed})" if settings.sample
         else f"beam {settings.beam_size}, alpha {settings.alpha:g}")
  what = "stdin's lines" if total is None else f"{total - done} lines"
  if done:
    what += f" (after the {done} already in {output_file})"
  logger.info("decoding %s with %s; %s, max output = input + %d; %s", what, loaded.which(),
              how, settings.extra_length, loaded.computing())


def _decode_windows(translator, windows, output, args, done, total, interactive, texts):
  """Decodes and writes each window in turn (a window is read only once the one before it is
  written); the best outputs are appended to `texts` unless it is None. A window that is not
  text is refused saying how many lines were written before it."""
  number = done
  with tqdm.tqdm(total=None if total is None else total - done, unit="sent", file=sys.stderr,
                 disable=args.no_progress or interactive) as bar:
    try:
      for window in windows:
        start = time.perf_counter()
        sources, forced = _split(window, args)
        results = translator.decode_lines(sources, args.batch_size, progress=bar.update,
                                          first_number=number + 1, **forced)
        output.write(output_lines(results, translator.settings.n_best, args.with_alignments,
                                  first=number, neg_inf=translator.NEG_INF))
        if interactive and args.verbose:
          logger.info("line %d: %.0f ms", number + 1, (time.perf_counter() - start) * 1e3)
        if texts is not None:
          texts.extend(outputs[0] for outputs in results["outputs"])
        number += len(window)
    except DecodingError as e:
      raise DecodingError(f"{e} (the {number - done} lines before it were written; "
                          "--continue_output goes on after them)") from None


if __name__ == "__main__":
  sys.exit(main())
