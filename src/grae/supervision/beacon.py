"""What the training process tells its supervisor (:mod:`grae.supervision.supervisor`), one short line per event
on the pipe named by :data:`ENV`; nothing at all when the process is not supervised (a library user's trainer).

* ``R <token> <limit seconds or -> <name>`` / ``E <token>``: a reward call begins / ends. The supervisor names the
  innermost call running when the process ends or overruns; ``limit`` bounds it (``reward_timeout`` × samples).
* ``F <pid> <name>``: a reward forked this process and the copy returned into training; the copy then stops the
  trainer (SIGKILL, before it can write a checkpoint or ``final/``) and exits.
* ``D <run id> <absolute path>``: the run directory is claimed (before that, nothing of the run is on disk);
  ``C <checkpoint>``: a complete checkpoint of the run is on disk (saved, or the one a resume starts from). From
  these the supervisor says what a rerun can do (:func:`advice`), never a ``--resume`` that cannot happen.
* ``X <code>``: ``grae train`` itself ends with ``code`` (any other end is one it did not choose).

The pipe is checked before each write (``fstat``: the same pipe it was): user code that closes inherited file
descriptors closes it, and the number may then name a file the run opened, which must never receive these lines.
Once it is lost, the process's own end is written into the run directory instead (:func:`lost_end_path`), where
the supervisor reads it. ``grae train``'s end also arms :func:`_end_within`: threads a reward left running (not
daemons, so the interpreter would wait for them forever) are named and the process ends without them.

Three ``os.write``/``fstat`` pairs per reward call (a few microseconds; a training step calls each reward function
once).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator

#: the environment variable holding the pipe's file descriptor (``none``: supervised by something else, say nothing)
ENV = "GRAE_SUPERVISOR_FD"
#: the exit status of a forked copy of the trainer that returned into training
FORKED_COPY_EXIT = 70
#: the process that trains (a forked copy has another pid)
_TRAINER_PID = os.getpid()
_tokens = itertools.count(1)
#: the pipe to the supervisor, once :func:`adopt` took it from the environment, and its (device, inode)
_fd: int | None = None
_pipe: tuple[int, int] | None = None
#: user code closed (or replaced) the pipe: nothing more is said on it
_lost = False
#: this process is ``grae train``'s own (:func:`adopt` ran): its end may end the process (:func:`_end_within`)
_adopted = False
#: (absolute run directory, run id) once the run claimed it; whether a complete checkpoint of it is on disk
_run: tuple[str, str] | None = None
_checkpointed = False
#: non-daemon threads begun inside a reward call: thread ident -> the reward function's name
_started_by: dict[int, str] = {}
#: after grae train's own end, how long threads a reward left may hold the process before it ends without them
END_GRACE_S = 5.0


class RewardInterrupt(RuntimeError):
    """A reward function raised ``KeyboardInterrupt`` while no stop signal had arrived: its own error."""


class StopSignal(KeyboardInterrupt):
    """The ``KeyboardInterrupt`` a grae stop-signal handler raises (a second Ctrl-C): a real interrupt."""


#: the attribute that marks a SIGINT handler raising only :class:`StopSignal` (:func:`raises_stop_signal`)
_MARK = "_grae_raises_stop_signal"


def raises_stop_signal(handler):
    """Mark ``handler`` (a function, or a method's function) as a SIGINT handler whose only exception is
    :class:`StopSignal`: while it is installed, any other ``KeyboardInterrupt`` was raised by code."""
    setattr(handler, _MARK, True)
    return handler


def raised_by_code(err: BaseException) -> bool:
    """``err`` (a ``KeyboardInterrupt``) was raised by code, not by a signal: SIGINT's handler is one that raises
    only :class:`StopSignal`, and ``err`` is not one. Under any other handler it cannot be told, and counts as a
    signal's."""
    return not isinstance(err, StopSignal) and bool(getattr(signal.getsignal(signal.SIGINT), _MARK, False))


def adopt() -> bool:
    """In the training process: take the pipe from the environment (so no process it starts sees the variable or
    writes to a descriptor of that number); True when this process is supervised."""
    global _fd, _adopted
    value = os.environ.pop(ENV, None)
    if value is None:
        return False
    _adopted = True
    if value.isdigit():
        global _pipe
        _fd = int(value)
        with contextlib.suppress(OSError):
            os.set_inheritable(_fd, False)
            _pipe = _identity(_fd)
    return True


def _identity(fd: int) -> tuple[int, int]:
    st = os.fstat(fd)
    return st.st_dev, st.st_ino


def _send(line: str) -> bool:
    """Write ``line`` to the supervisor; False when the pipe is lost (closed by user code, its number reused)."""
    global _lost
    fd = _fd
    if fd is None or _lost:
        return False
    try:
        if _pipe is not None and _identity(fd) != _pipe:
            raise OSError("not the supervisor's pipe")
        os.write(fd, (line.replace("\n", " ")[:3000] + "\n").encode("utf-8", "replace"))
        return True
    except OSError:  # closed or replaced by user code; or the supervisor is gone (the process dies with it:
        _lost = True  # PR_SET_PDEATHSIG)
        return False


@contextlib.contextmanager
def reward_call(name: str, limit_s: float | None = None) -> Iterator[None]:
    """Around one call of reward function ``name`` (which should not take longer than ``limit_s``)."""
    token = next(_tokens)
    _send(f"R {token} {f'{limit_s:.3f}' if limit_s is not None else '-'} {name}")
    before = {thread.ident for thread in threading.enumerate()}
    try:
        yield
    except KeyboardInterrupt as err:
        if not raised_by_code(err):
            raise
        raise RewardInterrupt(f"reward function {name!r} raised KeyboardInterrupt while no stop signal had arrived "
                              "(Ctrl-C and SIGTERM finish the step and save a checkpoint): it is the function's own "
                              "error, so the run stops here") from err
    finally:
        leave_if_copy(name)
        for thread in threading.enumerate():  # the innermost call that began a thread is named for it
            if thread.ident not in before and not thread.daemon and thread.ident is not None:
                _started_by.setdefault(thread.ident, name)
        _send(f"E {token}")


def leave_if_copy(name: str) -> None:
    """In a copy of the trainer that ``os.fork()`` in reward function ``name`` made and that returned into
    training: say so and exit at once (it would train, checkpoint and write ``final/`` beside the real run, and
    ignore SIGTERM as the trainer does). A forked child that never returns (a pool worker) is not affected."""
    if os.getpid() == _TRAINER_PID:
        return
    _send(f"F {os.getpid()} {name}")
    if _fd is not None:  # supervised: stop the trainer now, before it writes a checkpoint or final/ (a 2-step run
        # finished within the supervisor's poll); the supervisor, told above, names the fork and stops the rest
        with contextlib.suppress(OSError):
            os.kill(_TRAINER_PID, signal.SIGKILL)
    if _fd is None:  # not supervised (a library user's trainer): said here; a supervisor says it once itself
        with contextlib.suppress(OSError, ValueError):
            sys.stderr.write(f"error: reward function {name!r} forked the training process and the copy (pid "
                             f"{os.getpid()}) returned into training; the copy exits\n")
            sys.stderr.flush()
    os._exit(FORKED_COPY_EXIT)


def begin() -> None:
    """A ``grae train`` command begins in this process: no run directory claimed, no checkpoint saved yet."""
    global _run, _checkpointed
    _run, _checkpointed = None, False


def run_directory(path: str, run_id: str) -> None:
    """The run claimed its directory ``path`` (absolute) as run ``run_id``."""
    global _run
    _run = (str(path), run_id)
    with contextlib.suppress(OSError):
        os.remove(lost_end_path(path, os.getpid()))
    _send(f"D {run_id} {path}")


def checkpoint_saved(path: str) -> None:
    """A complete checkpoint of the run is on disk at ``path``."""
    global _checkpointed
    _checkpointed = True
    _send(f"C {path}")


def advice(claimed: bool, checkpointed: bool) -> str:
    """What a rerun can do after a run that did not finish: ``claimed``, its directory was claimed; ``checkpointed``,
    a complete checkpoint of it was on disk. Never a ``--resume`` that would be refused."""
    if not claimed:
        return "nothing of the run was written yet (it ended before claiming its run directory): rerun the same command"
    if not checkpointed:
        return "no checkpoint of it was saved, so there is nothing to resume: --overwrite starts it anew"
    return "--resume continues from the newest complete checkpoint"


def own_advice() -> str:
    """:func:`advice` for this process's run."""
    return advice(_run is not None, _checkpointed)


def lost_end_path(run_dir: str, pid: int) -> str:
    """Where a process whose pipe was lost writes its own end (:func:`finished`) for the supervisor to read."""
    return os.path.join(run_dir, f".grae_end.{pid}.json")


def read_lost_end(run_dir: str, pid: int) -> int | None:
    """The exit status process ``pid`` wrote into ``run_dir`` when its pipe was lost (the file is removed), or
    None."""
    path = lost_end_path(run_dir, pid)
    try:
        with open(path) as f:
            code = json.load(f).get("exit")
    except (OSError, ValueError, AttributeError):
        return None
    with contextlib.suppress(OSError):
        os.remove(path)
    return code if isinstance(code, int) and not isinstance(code, bool) else None


def finished(code: int) -> None:
    """``grae train`` ends by its own decision with exit status ``code``: said on the pipe, or, when user code
    closed it, written into the run directory; and the process ends within :data:`END_GRACE_S` whatever
    threads a reward left (:func:`_end_within`)."""
    if not _send(f"X {code}") and _lost and _run is not None:
        with contextlib.suppress(OSError):
            path = lost_end_path(_run[0], os.getpid())
            with open(path + ".partial", "w") as f:
                json.dump({"exit": code, "run_id": _run[1]}, f)
            os.replace(path + ".partial", path)
    if _adopted:  # grae train's own process (not a caller's, which goes on after the command)
        threading.Thread(target=_end_within, args=(code, END_GRACE_S), daemon=True, name="grae-end").start()


def _end_within(code: int, grace_s: float) -> None:
    """Once the interpreter is shutting down (the main thread has ended) and ``grace_s`` seconds later still waits
    for threads that are not daemons: name them and end the process with ``code``. Atexit handlers do not run then
    (they would run only after those threads end, which they do not)."""
    while threading.main_thread().is_alive():
        time.sleep(0.05)
    time.sleep(grace_s)
    left = [thread for thread in threading.enumerate()
            if thread.is_alive() and not thread.daemon and thread is not threading.main_thread()]
    if not left:
        return
    named = "; ".join(f"thread {thread.name!r}" + (f" begun in reward function {_started_by[thread.ident]!r}"
                                                    if thread.ident in _started_by else "") for thread in left)
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()
        sys.stderr.write(f"warning: grae train ended (exit {code}) but {named} still ran {grace_s:.0f} s later and "
                         "is not a daemon thread, so the process would never exit; it ends without waiting "
                         "(start such threads with daemon=True, or join them in the reward)\n")
        sys.stderr.flush()
    os._exit(code)
