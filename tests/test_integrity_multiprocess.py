"""Run integrity on 2 processes (``torchrun``, gloo, CPU): ``grae train`` as ``examples/trl/*.sh`` launch it.

Every rank runs ``grae train``; before this, every rank claimed the run directory for itself, so the
second found it owned by "another run" and the launch failed (and ``final/`` raced between ranks).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl", reason="the train extra; `make test` installs it")
from cli_flags import with_flags  # noqa: E402
from grae.engines.trl import COMPLETE_MARKER  # noqa: E402
from grae.train.rundir import read_metrics  # noqa: E402
from test_integrity_train import identity_of, tree_digest  # noqa: E402
from test_train_run import SMALL, wait_for_steps  # noqa: E402
from timeouts import scaled  # noqa: E402
from tiny_model import build_random_tiny  # noqa: E402

# both torchrun modules share one xdist group: one worker runs them one after another (tests/conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.distributed, pytest.mark.xdist_group("multiprocess")]
TINY_EVAL = ["--eval.num_problems", "2", "--eval.n", "2"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_random_tiny(str(tmp_path_factory.mktemp("tiny")))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_train(model_dir, out: Path, *extra) -> subprocess.Popen:
    """``grae train`` on 2 processes: :data:`SMALL`'s run, 8 completions per rank (SMALL's 16 a step in all); a key
    ``extra`` gives replaces the default's (grae train refuses a key given twice)."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", f"--master_port={_free_port()}",
           "-m", "grae.cli", "train", "--model", model_dir, "--output-dir", str(out),
           *with_flags(SMALL, ["--trl.per_device_train_batch_size", "8", *extra])]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                            start_new_session=True)


def finish(proc: subprocess.Popen, *, ok: bool = True, timeout: float = 240) -> str:
    """The launch's output; a hang (ranks waiting for each other) fails the test instead of stalling it."""
    try:
        log, _ = proc.communicate(timeout=scaled(timeout))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        log, _ = proc.communicate()
        pytest.fail(f"2-process launch hung\n{log[-4000:]}")
    assert (proc.returncode == 0) == ok, f"exit {proc.returncode}\n{log[-4000:]}"
    return log


def test_two_processes_share_one_run_and_refuse_another(model_dir, tmp_path):
    out = tmp_path / "D"
    finish(torchrun_train(model_dir, out, "--max-steps", "2", "--save_steps", "2", *TINY_EVAL))
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    marker = json.loads((out / "checkpoints" / "checkpoint-2" / COMPLETE_MARKER).read_text())
    assert marker["run_id"] == run_id  # one run id, the main process's, on every rank
    assert (out / "final" / "config.json").exists() and not (out / "final.partial").exists()
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2]
    assert identity_of(out, "after") == f"{run_id}@step2"
    assert len((out / "eval" / "after.jsonl").read_text().splitlines()) == 2 * 2  # written once, not per rank

    before = tree_digest(out)
    log = finish(torchrun_train(model_dir, out, "--max-steps", "3", "--estimator", "grpo", *TINY_EVAL), ok=False)
    said = [line for line in log.splitlines() if line.startswith("error:") and f"holds run {run_id}" in line]
    assert len(said) == 1, log[-3000:]  # every rank refuses; the main one says so (torchrun's summary repeats it per rank)
    assert tree_digest(out) == before

    finish(torchrun_train(model_dir, out, "--max-steps", "3", "--save_steps", "2", "--resume", *TINY_EVAL))
    assert [r["step"] for r in read_metrics(out / "metrics.jsonl")] == [1, 2, 3]
    assert identity_of(out, "after") == f"{run_id}@step3"


def _worker_of_rank(launcher: int, rank: int) -> int | None:
    """The pid of ``rank``'s worker among the launcher's descendants (its environment names the rank)."""
    pending = [launcher]
    while pending:
        pid = pending.pop()
        for task in Path(f"/proc/{pid}/task").glob("*"):
            pending += [int(c) for c in (task / "children").read_text().split()]
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if f"RANK={rank}".encode() in environ and b"LOCAL_RANK=" + str(rank).encode() in environ and pid != launcher:
            return pid
    return None


def test_a_signal_to_one_rank_stops_every_rank_after_the_same_step(model_dir, tmp_path):
    """A pre-emption signal reaching only rank 1 stops rank 0 too, after the same step, with one whole
    checkpoint (rank 0 alone would wait for rank 1 in the next step's collectives for ever)."""
    out = tmp_path / "D"
    proc = torchrun_train(model_dir, out, "--max-steps", "60", "--save_steps", "100", "--eval.enabled", "false")
    metrics = out / "metrics.jsonl"
    wait_for_steps(metrics, 2, proc=proc)
    worker = _worker_of_rank(proc.pid, 1)
    if worker is None:
        log = finish(proc, ok=False, timeout=1)
        pytest.fail(f"rank 1's worker not found (exit {proc.returncode})\n{log[-4000:]}")
    os.kill(worker, signal.SIGTERM)
    log = finish(proc, ok=False)
    assert "exitcode  : 143" in log and "continue with --resume" in log
    saved = sorted(out.glob("checkpoints/checkpoint-*"))
    assert len(saved) == 1 and (saved[0] / COMPLETE_MARKER).exists(), log[-3000:]
    step = int(saved[0].name.split("-")[1])
    assert 2 <= step < 60 and [r["step"] for r in read_metrics(metrics)] == list(range(1, step + 1))

    finish(torchrun_train(model_dir, out, "--max-steps", str(step + 1), "--save_steps", "100", "--eval.enabled", "false",
                          "--resume"))
    assert [r["step"] for r in read_metrics(metrics)] == list(range(1, step + 2))


def test_a_refusal_on_one_rank_alone_is_named_in_the_launchers_summary(model_dir, tmp_path, monkeypatch):
    """Only the main rank prints; a config error on another rank alone (here: a reward module that
    cannot be imported on rank 1, as with a package missing on one node) still reaches the user through
    torchrun's failure summary, not as a bare "exitcode: 2"."""
    (tmp_path / "node_reward.py").write_text(
        "import os\n"
        "if os.environ.get('RANK') == '1':\n"
        "    raise ImportError('No module named sympy_on_node_2')\n"
        "def reward(completions, **kwargs):\n"
        "    return [0.0] * len(completions)\n")
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    log = finish(torchrun_train(model_dir, tmp_path / "D", "--max-steps", "1", "--eval.enabled", "false",
                                "--reward_funcs", "node_reward:reward"), ok=False)
    assert "exitcode  : 2" in log and "No module named sympy_on_node_2" in log, log[-3000:]


def test_a_reward_failing_on_every_sample_of_one_rank_stops_the_run(model_dir, tmp_path, monkeypatch):
    """A verifier broken on one node only (every call on rank 1 raises; rank 0's all score): `grae train`
    exits non-zero with one line naming rank 1, instead of training on rank 0's half with exit 0."""
    (tmp_path / "half_reward.py").write_text(
        "import os\n"
        "def reward(completions, **kwargs):\n"
        "    if os.environ.get('RANK') == '1':\n"
        "        raise RuntimeError('sympy_on_node_2 missing')\n"
        "    return [0.5] * len(completions)\n")
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    out = tmp_path / "D"
    log = finish(torchrun_train(model_dir, out, "--max-steps", "2", "--eval.enabled", "false",
                                "--reward_funcs", "half_reward:reward"), ok=False)
    assert "failed on every sample of rank 1 of 2" in log, log[-3000:]
    assert "sympy_on_node_2 missing" in log, log[-3000:]  # rank 1's own first failure reaches the user
    assert not (out / "final").exists()
