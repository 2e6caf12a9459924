"""Progress lines for long loops (data preparation): count, rate and, when the total is known,
percent done and ETA; at most one line every `every_seconds`, so a log stays readable and a
working run can be told from a hung one.

  progress = Progress("multi30k_ende train", "pairs", total=29_000, every_seconds=10)
  for pair in pairs:
    progress.update()
  progress.done()

logs lines such as "multi30k_ende train: 20,001 of 29,000 pairs (69%), 7,050 pairs/s, ETA
0:00:01" and, at the end, "multi30k_ende train: 29,000 pairs in 0:00:04 (6,276 pairs/s)".
"""
import time


def hms(seconds):
  """0:01:22 for 82 seconds."""
  seconds = int(max(seconds, 0))
  return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


class Progress:
  """Counts items and logs a progress line at most every `every_seconds` (0 or None: only the
  final line of `done`). `clock` is injectable for tests."""

  def __init__(self, label, unit, *, total=None, every_seconds=10.0, log=print,
               clock=time.monotonic):
    self.label, self.unit, self.total = label, unit, total
    self.every_seconds, self.log, self.clock = every_seconds, log, clock
    self.count = 0
    self.start = self.last = clock()

  def update(self, n=1):
    self.count += n
    if not self.every_seconds:
      return
    now = self.clock()
    if now - self.last >= self.every_seconds:
      self.last = now
      self.log(self.line(now))

  def line(self, now):
    """The progress line at time `now`."""
    elapsed = max(now - self.start, 1e-9)
    rate = self.count / elapsed
    if self.total:
      eta = (self.total - self.count) / rate if rate else float("inf")
      return (f"{self.label}: {self.count:,} of {self.total:,} {self.unit} "
              f"({100 * self.count / self.total:.0f}%), {rate:,.0f} {self.unit}/s, "
              f"ETA {hms(eta) if eta != float('inf') else '?'}")
    return f"{self.label}: {self.count:,} {self.unit}, {rate:,.0f} {self.unit}/s"

  def done(self):
    """Logs the final count, time and rate."""
    elapsed = max(self.clock() - self.start, 1e-9)
    self.log(f"{self.label}: {self.count:,} {self.unit} in {hms(elapsed)} "
             f"({self.count / elapsed:,.0f} {self.unit}/s)")
