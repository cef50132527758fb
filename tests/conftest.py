import os
import sys

import torch
from hypothesis import settings

sys.path.insert(0, os.path.dirname(__file__))
# Torch threads per test process: 1 by default; `make test TEST_THREADS=2` runs the suite at 2 (another
# summation order; every float tolerance must hold at both).
TEST_THREADS = int(os.environ.get("GRAE_TEST_THREADS", "1"))
# A process the tests start that dies of a fatal signal (SIGSEGV, SIGBUS, SIGABRT) prints its Python stack
# into the output the test shows (a resumed `grae train` ended with -11 once, with nothing said)
os.environ.setdefault("PYTHONFAULTHANDLER", "1")
torch.set_num_threads(TEST_THREADS)

settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True)
settings.register_profile("dev", max_examples=200, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


# `make test` runs on two pytest-xdist workers (`-n 2 --dist loadgroup`). The 2-process torchrun tests
# use both cores themselves: their modules (test_distributed.py, test_integrity_multiprocess.py) share
# one group (their `pytestmark`), so they run one after another on one worker while the other worker takes
# the single-process tests. (A marker added here in pytest_collection_modifyitems came after xdist had
# named the groups, so it grouped nothing.)
