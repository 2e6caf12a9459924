"""Named hparams sets, installed as `t2t_lite.hparams`. Importing this package registers them all
(the registry does it on first use)."""
# The HParams type lives in t2t_lite/hyperparams.py; also found here by code written for 0.1,
# whose t2t_lite.hparams was that module.
from t2t_lite.hyperparams import HParams, HParamsError  # noqa: F401

from . import transformer  # noqa: F401  (registers)
from . import ranges  # noqa: F401  (registers the ranged hparams)
