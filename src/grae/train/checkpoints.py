"""Run integrity for checkpoints: which checkpoint a resume may start from, and whether a model
directory's or a checkpoint's weight files are whole, read from their headers only.

GraeTrainer writes :data:`~grae.engines.COMPLETE_MARKER` last into every checkpoint folder
(:mod:`grae.engines.trl.checkpoint`); :func:`latest_complete_checkpoint` returns only checkpoints that
have it, whose files are whole and (given a run id) that this run wrote, so a save cut off mid-write or
another run's folder is never resumed from.

A ``model.safetensors`` cut short (a copy or download interrupted, a full disk) makes transformers raise
``SafetensorError: … incomplete metadata, file not fully covered`` from deep inside ``from_pretrained``,
after ``grae train`` has claimed its run directory; ``--resume`` passes over a checkpoint with such a
file. Each ``.safetensors`` header is checked against the file's size and each torch archive for its
closing directory: milliseconds, no tensor is read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from grae.engines import COMPLETE_MARKER


def weights_problem(model: str) -> str | None:
    """Why the weight files of local model directory ``model`` cannot be loaded (cut short, corrupt), as
    one line naming the file and the fix; None when they are whole, or ``model`` is not a local directory."""
    path = Path(model).expanduser()
    if not path.is_dir():
        return None
    reason = checkpoint_damage(str(path))
    if reason is None:
        return None
    return (f"model: {path / reason.split(':', 1)[0]} cannot be read ({reason.split(':', 1)[1].strip()}); the file is "
            "cut short or corrupt: copy or download it again, or use another checkpoint")


def checkpoint_damage(checkpoint: str) -> str | None:
    """Why ``checkpoint`` cannot be loaded whole — a ``.safetensors`` file shorter than its header
    says, a torch ``.pt``/``.bin`` archive without its closing directory (cut short) — or None. Reads
    headers and archive directories only, not the tensors."""
    import zipfile

    for name in sorted(os.listdir(checkpoint)):
        path = os.path.join(checkpoint, name)
        if name.endswith(".safetensors"):
            reason = _safetensors_damage(path)
        elif name.endswith((".pt", ".bin", ".pth")):
            try:
                with zipfile.ZipFile(path):
                    reason = None
            except (OSError, zipfile.BadZipFile) as err:
                reason = f"not a whole torch archive ({err})"
        else:
            continue
        if reason:
            return f"{name}: {reason}"
    return None


def _safetensors_damage(path: str) -> str | None:
    size = os.path.getsize(path)
    try:
        with open(path, "rb") as f:
            length = int.from_bytes(f.read(8), "little")
            if size < 8 or length > size - 8:
                return f"{size} bytes, shorter than its header"
            header = json.loads(f.read(length))
        end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
    except (OSError, ValueError, KeyError, TypeError, IndexError) as err:
        return f"unreadable header ({type(err).__name__})"
    if 8 + length + end > size:
        return f"{size} bytes, its header promises {8 + length + end}"
    return None


def latest_complete_checkpoint(folder: str, run_id: str | None = None, on_damaged=None) -> str | None:
    """The newest ``checkpoint-N`` in ``folder`` whose save finished (has the completion marker), whose
    files are whole (:func:`checkpoint_damage`) and, when ``run_id`` is given, that this run wrote (a
    marker naming another run, or none, is foreign). ``on_damaged(checkpoint, reason)`` hears of each
    newer complete checkpoint passed over because a file of it is cut or corrupt."""
    if not os.path.isdir(folder):
        return None
    steps = []
    for name in os.listdir(folder):
        marker = os.path.join(folder, name, COMPLETE_MARKER)
        if name.startswith("checkpoint-") and name[len("checkpoint-"):].isdigit() and os.path.exists(marker):
            if run_id is None or _marker_run_id(marker) == run_id:
                steps.append(int(name[len("checkpoint-"):]))
    for step in sorted(steps, reverse=True):
        checkpoint = os.path.join(folder, f"checkpoint-{step}")
        reason = checkpoint_damage(checkpoint)
        if reason is None:
            return checkpoint
        if on_damaged is not None:
            on_damaged(checkpoint, reason)
    return None


def _marker_run_id(marker: str) -> str | None:
    try:
        with open(marker) as f:
            return json.load(f).get("run_id")
    except (OSError, ValueError, AttributeError):
        return None
