"""`make test` runs on two xdist workers with ``--dist loadgroup``: the tests of one ``xdist_group`` (a
module's shared study, the 2-process torchrun tests) must run on one worker, so that a module fixture is set
up once and the torchrun tests never run two at a time. pytest 9.2 with pytest-xdist 3.8 silently ran every
grouped test on whichever worker was free (pyproject.toml pins pytest below 9.2)."""

from __future__ import annotations

import os
import subprocess
import sys

from timeouts import scaled

GROUPED = '''
import os, time, pytest
pytestmark = pytest.mark.xdist_group("shared")

@pytest.fixture(scope="module")
def shared():
    with open(os.environ["SETUP_LOG"], "a") as log:
        log.write(os.environ.get("PYTEST_XDIST_WORKER", "none") + "\\n")
    time.sleep(0.5)
    return 1

@pytest.mark.parametrize("i", range(6))
def test_uses_the_shared_fixture(shared, i):
    time.sleep(0.1)
'''

OTHERS = '''
import time, pytest

@pytest.mark.parametrize("i", range(12))
def test_other(i):
    time.sleep(0.05)
'''


def test_an_xdist_group_runs_on_one_worker_and_sets_its_module_fixture_up_once(tmp_path):
    (tmp_path / "test_grouped.py").write_text(GROUPED)
    (tmp_path / "test_others.py").write_text(OTHERS)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # this folder is the rootdir: the project's conftest stays out
    setup_log = tmp_path / "setups.log"
    done = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider",
                           "-v", str(tmp_path)], capture_output=True, text=True, cwd=tmp_path, timeout=scaled(180),
                          env={**os.environ, "SETUP_LOG": str(setup_log)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    workers = {line.split("]")[0] for line in done.stdout.splitlines() if "test_grouped.py::" in line and "PASSED" in line}
    assert setup_log.read_text().split() in (["gw0"], ["gw1"]), (setup_log.read_text(), done.stdout[-2000:])
    assert len(workers) == 1, workers
