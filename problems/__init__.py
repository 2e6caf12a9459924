"""Registered problems, installed as `t2t_lite.problems`. Importing this package registers them
all."""
from . import algorithmic  # noqa: F401  (registers)
from . import multi30k  # noqa: F401
from . import wmt  # noqa: F401
from . import wsj_parsing  # noqa: F401
from . import wsj_parsing_spans  # noqa: F401
