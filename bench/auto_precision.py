"""What `--precision=auto` / `--mixed_precision=auto` picks on this machine next to what a
bench measured to be faster: imported by bench/decode_speed.py and bench/train_throughput.py,
which time every precision with and without XLA in one run."""
from t2t_lite.modeling import mixed_precision


def check(speeds):
  """speeds: {(precision, xla): a speed, larger is faster} -> for "xla" and "no_xla": the
  precision auto picks and why, the fastest measured, and whether they agree."""
  verdict = {}
  for xla in sorted({xla for _, xla in speeds}, reverse=True):
    measured = {precision: speed for (precision, on), speed in speeds.items() if on == xla}
    picked, why = mixed_precision.resolve(mixed_precision.AUTO, xla)
    fastest = max(measured, key=measured.get)
    verdict["xla" if xla else "no_xla"] = {
        "auto": picked, "why": why, "fastest": fastest,
        "auto_over_fastest": round(measured[picked] / measured[fastest], 3)
        if picked in measured else None,
        "auto_is_fastest": picked == fastest}
  return verdict
