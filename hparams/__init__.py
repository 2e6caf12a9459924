"""Named hparams sets, installed as `t2t_lite.hparams_sets`. Importing this package registers
them all."""
from . import transformer  # noqa: F401  (registers)
