"""A run that did not finish never exits 0. The supervisor (grae.supervision.supervisor) runs here
over small stand-in training processes that speak its protocol (grae.supervision.beacon), each in a subprocess of
its own (the supervisor makes its process the subreaper of what it starts); ``grae train`` itself under it:
tests/test_train_run.py::test_a_reward_that_exits_or_forks_ends_the_run_non_zero_naming_it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from timeouts import scaled

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="the subreaper and /proc are Linux's")

#: the stand-in training process: adopts the pipe, then runs the case's body
CHILD = """
import os, signal, sys, time
from grae.supervision import beacon
assert beacon.adopt()
{body}
"""


def _supervised(tmp_path, body: str, grace: float = 1.0, **popen):
    """Start a supervisor (in a process of its own) over the stand-in child running ``body``."""
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(body=textwrap.dedent(body)))
    runner = (f"import sys; import grae.supervision.supervisor as s; s.GRACE_S = {grace}; "
              f"sys.exit(s.supervise([], command=[sys.executable, {str(script)!r}]))")
    return subprocess.Popen([sys.executable, "-c", runner], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, **popen)


def _end(proc, timeout: float = 60) -> tuple[int, list[str]]:
    _, err = proc.communicate(timeout=scaled(timeout))
    return proc.returncode, [line for line in err.splitlines() if line.startswith(("error", "note"))]


def _alive_with(marker: str) -> list[int]:
    """Processes whose command line holds ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if marker.encode() in f.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found


def test_a_run_that_says_its_end_ends_with_it(tmp_path):
    code, lines = _end(_supervised(tmp_path, "beacon.finished(0)\nsys.exit(0)"))
    assert (code, lines) == (0, [])
    code, lines = _end(_supervised(tmp_path, "beacon.finished(2)\nsys.exit(2)"))
    assert (code, lines) == (2, [])


def test_os_exit_0_in_a_reward_is_a_failure_naming_the_reward(tmp_path):
    code, lines = _end(_supervised(tmp_path, """
        with beacon.reward_call("rewards"):
            with beacon.reward_call("exits_early"):
                os._exit(0)
    """))
    assert code == 1 and len(lines) == 1, lines
    assert lines[0].startswith("error: the run did not finish: the training process ended with exit status 0 while "
                               "reward function 'exits_early' ran")


def test_an_unsaid_exit_0_outside_any_reward_is_a_failure_too(tmp_path):
    code, lines = _end(_supervised(tmp_path, "with beacon.reward_call('fine'):\n    pass\nos._exit(0)"))
    assert code == 1 and lines == [lines[0]] and "ended with exit status 0, without grae train ending it" in lines[0]


def test_a_forked_copy_returning_into_training_stops_the_run_and_leaves_no_process(tmp_path):
    marker = str(tmp_path / "child.py")
    code, lines = _end(_supervised(tmp_path, """
        with beacon.reward_call("forks"):
            os.fork()
        time.sleep(600)  # the original trains on; the copy returned into training and exits
    """))
    assert code == 1 and len(lines) == 1, lines
    assert lines[0].startswith("error: reward function 'forks' forked the training process (os.fork()) and the copy")
    assert _alive_with(marker) == []


def test_processes_the_run_left_are_stopped_and_named(tmp_path):
    marker = str(tmp_path / "child.py")
    code, lines = _end(_supervised(tmp_path, """
        if os.fork() == 0:  # a detached process that ignores SIGTERM and outlives the trainer
            os.setsid()
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            time.sleep(600)
            os._exit(0)
        beacon.finished(0)
        sys.exit(0)
    """))
    assert code == 0 and len(lines) == 1 and lines[0].startswith("note: stopped 1 process the run left behind"), lines
    assert _alive_with(marker) == []


def test_a_reward_call_past_its_bound_is_stopped(tmp_path):
    code, lines = _end(_supervised(tmp_path, """
        with beacon.reward_call("stuck_in_c", limit_s=0.2):
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            time.sleep(600)
    """))
    assert code == 1 and len(lines) == 1 and lines[0].startswith("error: reward function 'stuck_in_c' did not return"), lines


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stop_signal_is_forwarded_once_and_a_hung_reward_cannot_hold_it(tmp_path, sig):
    ready = tmp_path / "ready"
    body = f"""
        heard = []
        signal.signal({int(sig)}, lambda s, f: heard.append(s))
        open({str(ready)!r}, "w").close()
        while not heard:
            time.sleep(0.01)
        time.sleep(0.3)  # a second copy of the signal would arrive meanwhile
        beacon.finished(128 + heard[0] if len(heard) == 1 else 99)
        sys.exit(128 + heard[0] if len(heard) == 1 else 99)
    """
    proc = _supervised(tmp_path, body)
    _wait_for(ready)
    proc.send_signal(sig)
    assert _end(proc) == (128 + sig, [])
    ready.unlink()
    proc = _supervised(tmp_path, f"""
        signal.signal({int(sig)}, signal.SIG_IGN)  # the trainer finishes its step first, and the step hangs
        with beacon.reward_call("never_returns"):
            open({str(ready)!r}, "w").close()
            time.sleep(600)
    """)
    _wait_for(ready)
    proc.send_signal(sig)
    code, lines = _end(proc)
    assert code == 128 + sig and len(lines) == 1, lines
    assert lines[0].startswith(f"error: stopped by {signal.Signals(sig).name}: reward function 'never_returns' had run")


def test_a_killed_training_process_is_named_with_the_signal(tmp_path):
    code, lines = _end(_supervised(tmp_path, "with beacon.reward_call('r'):\n    os.kill(os.getpid(), signal.SIGKILL)"))
    assert code == 128 + signal.SIGKILL and len(lines) == 1, lines
    assert lines[0].startswith("error: the training process was killed by SIGKILL while reward function 'r' ran")


def _wait_for(path, timeout: float = 30) -> None:
    deadline = time.time() + scaled(timeout)
    while not path.exists() and time.time() < deadline:
        time.sleep(0.02)
    assert path.exists()


def _lines(proc, timeout: float = 60) -> tuple[int, list[str]]:
    """Exit status and every error / note / warning line of a supervised stand-in."""
    _, err = proc.communicate(timeout=scaled(timeout))
    return proc.returncode, [line for line in err.splitlines() if line.startswith(("error", "note", "warning"))]


def test_a_thread_a_reward_left_does_not_hold_a_finished_run(tmp_path):
    """A reward that starts a thread which is not a daemon: the interpreter would wait for it forever after grae
    train's own end. The process ends :data:`END_GRACE_S` later with the run's status, the thread named."""
    marker = str(tmp_path / "child.py")
    code, lines = _lines(_supervised(tmp_path, """
        import threading
        beacon.END_GRACE_S = 0.5
        with beacon.reward_call("rewards"):
            with beacon.reward_call("starts_a_thread"):
                threading.Thread(target=time.sleep, args=(600,), name="poller").start()
        beacon.finished(0)
        sys.exit(0)
    """))
    assert code == 0 and len(lines) == 1, lines
    assert lines[0].startswith("warning: grae train ended (exit 0) but thread 'poller' begun in reward function "
                               "'starts_a_thread' still ran"), lines
    assert _alive_with(marker) == []


def test_a_closed_pipe_is_not_an_unfinished_run_and_never_writes_into_a_run_file(tmp_path):
    """A reward closes the supervision pipe (user code closing inherited descriptors) and the run opens a file,
    which gets the pipe's number: nothing is written into that file, and the run's own end is read from the run
    directory (exit 0, a note naming the reward), not "the run did not finish"."""
    run = tmp_path / "run"
    run.mkdir()
    body = f"""
        beacon.run_directory({str(run)!r}, "run1")
        with beacon.reward_call("closes_descriptors"):
            os.close(beacon._fd)
            data = open({str(run / "metrics.jsonl")!r}, "w")  # the lowest free number: the pipe's
            data.flush()
        data.close()
        {{end}}
    """
    code, lines = _lines(_supervised(tmp_path, body.format(end="beacon.finished(0); sys.exit(0)")))
    assert code == 0 and len(lines) == 1 and lines[0].startswith(
        "note: user code closed grae train's supervision pipe while reward function 'closes_descriptors' ran; the "
        f"run's end (exit 0) was read from {run}"), lines
    assert (run / "metrics.jsonl").read_text() == ""
    assert list(run.glob(".grae_end.*")) == []  # read, and removed
    code, lines = _lines(_supervised(tmp_path, body.format(end="os._exit(0)")))  # an end grae train did not choose
    assert code == 1 and len(lines) == 1 and lines[0].startswith("error: the run did not finish"), lines


@pytest.mark.parametrize("said, advice", [
    ("", "nothing of the run was written yet (it ended before claiming its run directory): rerun the same command"),
    ("beacon.run_directory(RUN, 'run1')", "no checkpoint of it was saved, so there is nothing to resume: --overwrite "
                                          "starts it anew"),
    ("beacon.run_directory(RUN, 'run1'); beacon.checkpoint_saved(RUN + '/checkpoints/checkpoint-2')",
     "--resume continues from the newest complete checkpoint"),
], ids=["before the run directory", "before a checkpoint", "after a checkpoint"])
def test_a_killed_run_promises_no_resume_that_cannot_happen(tmp_path, said, advice):
    run = tmp_path / "run"
    run.mkdir()
    code, lines = _lines(_supervised(tmp_path, f"RUN = {str(run)!r}\n{said}\nos.kill(os.getpid(), signal.SIGKILL)"))
    assert code == 128 + signal.SIGKILL and len(lines) == 1, lines
    assert lines[0].startswith("error: the training process was killed by SIGKILL") and lines[0].endswith(
        f"the run did not finish: no final/ written; {advice}"), lines
    assert ("--resume" in lines[0]) == ("checkpoint_saved" in said)


def test_a_keyboard_interrupt_a_reward_raises_is_its_error_and_a_stop_signal_stays_one(monkeypatch):
    """While SIGINT's handler is grae's (it raises only StopSignal), a KeyboardInterrupt out of a reward call was
    raised by the reward: RewardInterrupt naming it. Under any other handler (a library user's Ctrl-C) it cannot be
    told from a signal's and passes on, as does grae's own StopSignal."""
    from grae.supervision import beacon

    def raises(exc):
        with beacon.reward_call("interrupts"):
            raise exc

    handler = beacon.raises_stop_signal(lambda signum, frame: None)
    previous = signal.signal(signal.SIGINT, handler)
    try:
        with pytest.raises(beacon.RewardInterrupt, match=r"^reward function 'interrupts' raised KeyboardInterrupt "
                                                          "while no stop signal had arrived"):
            raises(KeyboardInterrupt())
        with pytest.raises(beacon.StopSignal):
            raises(beacon.StopSignal())
        signal.signal(signal.SIGINT, signal.default_int_handler)
        with pytest.raises(KeyboardInterrupt) as caught:
            raises(KeyboardInterrupt())
        assert not isinstance(caught.value, beacon.RewardInterrupt)
    finally:
        signal.signal(signal.SIGINT, previous)
