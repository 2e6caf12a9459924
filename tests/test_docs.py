"""The docs cannot drift from the tools: every `t2t-lite-*` command line written in README.md and
docs/ parses with that tool's own argument parser, and README's Python API runs as written."""
import importlib
import importlib.metadata
import pathlib
import re
import shlex
import tempfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))


def _tools():
  """{"t2t-lite-train": its module, ...} from the installed console scripts."""
  scripts = [e for e in importlib.metadata.entry_points(group="console_scripts")
             if e.name.startswith("t2t-lite-")]
  return {e.name: importlib.import_module(e.value.split(":")[0]) for e in scripts}


def _shell_commands(text):
  """Commands of a shell block: continuation lines joined, comments dropped, split at && | ;"""
  text = re.sub(r"\\\n\s*", " ", text)
  for line in text.splitlines():
    line = line.split(" #")[0].strip()
    if line.startswith("#"):
      continue
    for part in re.split(r"&&|\|\||[|;]", line):
      yield part.strip()


def _code(text):
  """(line number, text) of each fenced shell block and of each inline `t2t-lite-...` span."""
  found, block, fence_line = [], None, 0
  for number, line in enumerate(text.splitlines(), 1):
    if line.startswith("```"):
      if block is None:
        block, fence_line = ([] if line.strip("` ") in ("", "sh", "bash") else None), number
        if block is None:  # another language: skip to its closing fence
          block = False
      else:
        if block:
          found.append((fence_line + 1, "\n".join(block)))
        block = None
      continue
    if block is not None:
      if block is not False:
        block.append(line)
      continue
    found += [(number, m.group(1)) for m in re.finditer(r"`(t2t-lite-[^`]+)`", line)]
  return found


def command_lines():
  """(file:line, tool, argv) of every t2t-lite-* command written in README.md and docs/."""
  found = []
  for path in DOCS:
    for number, body in _code(path.read_text()):
      for command in _shell_commands(body):
        if "t2t-lite-" not in command:
          continue
        words = shlex.split(command)
        for i, word in enumerate(words):
          name = word.rsplit("/", 1)[-1]  # .venv/bin/t2t-lite-train -> t2t-lite-train
          if re.fullmatch(r"t2t-lite-[a-z-]+", name):
            found.append((f"{path.relative_to(ROOT)}:{number}", name, words[i + 1:]))
            break
  return found


def test_docs_name_every_tool_and_each_command_parses():
  tools = _tools()
  lines = command_lines()
  assert set(tools) == {"t2t-lite-datagen", "t2t-lite-train", "t2t-lite-decode",
                        "t2t-lite-avg-checkpoints", "t2t-lite-attention", "t2t-lite-export",
                        "t2t-lite-score", "t2t-lite-tune"}
  assert {name for _, name, _ in lines} == set(tools)  # every tool is shown at work
  assert len(lines) >= 20
  bad = []
  for where, name, argv in lines:
    if name not in tools:
      bad.append(f"{where}: {name} is not a t2t-lite tool")
      continue
    if not argv or "--help" in argv:  # a mention of the tool, or its help
      continue
    try:
      tools[name].parse_args(argv)
    except SystemExit as e:
      bad.append(f"{where}: {name} {' '.join(argv)} (exit {e.code})")
  assert not bad, "\n".join(bad)


def test_readme_python_api_runs_as_written(capsys, monkeypatch, tmp_path):
  text = (ROOT / "README.md").read_text()
  section = text[text.index("## Python API"):]
  code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
  monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # its mkdtemp(), not left in /tmp
  exec(compile(code, "README.md", "exec"), {})
  assert list(tmp_path.iterdir())  # it did prepare its data there
  shape, target = capsys.readouterr().out.strip().split(") ", 1)
  assert shape.startswith("(") and shape.endswith(", 13")  # [B, T, vocab]
  assert target.split() and set(target.split()) <= set("0123456789")


@pytest.mark.parametrize("path", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_at_files(path):
  for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", path.read_text()):
    assert (path.parent / target).exists(), f"{path.name} links to missing {target}"
