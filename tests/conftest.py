"""Shared fixtures. Real data is read from ../shared/data (never copied into the project)."""
import os
import pathlib

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

SHARED_DATA = pathlib.Path(__file__).resolve().parents[1].parent / "shared" / "data"


def require_shared_data(subdir):
  """Path to ../shared/data/<subdir>; fails under CI=true when absent, skips otherwise."""
  path = SHARED_DATA / subdir
  if not path.is_dir():
    message = f"shared data {path} is missing (see ../shared/data/README.md)"
    if os.environ.get("CI", "").lower() == "true":
      pytest.fail(message)
    pytest.skip(message)
  return path


@pytest.fixture(scope="session")
def multi30k_dir():
  return require_shared_data("multi30k")


@pytest.fixture(scope="session")
def ptb_dir():
  return require_shared_data("ptb_sample")


@pytest.fixture(scope="session")
def multi30k_data(multi30k_dir, tmp_path_factory):
  """{"multi30k_ende": data_dir, "multi30k_enfr": data_dir}, prepared once per session."""
  import t2t_lite
  data_dirs = {}
  for name in ("multi30k_ende", "multi30k_enfr"):
    data_dir = str(tmp_path_factory.mktemp(name))
    t2t_lite.get_problem(name).prepare(data_dir, str(multi30k_dir))
    data_dirs[name] = data_dir
  return data_dirs
