"""What `--precision=auto` / `--mixed_precision=auto` picks on this machine next to what a
bench measured to be faster: imported by bench/decode_speed.py and bench/train_throughput.py,
which time every precision with and without XLA in one run. For decoding (`d_model` given), also
the whole decoding plan auto decides here (t2t_lite/decode/plan.py: compiled matmuls, searches,
XLA), the measured configuration it should be the fastest of."""
from t2t_lite.decode import plan
from t2t_lite.modeling import mixed_precision


def check(speeds, d_model=None):
  """speeds: {(precision, xla): a speed, larger is faster} -> for "xla" and "no_xla": the
  precision auto picks and why, the fastest measured, and whether they agree; with `d_model`
  (a decoding model's width), "plan": the decoding plan's record for that XLA setting."""
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
    if d_model is not None:
      verdict["xla" if xla else "no_xla"]["plan"] = plan.decide(
          mixed_precision.AUTO, xla, d_model, plan.capabilities()).record()
  return verdict
