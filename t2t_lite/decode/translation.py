"""Decoding: the one pipeline from text to text that t2t-lite-decode, `t2t_lite.translate()`, the
dev metric of training runs and every signature of the exported SavedModel run.

  texts, scores = t2t_lite.translate(model_dir, ["A man rides a horse."], beam_size=4, alpha=0.6)

`Translator.decode_text(strings [B])` is one tf.function: invalid UTF-8 replaced by U+FFFD,
blank lines left blank, tokenization, truncation to max_input_length (flagged, never silent),
the search (beam search with its N best, or sampling) under the problem's constraint,
detokenization, the problem's own form of an output (a parser's trees) and, if asked, word
alignments. The SavedModel's signatures are this function (t2t_lite/decode/export.py), and
`Translator.translate(lines)` calls it on batches of lines of similar length.

`DecodeSettings` (decode_settings.py) says how to search, resolved in one place with one rule:
a value given by the caller (a flag), else hparams.json's, else the problem's (section 6.1).
`decode_with_prefix(strings [B], prefixes [B])` is the same function with a target prefix a
sentence: its outputs start with the prefix's words (a translator's autocompletion), and
`decode_with_constraints(strings [B], constraints [B, P])` with up to P target phrases a
sentence ("" for none) that its outputs contain (terminology; lexical.py).

Shapes: B sentences, N outputs a sentence (n_best or samples), S source and L output length.
"""
import dataclasses
from typing import Optional

import numpy as np
import tensorflow as tf

from t2t_lite.data.tokenizers import EOS_ID, PAD_ID, UNK_ID
from t2t_lite.decode import (alignment, forced_decoding, lexical, line_batches,
                             loading, sampling, search, shortlist)
from t2t_lite.decode import plan as decoding_plan
# The settings' owner is decode_settings.py; its names are also translation's, where every
# tool found them first.
from t2t_lite.decode.decode_settings import (ONE_TREE, TARGET_PREFIXES,  # noqa: F401
                                             DecodeSettings, DecodingError, check_request,
                                             forced)
from t2t_lite.modeling.span_parser import SpanParser

# Whitespace as Python's str.isspace() sees it (RE2's \s is ASCII only; \p{Z}: separators).
_BLANK = r"[\s\x0b\x1c-\x1f\x85\p{Z}]*"


class Translator(line_batches.LineDecoding, tf.Module):
  """Text in, text out, through one in-graph function (see the module docstring).

  Args:
    model: a Transformer, or an ensemble.Ensemble of several.
    tokenizer: the problem's tokenizer.
    **settings: DecodeSettings' fields.
    max_input_length: longer inputs are cut to it, EOS included (default: hparams.max_length).
    jit_compile: XLA-compile the search, over fixed-size key/value buffers (search.beams'
      static_shapes; what a TPU runs): once for every batch and source length, so lines are
      padded to multiples of `length_multiple` tokens to bound them.
    constraint: the problem's output constraint (e.g. a parser's grammar; search.beams).
    output_fn: the problem's in-graph form of its outputs, (sources string [B], outputs string
      [B, N]) -> string [B, N] (e.g. a parser's trees over the source words), or None.
    with_alignments: also give each output's word alignment to its source.
    vocabulary_shortlist: the setting `shortlist`'s table (from_model_dir reads or builds it).
    searches: how many searches a batch is split into, run at the same time (search.beams'
      `concurrent`; default 1). from_model_dir passes its decoding plan's (plan.py).
  """
  NEG_INF = lexical.NEG_INF  # the score of an n-best slot the search could not fill

  def __init__(self, model, tokenizer, *, max_input_length=None, jit_compile=False,
               length_multiple=8, constraint=None, output_fn=None, with_alignments=False,
               vocabulary_shortlist=None, searches=1, **settings):
    super().__init__(name="translator")
    self.model, self.tokenizer = model, tokenizer
    self.settings = DecodeSettings(**settings)
    check_request(jit_compile=jit_compile, max_input_length=max_input_length,
                  output_constraint=constraint is not None,
                  span_parser=isinstance(model, SpanParser), with_alignments=with_alignments,
                  **settings)
    self.max_input_length = (model.hparams.max_length if max_input_length is None
                             else max_input_length)
    self.jit_compile, self.length_multiple = jit_compile, length_multiple
    self.constraint, self.output_fn = constraint, output_fn
    self.with_alignments, self.searches = with_alignments, searches
    self.vocabulary_shortlist = vocabulary_shortlist if self.settings.shortlist else None
    if self.settings.shortlist:
      if vocabulary_shortlist is None:
        raise DecodingError("shortlist: no vocabulary_shortlist given (Translator.from_model_dir "
                            "reads or builds the run's)")
      if vocabulary_shortlist.vocab_size != model.vocab_size:
        raise DecodingError(f"the shortlist is of a vocabulary of {vocabulary_shortlist.vocab_size}"
                            f" ids, the model's has {model.vocab_size}")
    self._options = dict(max_input_length=max_input_length, jit_compile=jit_compile,
                         length_multiple=length_multiple, constraint=constraint,
                         output_fn=output_fn, with_alignments=with_alignments,
                         vocabulary_shortlist=vocabulary_shortlist, searches=searches,
                         **settings)
    self.loaded: Optional[loading.LoadedModel] = None  # Set by from_model_dir.
    self._continues_word = None  # _not_after_prefix's, found the first time it is asked for.
    # autograph=False: the searches are tf.while_loops as written, and converting the model's
    # and the tokenizer's Python to graph code would cost seconds at every start for nothing.
    self._search = (tf.function(self.search_ids, jit_compile=True, autograph=False)
                    if jit_compile else self.search_ids)
    # The graph functions, each traced on its first call (or by the export): the decode
    # functions of text (with prefixes, constraints, both), of ids, and forced scoring.
    graph = lambda f, *specs: tf.function(f, autograph=False, input_signature=list(specs))
    strings = lambda name: tf.TensorSpec([None], tf.string, name=name)  # [B]
    phrases = tf.TensorSpec([None, None], tf.string, name="constraints")  # [B, P]
    self.decode_text = graph(self._decode_text, strings("inputs"))
    self.decode_with_prefix = graph(self._decode_text, strings("inputs"), strings("prefixes"))
    self.decode_with_constraints = graph(
        lambda inputs, constraints: self._decode_text(inputs, constraints=constraints),
        strings("inputs"), phrases)
    self.decode_with_prefix_and_constraints = graph(  # They compose: composition.py.
        self._decode_text, strings("inputs"), strings("prefixes"), phrases)
    self.constraint_problems = graph(self._constraint_problems, strings("inputs"), phrases)
    self.decode_ids = graph(self._decode_ids, tf.TensorSpec([None, None], tf.int32,
                                                            name="inputs"))  # [B, S]
    self.score_text = graph(self._score_text, strings("sources"), strings("targets"))

  @classmethod
  def from_model_dir(cls, model_dir, checkpoint_path=None, *, precision="auto",
                     planner=decoding_plan.here, forcing=(), **kwargs):
    """The model of model_dir (or an ensemble: a list of model_dirs) from the checkpoint
    `checkpoint_path` names (default: the run's best model when it kept one, else its newest;
    loading.py; `self.loaded.which()` says which and why), computing in `precision`
    (mixed_precision.py) as the decoding plan `planner` decides with jit_compile (plan.here:
    for this machine; plan.elsewhere: for a graph served elsewhere, an export), and
    `self.loaded.computing()` names the plan; decoding settings left None resolved by
    DecodeSettings.resolve; the problem's constraint and output form; with the setting
    `shortlist`, the run's table (shortlist.for_run: read, or built and kept). `forcing`: what
    the caller will force through the search (TARGET_PREFIXES, CONSTRAINTS), refused here if
    it cannot be. A request that cannot be decoded is refused before the model loads
    (check_request), or, where it takes the model or its problem to know, before a shortlist
    is built and kept."""
    names = [f.name for f in dataclasses.fields(DecodeSettings)]
    given = {k: kwargs.pop(k) for k in names if k in kwargs}
    jit_compile = kwargs.get("jit_compile", False)
    check_request(forcing, jit_compile, kwargs.get("max_input_length"), **given)
    loaded = loading.load(model_dir, checkpoint_path, precision, jit_compile, planner)
    settings = DecodeSettings.resolve(loaded.problem, loaded.hparams, **given)
    check_request(forcing, jit_compile, output_constraint=getattr(
        loaded.problem, "decode_constraint", None) is not None,
        span_parser=isinstance(loaded.model, SpanParser),
        with_alignments=kwargs.get("with_alignments", False), **settings.as_kwargs())
    if settings.shortlist and kwargs.get("vocabulary_shortlist") is None:
      # The members of an ensemble share one vocabulary (loading.py): the first one's table.
      kwargs["vocabulary_shortlist"] = shortlist.for_run(loaded.model_dirs[0],
                                                         loaded.tokenizer.vocab_size)
    kwargs.setdefault("searches", loaded.plan.searches)
    translator = cls.of_problem(loaded.model, loaded.problem, loaded.model_dirs[0], settings,
                                loaded.tokenizer, **kwargs)
    translator.loaded = loaded
    return translator

  @classmethod
  def of_problem(cls, model, problem, directory, settings, tokenizer=None, **kwargs):
    """A Translator of `model` for `problem` with DecodeSettings `settings`: the problem's
    tokenizer (unless given), constraint (e.g. a parser's grammar) and output form, for the
    vocabulary in `directory` (a data_dir or model_dir)."""
    hooks = {"constraint": getattr(problem, "decode_constraint", None),
             "output_fn": getattr(problem, "decode_output_fn", None)}
    for name, make in hooks.items():
      kwargs.setdefault(name, make(directory) if make is not None else None)
    return cls(model, tokenizer or problem.tokenizer(directory), **settings.as_kwargs(),
               **kwargs)

  def with_options(self, **changes):
    """A Translator of the same model with some options or settings changed."""
    other = type(self)(self.model, self.tokenizer, **dict(self._options, **changes))
    other.loaded = self.loaded
    return other

  def _not_after_prefix(self):
    """bool [V]: the pieces that may not follow a target prefix (Tokenizer.continues_word),
    found once, eagerly, and a constant of every search with prefixes: not a regex over the
    vocabulary at each batch, and no string op inside a search that XLA compiles. Without a
    tokenizer (a Translator of ids, e.g. the benches'), none."""
    if self._continues_word is None:
      with tf.init_scope():
        self._continues_word = np.zeros([self.model.vocab_size], bool) if (
            self.tokenizer is None) else self.tokenizer.continues_word(
                tf.range(self.model.vocab_size)).numpy()
    return tf.constant(self._continues_word)

  def check_forcing(self, what=TARGET_PREFIXES):
    """Target prefixes and lexical constraints are forced in the beam search: refused in one
    line with what cannot force them (check_request)."""
    check_request([what], output_constraint=self.constraint is not None,
                  span_parser=isinstance(self.model, SpanParser), **self.settings.as_kwargs())

  # ------------------------------------------------------------------ a batch of Python lines
  def decode_batch(self, lines, prefixes=None, constraints=None):
    """line_batches' hook: str lists [B] (prefixes [B], constraints [B][P]) -> the decode
    function's result as numpy arrays, strings decoded."""
    decode = {(False, False): self.decode_text, (True, False): self.decode_with_prefix,
              (False, True): self.decode_with_constraints,
              (True, True): self.decode_with_prefix_and_constraints}[
                  (prefixes is not None, constraints is not None)]
    parts = [part for part in (lines, prefixes, constraints) if part is not None]
    return line_batches.as_numpy(decode(*[tf.constant(line_batches.rows(part), tf.string)
                              for part in parts]))

  def constraint_problems_of(self, lines, constraints):
    """line_batches' hook: constraint_problems of str lists [B] and [B][P] as numpy arrays."""
    return line_batches.as_numpy(self.constraint_problems(tf.constant(lines, tf.string),
                                              tf.constant(constraints, tf.string)))

  def score_batch(self, sources, targets):
    """line_batches' hook: score_text of str lists [B] as numpy arrays."""
    return line_batches.as_numpy(self.score_text(tf.constant(sources, tf.string),
                                     tf.constant(targets, tf.string)))

  beam_size = property(lambda self: self.settings.beam_size)
  alpha = property(lambda self: self.settings.alpha)
  extra_length = property(lambda self: self.settings.extra_length)

  # ------------------------------------------------------------------ in the graph
  def _decode_text(self, inputs, prefixes=None, constraints=None):
    """string [B] (and target prefixes string [B], or constraints string [B, P]) ->
    {"outputs": string [B, N], "scores": float32 [B, N], "truncated": bool [B] (and
    "alignments": string [B, N], Pharaoh "s-t" pairs of words)}. A blank input's output is
    blank, whatever its prefix or constraints."""
    inputs = tf.ensure_shape(inputs, [None], name="inputs_must_be_a_vector_of_sentences")
    text = _valid_utf8(inputs)
    blank = tf.strings.regex_full_match(text, _BLANK)  # [B], as Python's not line.strip()
    prefix_tokens = phrases = None
    if prefixes is not None:
      self.check_forcing()
      prefixes = tf.ensure_shape(prefixes, [None], name="prefixes_must_be_a_vector_of_strings")
      with tf.control_dependencies([tf.debugging.assert_equal(
          tf.size(prefixes), tf.size(inputs), message="one prefix for each input")]):
        prefix_tokens = self.tokenizer.tokenize(_valid_utf8(prefixes))
    if constraints is not None:
      phrases = self._phrases(inputs, constraints)
    result = self._decode_tokens(self.tokenizer.tokenize(text), blank, prefix_tokens, phrases)
    ids = result.pop("ids")  # [B, N, L]
    batch, n = tf.shape(ids)[0], tf.shape(ids)[1]
    flat = self.tokenizer.detokenize(tf.reshape(ids, [batch * n, -1]))  # [B*N]
    outputs = tf.reshape(_valid_utf8(flat), [batch, n])
    if self.output_fn is not None:
      outputs = tf.where(blank[:, None], "", self.output_fn(text, outputs))
    return dict(result, outputs=outputs)

  def _decode_ids(self, inputs):
    """int32 [B, S] 0-padded (an EOS, if any, ends a row) -> {"outputs": int32 [B, N, L]
    0-padded without EOS, "scores", "truncated"}."""
    inputs = tf.ensure_shape(inputs, [None, None], name="inputs_must_be_a_matrix_of_ids")
    checks = [
        tf.debugging.assert_non_negative(inputs, message="input ids must be >= 0"),
        tf.debugging.assert_less(inputs, self.model.vocab_size,
                                 message=f"input ids must be < vocab_size={self.model.vocab_size}")]
    with tf.control_dependencies(checks):
      tokens = tf.ragged.boolean_mask(inputs, tf.not_equal(search.trim_at_eos(inputs), PAD_ID))
    result = self._decode_tokens(tokens, tf.zeros([tf.shape(inputs)[0]], tf.bool))
    result["outputs"] = result.pop("ids")
    result.pop("alignments", None)
    return result

  def _phrases(self, inputs, constraints):
    """string [B], string [B, P] ("" for none) -> ragged int32 [B, P, (T)] tokens."""
    self.check_forcing("lexical constraints")
    constraints = tf.ensure_shape(constraints, [None, None],
                                  name="constraints_must_be_a_matrix_of_phrases")
    rows, width = tf.shape(constraints)[0], tf.shape(constraints)[1]
    with tf.control_dependencies([tf.debugging.assert_equal(
        rows, tf.size(inputs), message="one row of constraints for each input")]):
      tokens = self.tokenizer.tokenize(_valid_utf8(tf.reshape(constraints, [-1])))  # [B*P, (T)]
    dtype = tokens.row_splits.dtype
    return tf.RaggedTensor.from_uniform_row_length(tokens, tf.cast(width, dtype),
                                                   nrows=tf.cast(rows, dtype))

  def _constraint_problems(self, inputs, constraints):
    """string [B], string [B, P] -> {"unknown": bool [B], "too_long": bool [B], "tokens":
    int32 [B], "longest": int32 [B]}: the constraints a search cannot meet (a word not in the
    vocabulary; more tokens than the output may have, `longest` without EOS), for refusing
    them in one line before decoding (decode_lines)."""
    _, _, lengths = self._source(self.tokenizer.tokenize(_valid_utf8(inputs)))
    unknown, too_long, count = lexical.problems(self._phrases(inputs, constraints), lengths,
                                                self.settings.extra_length, UNK_ID)
    empty = tf.equal(lengths, 0)  # A blank line's output is blank, whatever its constraints.
    return {"unknown": unknown & ~empty, "too_long": too_long & ~empty, "tokens": count,
            "longest": lengths + self.settings.extra_length}

  def _source(self, tokens, add_eos=True):
    """ragged [B, (T)] tokens without EOS -> (inputs int32 [B, S] with EOS, truncated [B],
    lengths [B] without EOS); add_eos=False: a target prefix, cut as a source."""
    truncated = tokens.row_lengths() > self.max_input_length - 1  # [B]
    tokens = tokens[:, :self.max_input_length - 1]
    if add_eos:
      tokens = tf.concat([tokens, tf.RaggedTensor.from_tensor(
          tf.fill([tokens.nrows(), 1], EOS_ID))], axis=1)
    inputs = tokens.to_tensor(PAD_ID)  # [B, S]
    if self.jit_compile:  # Few lengths, few XLA compilations.
      inputs = tf.pad(inputs, [[0, 0], [0, (-tf.shape(inputs)[1]) % self.length_multiple]])
    return inputs, truncated, tf.cast(tokens.row_lengths(), tf.int32) - int(add_eos)

  def _decode_tokens(self, tokens, blank, prefix_tokens=None, phrases=None):
    """-> {"ids": int32 [B, N, L] without EOS, 0-padded, "scores" [B, N], "truncated" [B]};
    no ids and score 0 for blank or empty inputs. prefix_tokens: ragged [B, (P)] tokens every
    output starts with; the longest output is then max(source, prefix) + extra_length.
    phrases: ragged [B, P, (T)], the target phrases each output contains."""
    inputs, truncated, lengths = self._source(tokens)
    empty = blank | tf.equal(lengths, 0)  # [B]
    prefix, phrases = None, (None if phrases is None else self._lexical(phrases, lengths, empty))
    if prefix_tokens is not None:  # Cut as sources are (a prefix is never cut silently).
      # Asserted known (the export's only check; decode_lines refuses a line first).
      with tf.control_dependencies([tf.debugging.assert_equal(tf.reduce_any(
          lexical.unknown(prefix_tokens, UNK_ID) & ~empty), False,
          message="a target prefix has a word that is not in the vocabulary")]):
        prefix, prefix_cut, prefix_lengths = self._source(prefix_tokens, add_eos=False)
      prefix = tf.where(empty[:, None], PAD_ID, prefix)  # [B, P]
      truncated |= prefix_cut
      lengths = tf.maximum(lengths, prefix_lengths)
    # Empty inputs decode one step only (their output is replaced by nothing below).
    max_lengths = tf.where(empty, 1, lengths + 1 + self.settings.extra_length)
    ids, scores = self._search(inputs, max_lengths, prefix, phrases)  # [B, N, L], [B, N]
    ids = tf.where(empty[:, None, None], PAD_ID, ids)
    result = {"scores": tf.where(empty[:, None], 0.0, scores),
              "truncated": truncated & ~blank}
    if self.with_alignments:
      result["alignments"] = tf.where(empty[:, None], "", alignment.pharaoh(
          self.model, self.tokenizer, inputs, ids))
    trimmed = search.trim_at_eos(tf.reshape(ids, [-1, tf.shape(ids)[2]]))
    trimmed = tf.reshape(trimmed, tf.shape(ids))
    width = tf.reduce_max(tf.reduce_sum(tf.cast(trimmed != PAD_ID, tf.int32), axis=2))
    return dict(result, ids=trimmed[:, :, :width])

  def _lexical(self, phrases, lengths, empty):
    """ragged [B, P, (T)] phrases -> lexical.Constraints [B, C] (none for empty inputs),
    asserted to be met (the export's only check; decode_lines refuses a line first)."""
    unknown, too_long, _ = lexical.problems(phrases, lengths, self.settings.extra_length, UNK_ID)
    with tf.control_dependencies([tf.debugging.assert_equal(
        tf.reduce_any((unknown | too_long) & ~empty), False, message=(
            "a constraint has a word that is not in the vocabulary, or a sentence's "
            "constraints do not fit in its longest output (source tokens + extra_length)"))]):
      ids, phrase = lexical.from_phrases(phrases)  # [B, C]
    if self.jit_compile:  # Few widths, few XLA compilations.
      pad = [[0, 0], [0, (-tf.shape(ids)[1]) % self.length_multiple]]
      ids, phrase = tf.pad(ids, pad), tf.pad(phrase, pad, constant_values=-1)
    return lexical.Constraints(ids, tf.where(empty[:, None], -1, phrase))

  def search_ids(self, inputs, max_lengths, prefix=None, phrases=None):
    """The search (or the sampler) every decode function runs, and what the LiteRT export
    converts: inputs int32 [B, S] with EOS, max_lengths int32 [B], target prefixes [B, P],
    lexical.Constraints [B, C] -> (ids int32 [B, N, L], scores [B, N])."""
    s = self.settings
    # Under XLA, fixed-size key/value buffers: the only form it compiles (search.beams).
    if s.sample:
      return sampling.sample(self.model, inputs, num_samples=s.n_best, temperature=s.temperature,
                             top_k=s.top_k, top_p=s.top_p, seed=s.seed,
                             extra_length=s.extra_length, max_lengths=max_lengths,
                             constraint=self.constraint, static_shapes=self.jit_compile)
    ids, scores = search.beams(self.model, inputs, beam_size=s.beam_size, alpha=s.alpha,
                               extra_length=s.extra_length, max_lengths=max_lengths,
                               constraint=self.constraint, static_shapes=self.jit_compile,
                               concurrent=self.searches,
                               shortlist=self.vocabulary_shortlist, prefix=prefix,
                               not_after_prefix=None if prefix is None and phrases is None
                               else self._not_after_prefix(), phrases=phrases,
                               bracket_offset=s.bracket_offset)
    return ids[:, :s.n_best], scores[:, :s.n_best]

  def _score_text(self, sources, targets):
    """Forced decoding: string [B] sources and targets -> {"logprob": log P(target + EOS |
    source) float32 [B], "tokens": int32 [B] (EOS included), "score": logprob / lp(tokens)
    with the settings' alpha, as beam search ranks outputs, "truncated": bool [B]}."""
    if isinstance(self.model, SpanParser):
      raise DecodingError(f"scoring given outputs with a span parser: {ONE_TREE}")
    inputs, truncated, _ = self._source(self.tokenizer.tokenize(_valid_utf8(sources)))
    target_ids = self.tokenizer.tokenize(_valid_utf8(targets), add_eos=True).to_tensor(PAD_ID)
    return dict(forced_decoding.scores(self.model, inputs, target_ids, self.settings.alpha),
                truncated=truncated)


def _valid_utf8(strings):
  """Invalid UTF-8 replaced by U+FFFD, so that every element gets an answer."""
  return tf.strings.unicode_transcode(strings, input_encoding="UTF-8", output_encoding="UTF-8",
                                      errors="replace", replacement_char=0xFFFD)


def translate(model_dir, sentences, beam_size=None, alpha=None, *, checkpoint_path=None,
              extra_length=None, batch_size=32, precision="auto", prefixes=None, constraints=None,
              **settings):
  """Translates `sentences` with the model in model_dir (or an ensemble: a list of them) ->
  (texts, scores), in order.

  checkpoint_path: None (the run's best model when it kept one, else its newest checkpoint),
  "best", "newest" or a path (loading.py). beam_size / alpha / extra_length default to
  hparams.json's, else the problem's (the paper: 4, 0.6, 50). Scores are the length-penalised
  log-probabilities of the outputs (beam 1: log-probabilities; sampled: log-probabilities).
  `settings`: DecodeSettings' other fields (n_best: N outputs a sentence, as lists; sample,
  temperature, top_k, top_p, seed, shortlist) or Translator's options (e.g. jit_compile=True:
  the XLA-compiled search). precision: "auto" (the fastest on this machine), "none" (float32),
  "bf16", "fp16" or "int8" (mixed_precision.py). prefixes: the target words each sentence's
  outputs start with; constraints: the target phrases each contains (Translator.translate).
  Builds the model each call: use `Translator.from_model_dir` for many calls.
  """
  if isinstance(sentences, str):
    raise DecodingError("translate() takes a list of sentences, got one string")
  translator = Translator.from_model_dir(
      model_dir, checkpoint_path, beam_size=beam_size, alpha=alpha, extra_length=extra_length,
      precision=precision, forcing=forced(prefixes is not None, constraints is not None),
      **settings)
  return translator.translate(list(sentences), batch_size=batch_size, prefixes=prefixes,
                              constraints=constraints)
