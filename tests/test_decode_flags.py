"""Decoding settings have one declaration: DecodeSettings' fields, whose flags every tool makes
from them (help and default beside the field), and which an export records, every one."""
import argparse
import dataclasses
import json
import os

import pytest

from t2t_lite import get_problem
from t2t_lite.bin import attention, decode, export as export_cli, flags, score
from t2t_lite.decode import export
from t2t_lite.decode.translation import DecodeSettings
from t2t_lite.modeling import mixed_precision

FIELDS = {field.name: field for field in dataclasses.fields(DecodeSettings)}
# The fields each tool takes (the score's is its length penalty; the pictures translate once),
# and the tool's required flags.
TOOLS = {
    decode: (set(FIELDS), ["--model_dir=m"]),
    export_cli: (set(FIELDS), ["--model_dir=m", "--export_dir=e"]),
    score: ({"alpha"}, ["--model_dir=m", "--source_file=s", "--target_file=t"]),
    attention: ({"beam_size", "alpha", "extra_length"},
                ["--model_dir=m", "--text=x", "--output_dir=o"])}


def _parser(tool, monkeypatch):
  """The argument parser the tool's parse_args builds."""
  kept, parse = [], argparse.ArgumentParser.parse_args
  monkeypatch.setattr(argparse.ArgumentParser, "parse_args",
                      lambda self, *args: kept.append(self) or parse(self, *args))
  tool.parse_args(TOOLS[tool][1])
  return kept[0]


@pytest.mark.parametrize("tool", list(TOOLS), ids=lambda tool: tool.__name__.split(".")[-1])
def test_every_decode_setting_has_exactly_one_flag_with_its_default_and_help(tool, monkeypatch):
  parser, names = _parser(tool, monkeypatch), TOOLS[tool][0]
  for name, field in FIELDS.items():
    actions = [a for a in parser._actions if f"--{name}" in a.option_strings]
    assert len(actions) == (name in names), name
    if actions:
      assert actions[0].default == (None if field.metadata["resolved"] else field.default), name
      assert actions[0].help == field.metadata["help"], name
  # Nothing else in the tool sets a field: each setting's flag is the field's own.
  assert {a.dest for a in parser._actions} & set(FIELDS) == names


def test_flags_give_the_settings_the_tools_pass():
  parser = argparse.ArgumentParser()
  flags.add_fields(parser, DecodeSettings)
  args = parser.parse_args(["--beam_size=3", "--sample", "--top_p=0.5", "--seed=7"])
  assert flags.field_values(args, DecodeSettings) == dict(
      beam_size=3, alpha=None, extra_length=None, bracket_offset=None, n_best=1, sample=True,
      temperature=1.0, top_k=0, top_p=0.5, seed=7, shortlist=False)
  assert parser.parse_args(["--nosample"]).sample is False
  assert parser.parse_args(["--no-sample"]).sample is False


def test_the_export_records_every_setting_it_was_built_with(make_random_model_dir, tmp_path):
  model_dir = make_random_model_dir("flags", "a man rides horse the dog runs".split())
  path = export.export_model_dir(model_dir, str(tmp_path / "exports"), sample=True, n_best=2,
                                 temperature=0.5, top_k=3, seed=4, extra_length=5)
  with open(os.path.join(path, "assets.extra", export.SETTINGS_FILE)) as f:
    recorded = json.load(f)
  auto, why = mixed_precision.resolve("auto", xla=False)  # the default: this machine's choice
  assert {name: recorded[name] for name in FIELDS} == dict(
      beam_size=4, alpha=0.6, extra_length=5, bracket_offset=0.0, n_best=2, sample=True,
      temperature=0.5, top_k=3, top_p=1.0, seed=4,
      shortlist=False)  # beam_size, alpha and bracket_offset: multi30k_ende's
  assert {name: recorded[name] for name in (
      "max_input_length", "precision", "jit_compile", "with_alignments", "vocab_size",
      "checkpoint")} == dict(max_input_length=64, precision=auto, jit_compile=False,
                             with_alignments=False, checkpoint=os.path.join(model_dir, "ckpt-1"),
                             vocab_size=get_problem("multi30k_ende").tokenizer(
                                 model_dir).vocab_size)
  assert recorded["precision_chosen"] == f"precision {auto} ({why})"
  assert recorded["checkpoint_chosen"] == (
      f"{model_dir}/ckpt-1 (its newest checkpoint that reads; the run kept no best model)")
