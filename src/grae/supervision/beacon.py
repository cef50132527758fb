"""What the training process tells its supervisor (:mod:`grae.supervision.supervisor`), one short line per event
on the pipe named by :data:`ENV`; nothing at all when the process is not supervised (a library user's trainer).

* ``R <token> <limit seconds or -> <name>`` / ``E <token>``: a reward call begins / ends. The supervisor names the
  innermost call running when the process ends or overruns; ``limit`` bounds it (``reward_timeout`` × samples).
* ``F <pid> <name>``: a reward forked this process and the copy returned into training; the copy then stops the
  trainer (SIGKILL, before it can write a checkpoint or ``final/``) and exits.
* ``X <code>``: ``grae train`` itself ends with ``code`` (any other end is one it did not choose).

Two ``os.write`` calls per reward call (a few microseconds; a training step calls each reward function once).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import sys
from collections.abc import Iterator

#: the environment variable holding the pipe's file descriptor (``none``: supervised by something else, say nothing)
ENV = "GRAE_SUPERVISOR_FD"
#: the exit status of a forked copy of the trainer that returned into training
FORKED_COPY_EXIT = 70
#: the process that trains (a forked copy has another pid)
_TRAINER_PID = os.getpid()
_tokens = itertools.count(1)
#: the pipe to the supervisor, once :func:`adopt` took it from the environment
_fd: int | None = None


def adopt() -> bool:
    """In the training process: take the pipe from the environment (so no process it starts sees the variable or
    writes to a descriptor of that number); True when this process is supervised."""
    global _fd
    value = os.environ.pop(ENV, None)
    if value is None:
        return False
    if value.isdigit():
        _fd = int(value)
        with contextlib.suppress(OSError):
            os.set_inheritable(_fd, False)
    return True


def _send(line: str) -> None:
    fd = _fd
    if fd is None:
        return
    try:
        os.write(fd, (line.replace("\n", " ")[:3000] + "\n").encode("utf-8", "replace"))
    except OSError:  # the supervisor is gone (it was killed): the process dies with it (PR_SET_PDEATHSIG)
        pass


@contextlib.contextmanager
def reward_call(name: str, limit_s: float | None = None) -> Iterator[None]:
    """Around one call of reward function ``name`` (which should not take longer than ``limit_s``)."""
    token = next(_tokens)
    _send(f"R {token} {f'{limit_s:.3f}' if limit_s is not None else '-'} {name}")
    try:
        yield
    finally:
        leave_if_copy(name)
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


def finished(code: int) -> None:
    """``grae train`` ends by its own decision with exit status ``code``."""
    _send(f"X {code}")
