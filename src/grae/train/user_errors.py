"""A failure in the user's own code during ``grae train`` (a reward function that raises on every
sample): one clear line first, the traceback in the run directory's ``error.log`` (and on the terminal
only with ``--debug``), instead of ~140 lines of TRL's and torch's frames ending in the message."""

from __future__ import annotations

import traceback
from pathlib import Path

#: the traceback of the last failure, in the run directory
ERROR_LOG = "error.log"


def user_code_error(err: BaseException) -> BaseException | None:
    """The exception in ``err``'s chain that names a failure of user code (a
    :class:`~grae.rewards.RewardFunctionError`, or a reward's own ``KeyboardInterrupt``:
    :class:`~grae.supervision.beacon.RewardInterrupt`), or None."""
    from grae.rewards import RewardFunctionError
    from grae.supervision.beacon import RewardInterrupt

    seen: set[int] = set()
    node: BaseException | None = err
    while node is not None and id(node) not in seen:
        seen.add(id(node))
        if isinstance(node, (RewardFunctionError, RewardInterrupt)):
            return node
        node = node.__cause__ or node.__context__
    return None


def one_line(err: BaseException) -> str:
    """``err``'s message on one line (a reward function's own message may span several)."""
    return " ".join(str(err).split())


def write_traceback(err: BaseException, run_dir: Path) -> Path | None:
    """Write ``err``'s full traceback to ``run_dir/error.log``; its path, or None when it cannot be written."""
    path = Path(run_dir) / ERROR_LOG
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(traceback.format_exception(err)))
    except OSError:
        return None
    return path
