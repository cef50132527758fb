"""A run's disk use: ``final/`` shares its files with the last checkpoint where they are the same bytes, and
the run directory's size is measured with each file counted once.

The run keeps ``final/`` and the last resumable checkpoint (``trl.save_total_limit`` 1 by default; a value
given is honoured). After training both hold the same weights: :func:`share_identical_files` replaces each
file of ``final/`` whose bytes equal the checkpoint's file of the same name by a hard link to it, so the
weights are stored once (a 3-step SmolLM2 run: 517 MB instead of 1.03 GB). The two names are then one file:
deleting either (TRL rotating the checkpoint away, ``rm -r``) keeps the other whole, but writing a model *into*
``final/`` in place (``save_pretrained("…/final")``) would change the checkpoint's file too — save a changed
model elsewhere. Where hard links are not possible (another file system, Windows shares), both copies stay.
"""

from __future__ import annotations

import filecmp
import os
from pathlib import Path


def share_identical_files(target: Path, source: Path) -> int:
    """Hard-link each regular file of ``target`` (not recursing) whose bytes equal ``source``'s file of the same
    name to that file; returns the bytes no longer stored twice (0 where linking fails or nothing is equal)."""
    saved = 0
    if not target.is_dir() or not source.is_dir():
        return 0
    for path in sorted(target.iterdir()):
        twin = source / path.name
        if not path.is_file() or path.is_symlink() or not twin.is_file() or twin.is_symlink():
            continue
        if os.path.samefile(path, twin):
            saved += path.stat().st_size
            continue
        if path.stat().st_size != twin.stat().st_size or not filecmp.cmp(path, twin, shallow=False):
            continue
        staging = path.with_name(path.name + ".link")
        try:
            if staging.exists():
                staging.unlink()
            os.link(twin, staging)
            os.replace(staging, path)
        except OSError:  # no hard links here: keep the copy
            staging.unlink(missing_ok=True)
            continue
        saved += path.stat().st_size
    return saved


def directory_size(root: Path) -> int:
    """Bytes under ``root``, each file counted once however many hard links it has there."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for folder, _, files in os.walk(root):
        for name in files:
            try:
                info = os.lstat(os.path.join(folder, name))
            except OSError:  # removed meanwhile
                continue
            if (info.st_dev, info.st_ino) in seen:
                continue
            seen.add((info.st_dev, info.st_ino))
            total += info.st_size
    return total


def human_bytes(size: float) -> str:
    """``517 MB``, ``1.1 GB``, ``38 kB`` (powers of 1000, as ``du --si``)."""
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" or size >= 100 else f"{size:.1f} {unit}"
        size /= 1000
    return f"{size:.1f} TB"
