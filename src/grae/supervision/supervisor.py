"""The parent ``grae train`` becomes (POSIX): it runs the same command as a child — the training process — and
stays small (no torch), so whatever user code does in the child, the exit status the shell or scheduler sees is
decided here.

* **Unfinished is never 0.** The child says its own exit (:func:`grae.supervision.beacon.finished`); an end it did
  not say — ``os._exit(0)`` or ``sys.exit`` in a reward function, a crash, a kill — is one line naming the reward
  function that was running (if one was) and a non-zero status (the child's, else 1; 128 + N for a signal).
* **A forked copy stops the run.** A reward that ``os.fork()``s makes a copy of the trainer; the copy kills the
  trainer and exits as soon as it returns into training (:func:`~grae.supervision.beacon.leave_if_copy`), so no
  checkpoint or ``final/`` is written after the fork, and the run is stopped, one line.
* **A reward past its bound is stopped.** With ``reward_timeout`` set, a reward call is bounded by samples ×
  timeout (+ :data:`GRACE_S`); a call that holds the process longer (C code keeps a timed-out thread from being
  abandoned) stops the run. Without ``reward_timeout`` a call running :data:`SLOW_NOTE_S` is said once, and a stop
  signal (Ctrl-C, SIGTERM) that the step cannot honour because a reward call does not return ends the run after
  :data:`GRACE_S`.
* **The end is read from the run, not from the pipe alone.** Lines that say what a rerun can do name only what
  the run left (``D``/``C`` heard: a claimed run directory, a complete checkpoint), never a ``--resume`` that would
  be refused. A child whose pipe user code closed writes its own end into the run directory
  (:func:`~grae.supervision.beacon.read_lost_end`): a finished run is then not called unfinished, with a note.
* **No orphan.** The supervisor is the subreaper of everything the run starts (Linux ``PR_SET_CHILD_SUBREAPER``)
  and the child dies with it (``PR_SET_PDEATHSIG``): when the child has ended, every process left (a fork that
  never returned, a detached worker) is stopped (SIGTERM, then SIGKILL) and named.

Signals: the child runs in its own process group; SIGINT, SIGTERM and SIGHUP sent to the supervisor are forwarded
once (a second Ctrl-C still stops at once); at a terminal the child's group is made the foreground one, so Ctrl-C
reaches it directly and it can read the terminal, and Ctrl-Z suspends both.

Cost: one more Python process (no torch: 17 MB, 0.05-0.14 s to start) and two pipe writes per reward call
(4.6 µs); an 8-step tiny run took the same time with and without it (docs/reliability.md).
``GRAE_SUPERVISOR_FD=none`` runs ``grae train`` without one (a process manager that watches it itself).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field

from grae.supervision.beacon import ENV, advice, read_lost_end

#: after a forwarded stop signal, or past a reward call's own bound, how long a reward call may keep running
GRACE_S = 30.0
#: a reward call without a bound (no reward_timeout) running this long is said once
SLOW_NOTE_S = 600.0
#: how often the supervisor looks at the child (seconds)
POLL_S = 0.2
FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass
class _Heard:
    """What the child said so far (the reader thread writes, the main loop reads)."""

    calls: dict[str, tuple[str, float, float | None]] = field(default_factory=dict)  # token -> (name, start, limit)
    exit_code: int | None = None
    forked: tuple[str, str] | None = None  # (pid, reward function) of a copy that returned into training
    run_dir: str | None = None  # the run directory, once the run claimed it
    checkpointed: bool = False  # a complete checkpoint of the run is on disk
    closed: bool = False  # the pipe reached its end (the child closed it, or ended)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def hear(self, line: str) -> None:
        kind, _, rest = line.partition(" ")
        with self.lock:
            if kind == "R":
                token, limit, name = (rest.split(" ", 2) + ["", ""])[:3]
                self.calls[token] = (name, time.monotonic(), None if limit == "-" else float(limit))
            elif kind == "E":
                self.calls.pop(rest.strip(), None)
            elif kind == "F":
                pid, _, name = rest.partition(" ")
                self.forked = self.forked or (pid, name)
            elif kind == "X" and rest.strip().lstrip("-").isdigit():
                self.exit_code = int(rest)
            elif kind == "D":
                self.run_dir = rest.partition(" ")[2] or None
            elif kind == "C":
                self.checkpointed = True

    def left(self) -> str:
        """What an unfinished run left, read from its directory, and what a rerun can do (never a ``--resume``
        that cannot happen: :func:`grae.supervision.beacon.advice`)."""
        final = self.run_dir is not None and os.path.isdir(os.path.join(self.run_dir, "final"))
        kept = "final/ is on disk but this run did not finish" if final else "no final/ written"
        return f"{kept}; {advice(self.run_dir is not None, self.checkpointed)}"

    def running(self) -> tuple[str, float, float | None] | None:
        """The innermost reward call running (the newest begun)."""
        with self.lock:
            return max(self.calls.values(), key=lambda call: call[1], default=None)


def supervise(argv: list[str], command: list[str] | None = None) -> int:
    """Run ``python -m grae.cli <argv>`` (``command`` instead of ``python -m grae.cli``) as the supervised
    training process; the exit status to end with (module docstring)."""
    read_end, write_end = os.pipe()
    _set_child_subreaper()
    terminal = _foreground_terminal()
    child = subprocess.Popen([*(command or [sys.executable, "-m", "grae.cli"]), *argv], env={**os.environ, ENV: str(write_end)},
                             pass_fds=(write_end,), preexec_fn=_own_group_dying_with_parent)
    os.close(write_end)
    heard = _Heard()
    reader = threading.Thread(target=_read, args=(read_end, heard), daemon=True, name="grae-supervisor-reader")
    reader.start()
    stop: list[tuple[int, float]] = []  # (signal, when) forwarded to the child
    previous = {sig: signal.signal(sig, lambda sig, _frame: _forward(child, sig, stop)) for sig in FORWARDED}
    if terminal:
        _give_terminal(child.pid)
    try:
        reason, code = _watch(child, heard, stop, terminal)
    finally:
        if terminal:
            _give_terminal(os.getpgrp())
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if reason is None and child.returncode == -signal.SIGKILL:
        _hear_out(reader, heard)  # a forked copy says F, then kills the trainer: the F may still be in the pipe
    if reason is None and heard.forked:
        _kill_group(child.pid)  # as _watch does when it hears the fork first
        reason, code = _forked_reason(heard.forked), 1
    if reason is not None:  # the run's process group was killed (SIGKILL): it is ending, not left behind
        _wait_group_ended(child, child.pid)
    left = _stop_leftovers(child.pid)
    reader.join(timeout=2)
    if reason is None:
        reason, code = _unchosen_end(child.returncode, heard, child.pid)
    if left:
        _say(f"note: stopped {len(left)} process{'es' * (len(left) != 1)} the run left behind (pid "
             f"{', '.join(map(str, left))})")
    if reason:
        _say(f"error: {reason}")
    return code


def _watch(child: subprocess.Popen, heard: _Heard, stop: list[tuple[int, float]],
           terminal: bool) -> tuple[str | None, int]:
    """Wait for the child; ``(reason, exit status)`` when the supervisor had to end it, ``(None, its status)``."""
    said_slow: set[float] = set()
    while True:
        try:
            pid, status = _wait(child)
        except ChildProcessError:
            return None, child.returncode if child.returncode is not None else 1
        if pid:
            if os.WIFSTOPPED(status):
                _suspend_with(child, terminal)
                continue
            child.returncode = os.waitstatus_to_exitcode(status)
            return None, child.returncode
        now = time.monotonic()
        if heard.forked:
            _kill_group(child.pid)
            return _forked_reason(heard.forked), 1
        call = heard.running()
        if call is None or heard.closed:  # a closed pipe says no more E: its calls are not known to run
            continue
        name, started, limit = call
        if limit is not None and now - started > limit + GRACE_S:
            _kill_group(child.pid)
            return (f"reward function {name!r} did not return for {now - started:.0f} s, past its bound ({limit:.0f} s: "
                    f"reward_timeout × samples, + {GRACE_S:.0f} s): it holds the training process (a timed-out call "
                    f"in C code cannot be abandoned), so the run is stopped; {heard.left()}"), 1
        if stop and now - max(started, stop[0][1]) > GRACE_S:
            sig = stop[0][0]
            _kill_group(child.pid)
            return (f"stopped by {signal.Signals(sig).name}: reward function {name!r} had run {now - started:.0f} s "
                    f"without returning, so the step could not finish, and no checkpoint was saved for it; "
                    f"{heard.left()}; set reward_timeout to bound it"), 128 + sig
        if limit is None and now - started > SLOW_NOTE_S and started not in said_slow:
            said_slow.add(started)
            _say(f"note: reward function {name!r} has run for {now - started:.0f} s in one call and nothing bounds it "
                 "(reward_timeout is not set); set reward_timeout, or stop the run with Ctrl-C / SIGTERM")


def _forked_reason(forked: tuple[str, str]) -> str:
    copy, name = forked
    return (f"reward function {name!r} forked the training process (os.fork()) and the copy (pid {copy}) returned "
            "into training: the run is stopped, as two trainers would write one run directory; fork only into a child "
            "that ends with os._exit, or use subprocess / multiprocessing")


def _wait(child: subprocess.Popen) -> tuple[int, int]:
    """``os.waitpid`` of the child without blocking longer than :data:`POLL_S` (stopped children reported too)."""
    deadline = time.monotonic() + POLL_S
    while True:
        pid, status = os.waitpid(child.pid, os.WNOHANG | os.WUNTRACED)
        if pid or time.monotonic() >= deadline:
            return pid, status
        time.sleep(0.05)


def _hear_out(reader: threading.Thread, heard: _Heard, timeout: float = 1.0) -> None:
    """Until the pipe is read to its end or said a fork, at most ``timeout`` seconds (a process that never returned
    from a fork may hold the pipe open: it is stopped afterwards)."""
    deadline = time.monotonic() + timeout
    while reader.is_alive() and not heard.forked and time.monotonic() < deadline:
        time.sleep(0.01)


def _wait_group_ended(child: subprocess.Popen, pgid: int, timeout: float = 5.0) -> None:
    """After SIGKILL to the run's group: until the child is reaped and no member of the group is alive (the kernel
    ends a killed process a little later, under load noticeably), at most ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    with contextlib.suppress(subprocess.TimeoutExpired, ChildProcessError):
        child.wait(timeout=timeout)
    while _group_members(pgid) and time.monotonic() < deadline:
        _reap()
        time.sleep(0.02)


def _group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes in process group ``pgid``, from /proc."""
    found = []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[-1].split()
            except OSError:
                continue
            if len(fields) > 2 and fields[2] == str(pgid) and fields[0] not in ("Z", "X"):
                found.append(int(entry.name))
    return found


def _unchosen_end(code: int, heard: _Heard, pid: int | None = None) -> tuple[str | None, int]:
    """The line and status for the child's end at ``code`` (a negative code: killed by that signal). A child whose
    pipe was lost (user code closed it) wrote its own end into the run directory: read from there."""
    call = heard.running()
    said = heard.exit_code
    if said is None and heard.run_dir is not None and pid is not None:
        said = read_lost_end(heard.run_dir, pid)
        if said is not None and said == code:
            _say(f"note: user code closed grae train's supervision pipe{_during(call)}; the run's end (exit {code}) "
                 f"was read from {heard.run_dir}")
            return None, code
    if said is not None and said == code and not call:
        return None, code
    during = _during(call)
    if code < 0:
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else f"signal {-code}"
        hint = " (out of memory? the kernel's OOM killer sends SIGKILL)" if -code == signal.SIGKILL else ""
        return (f"the training process was killed by {name}{during}{hint}; the run did not finish: "
                f"{heard.left()}"), 128 - code
    if call or code == 0:
        return (f"the run did not finish: the training process ended with exit status {code}{during}, without "
                f"grae train ending it (os._exit or sys.exit in user code?); {heard.left()}"), code or 1
    return None, code  # a failure the child reported itself (its traceback or line is above)


def _during(call: tuple[str, float, float | None] | None) -> str:
    return f" while reward function {call[0]!r} ran" if call else ""


def _read(fd: int, heard: _Heard) -> None:
    with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as pipe:
        for line in pipe:
            heard.hear(line.rstrip("\n"))
    heard.closed = True


def _forward(child: subprocess.Popen, sig: int, stop: list[tuple[int, float]]) -> None:
    if sig in (signal.SIGINT, signal.SIGTERM) and not stop:
        stop.append((sig, time.monotonic()))
    with contextlib.suppress(ProcessLookupError):
        os.kill(child.pid, sig)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _stop_leftovers(pgid: int) -> list[int]:
    """Stop what the run left: its process group and every process re-parented to this one (the subreaper);
    SIGTERM, then SIGKILL after 3 s. The pids stopped."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGTERM)
    stopped: list[int] = []
    deadline = time.monotonic() + 3.0
    while True:
        left = _own_children()
        for pid in left:
            if pid not in stopped:
                stopped.append(pid)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGTERM)
        _reap()
        if not left:
            return stopped
        if time.monotonic() > deadline:
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            _kill_group(pgid)
        time.sleep(0.1)
        if time.monotonic() > deadline + 5:
            return stopped


def _own_children() -> list[int]:
    """Live children of this process (on Linux, what was re-parented to it too), from /proc."""
    me, found = os.getpid(), []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[-1].split()
            if len(fields) > 1 and fields[1] == str(me) and fields[0] != "Z":
                found.append(int(entry.name))
    return found


def _reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0]:
            pass


def _prctl(option: int, value: int) -> None:
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def _set_child_subreaper() -> None:
    if sys.platform.startswith("linux"):
        _prctl(36, 1)  # PR_SET_CHILD_SUBREAPER


def _own_group_dying_with_parent() -> None:
    """In the child before it runs (Popen's ``process_group`` is Python 3.11's): its own process group, and
    SIGKILL when the supervisor dies."""
    os.setpgid(0, 0)
    if sys.platform.startswith("linux"):
        _prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _foreground_terminal() -> bool:
    """stdin is the terminal and this process's group is its foreground one."""
    try:
        return os.isatty(0) and os.tcgetpgrp(0) == os.getpgrp()
    except OSError:
        return False


def _give_terminal(pgid: int) -> None:
    handler = signal.signal(signal.SIGTTOU, signal.SIG_IGN)  # a background group may not otherwise set it
    try:
        with contextlib.suppress(OSError):
            os.setpgid(pgid, pgid) if pgid != os.getpgrp() else None
        with contextlib.suppress(OSError):
            os.tcsetpgrp(0, pgid)
    finally:
        signal.signal(signal.SIGTTOU, handler)


def _suspend_with(child: subprocess.Popen, terminal: bool) -> None:
    """Ctrl-Z stopped the child's group: stop this process too (the shell sees its job stopped), and on ``fg``
    give the terminal back to the child and continue it."""
    if terminal:
        _give_terminal(os.getpgrp())
    os.kill(os.getpid(), signal.SIGSTOP)
    if terminal:
        _give_terminal(child.pid)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGCONT)


def _say(line: str) -> None:
    with contextlib.suppress(OSError, ValueError):
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
