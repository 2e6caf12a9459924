"""Registered problems. Importing this package registers them all."""
from problems import algorithmic  # noqa: F401  (registers)
from problems import multi30k  # noqa: F401
from problems import wmt  # noqa: F401
from problems import wsj_parsing  # noqa: F401
