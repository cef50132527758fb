"""A full disk during ``grae train``: one line, and a run that resumes once space is freed.

Writers report a full disk differently: Python's ``OSError(ENOSPC)`` (JSON state, the completion
marker, metrics), safetensors' ``SafetensorError`` naming ``StorageFull`` / "No space left on device"
(model weights), and ``torch.save``'s ``RuntimeError … file write failed`` with the errno dropped
(optimizer, scheduler, RNG state) — that last one counts as a full disk when the file system has
less than :data:`LOW_SPACE` left. A checkpoint cut short has no completion marker, so ``--resume``
never picks it and continues from the newest complete one.

Other write failures get the same one line, worded for what happened: a file-size limit
(``ulimit -f``: ``EFBIG``, "File too large") and a read-only file system (``EROFS``). Python ignores
``SIGXFSZ``, so a process over its file-size limit sees ``EFBIG`` rather than being killed.
:func:`write_failure` is what ``grae train`` and ``grae eval`` catch around everything they write.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
DISK_FULL_WORDS = ("No space left on device", "Disk quota exceeded", "StorageFull", "QuotaExceeded")
#: the other write failures that are the machine's, not grae's: a file-size limit, a read-only file system
WRITE_LIMIT_ERRNOS = (errno.EFBIG, errno.EROFS)
WRITE_LIMIT_WORDS = ("File too large", "FileTooLarge", "Read-only file system", "ReadOnlyFilesystem")
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
        if isinstance(err, OSError) and err.errno in DISK_FULL_ERRNOS + WRITE_LIMIT_ERRNOS:
            return err.strerror or os.strerror(err.errno)
        text = str(err)
        for words in DISK_FULL_WORDS + WRITE_LIMIT_WORDS:
            if words in text:
                return words
        if TORCH_WRITE_FAILED in text and _free_bytes(where) < LOW_SPACE:
            return f"{TORCH_WRITE_FAILED}, {_free_bytes(where) >> 20} MiB free"
        if TORCH_WRITE_FAILED in text and _file_size_limited():
            return f"{TORCH_WRITE_FAILED}, file-size limit {_file_size_limited() >> 20} MiB (ulimit -f)"
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
        raise DiskFullError(f"{_what(reason)} while {doing} ({reason}); the newest complete checkpoint is "
                            f"{newest() or 'none'}: {_fix(reason)}, then rerun with --resume") from None


def write_failure(err: BaseException, where: Path, rerun: str = "rerun with --resume") -> str | None:
    """The one line for a write failure (:func:`disk_full_reason`) anywhere under ``where``; None when
    ``err`` is not one (it is then a fault of its own and must not be disguised)."""
    if isinstance(err, DiskFullError):
        return str(err)
    reason = disk_full_reason(err, where)
    if reason is None:
        return None
    return f"{_what(reason)} while writing under {where} ({reason}): {_fix(reason)}, then {rerun}"


def _what(reason: str) -> str:
    if "large" in reason.lower() or "ulimit" in reason:
        return "file-size limit reached"
    if "read-only" in reason.lower():
        return "read-only file system"
    return "disk full"


def _fix(reason: str) -> str:
    return {"file-size limit reached": "raise the file-size limit (ulimit -f)",
            "read-only file system": "write to a writable --output-dir"}.get(_what(reason), "free space")


def _file_size_limited() -> int:
    """The process's file-size limit in bytes (``ulimit -f``); 0 when there is none."""
    try:
        import resource

        soft = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
    except (ImportError, OSError, ValueError):
        return 0
    return 0 if soft == resource.RLIM_INFINITY else soft


def _free_bytes(where: Path) -> int:
    path = Path(where)
    while not path.exists() and path != path.parent:
        path = path.parent
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return 0
