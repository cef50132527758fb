"""A full disk during ``grae train``: one line, and a run that resumes once space is freed.

Writers report a full disk differently: Python's ``OSError(ENOSPC)`` (JSON state, the completion
marker, metrics), safetensors' ``SafetensorError`` naming ``StorageFull`` / "No space left on device"
(model weights), and ``torch.save``'s ``RuntimeError … file write failed`` with the errno dropped
(optimizer, scheduler, RNG state) — that last one counts as a full disk when the file system has
less than :data:`LOW_SPACE` left. A checkpoint cut short has no completion marker, so ``--resume``
never picks it and continues from the newest complete one.
"""

from __future__ import annotations

import contextlib
import errno
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
DISK_FULL_WORDS = ("No space left on device", "Disk quota exceeded", "StorageFull", "QuotaExceeded")
#: ``torch.save``'s message for a failed write (it carries no errno)
TORCH_WRITE_FAILED = "file write failed"
LOW_SPACE = 256 << 20


class DiskFullError(RuntimeError):
    """No space left while writing the run; it resumes from its newest complete checkpoint."""


def disk_full_reason(err: BaseException, where: Path) -> str | None:
    """Why ``err`` (or an exception it chains) means the disk holding ``where`` is full; None if it does not."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, OSError) and err.errno in DISK_FULL_ERRNOS:
            return err.strerror or "No space left on device"
        text = str(err)
        for words in DISK_FULL_WORDS:
            if words in text:
                return words
        if TORCH_WRITE_FAILED in text and _free_bytes(where) < LOW_SPACE:
            return f"{TORCH_WRITE_FAILED}, {_free_bytes(where) >> 20} MiB free"
        err = err.__cause__ or err.__context__
    return None


@contextlib.contextmanager
def disk_full_is_resumable(doing: str, where: Path, newest: Callable[[], str | None]) -> Iterator[None]:
    """Turn a full disk while ``doing`` (writing under ``where``) into one :class:`DiskFullError` line
    naming the checkpoint ``--resume`` will continue from (``newest()``)."""
    try:
        yield
    except Exception as err:
        reason = disk_full_reason(err, where)
        if reason is None:
            raise
        raise DiskFullError(f"disk full while {doing} ({reason}); the newest complete checkpoint is "
                            f"{newest() or 'none'}: free space, then rerun with --resume") from None


def _free_bytes(where: Path) -> int:
    path = Path(where)
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return 0
