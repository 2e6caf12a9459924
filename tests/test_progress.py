"""Progress of long data preparation: the line format and rate limit, and t2t-lite-datagen's
progress lines on Multi30k."""
import re

from t2t_lite.data.progress import Progress


class FakeClock:
  def __init__(self):
    self.now = 100.0

  def __call__(self):
    return self.now


def test_progress_lines_at_most_every_interval_with_eta():
  clock, lines = FakeClock(), []
  progress = Progress("wmt_ende train", "pairs", total=10_000, every_seconds=5, log=lines.append,
                      clock=clock)
  for _ in range(8):  # 1,000 pairs a second, an update every 0.5 s
    clock.now += 0.5
    progress.update(500)
  assert lines == []  # 4 s < 5 s
  for _ in range(2):
    clock.now += 0.5
    progress.update(500)
  assert lines == ["wmt_ende train: 5,000 of 10,000 pairs (50%), 1,000 pairs/s, ETA 0:00:05"]
  clock.now += 4
  progress.update(100)  # 4 s after the last line: none
  assert len(lines) == 1
  clock.now += 1
  progress.update(0)
  assert lines[-1] == "wmt_ende train: 5,100 of 10,000 pairs (51%), 510 pairs/s, ETA 0:00:09"
  progress.done()
  assert lines[-1] == "wmt_ende train: 5,100 pairs in 0:00:10 (510 pairs/s)"


def test_progress_without_total_or_interval():
  clock, lines = FakeClock(), []
  progress = Progress("x dev", "pairs", every_seconds=1, log=lines.append, clock=clock)
  clock.now += 2
  progress.update(3000)
  assert lines == ["x dev: 3,000 pairs, 1,500 pairs/s"]
  quiet = Progress("x test", "pairs", every_seconds=0, log=lines.append, clock=clock)
  clock.now += 60
  quiet.update(5)
  quiet.done()
  assert lines[1:] == ["x test: 5 pairs in 0:01:00 (0 pairs/s)"]


PROGRESS_LINE = re.compile(
    r"^INFO multi30k_ende train: ([\d,]+) of 29,000 pairs \((\d+)%\), ([\d,]+) pairs/s, "
    r"ETA \d+:\d\d:\d\d$", re.M)


def test_datagen_on_multi30k_prints_progress(multi30k_datagen_run):
  """The t2t-lite-datagen process that prepared the session's multi30k_ende (conftest's
  multi30k_data: one preparation of Multi30k for this test and those that read the data)."""
  run = multi30k_datagen_run
  assert run["flags"] == ["--progress_seconds=0.1"]
  assert run["returncode"] == 0, run["stderr"]
  lines = PROGRESS_LINE.findall(run["stderr"])
  assert lines, run["stderr"]
  counts = [int(count.replace(",", "")) for count, _, _ in lines]
  assert counts == sorted(set(counts)) and 0 < counts[0] and counts[-1] < 29_000
  for (_, percent, rate), count in zip(lines, counts):
    assert int(percent) == round(100 * count / 29_000)
    assert int(rate.replace(",", "")) > 0
  for split, pairs in (("train", "29,000"), ("dev", "1,014"), ("test", "1,000")):
    assert re.search(rf"^INFO multi30k_ende {split}: {pairs} pairs in \d+:\d\d:\d\d "
                     rf"\([\d,]+ pairs/s\)$", run["stderr"], re.M), split
  assert '"train": {"pairs": 29000, "examples": 29000, "empty": 0}' in run["stdout"]
