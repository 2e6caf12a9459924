"""Named hparams sets. Importing this package registers them all."""
from hparams import transformer  # noqa: F401  (registers)
