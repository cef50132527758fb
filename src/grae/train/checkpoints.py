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
closing directory: milliseconds, no tensor is read. The completion marker lists every file of the
checkpoint with its size (:func:`file_sizes`) and its sha256 (:func:`file_digests`), so a file removed or cut
after the save is found by its size, and one overwritten in place by its content (``content=True``, what
``--resume`` checks, with the weights' finiteness: :func:`checkpoint_problem`); a marker from before the list has
its weights and optimizer state looked for. A marker whose list lacks what every checkpoint of the run holds (a
weight file, the trainer state, and the optimizer state unless the run saves the model only) is damaged, not
trusted.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from grae.engines import COMPLETE_MARKER, DIGEST, file_digests
from grae.engines import file_sizes as file_sizes  # it lived here

#: the file transformers' Trainer writes into every checkpoint and reads to resume (the step, the log history)
TRAINER_STATE = "trainer_state.json"


def weights_problem(model: str) -> str | None:
    """Why the weight files of local model directory ``model`` cannot be loaded (cut short, corrupt), as
    one line naming the file and the fix; None when they are whole, or ``model`` is not a local directory."""
    path = Path(model).expanduser()
    if not path.is_dir():
        return None
    reason = checkpoint_damage(str(path), only=lambda name: not is_trainer_state_file(name))
    if reason is None:
        return None
    return (f"model: {path / reason.split(':', 1)[0]} cannot be read ({reason.split(':', 1)[1].strip()}); the file is "
            "cut short or corrupt: copy or download it again, or use another checkpoint")


def checkpoint_damage(checkpoint: str, only=None) -> str | None:
    """Why ``checkpoint`` cannot be loaded whole — a ``.safetensors`` file shorter than its header
    says, a torch ``.pt``/``.bin`` archive without its closing directory (cut short) — or None. Reads
    headers and archive directories only, not the tensors. ``only(name)``: the files to look at (all)."""
    import zipfile

    for name in sorted(os.listdir(checkpoint)):
        if only is not None and not only(name):
            continue
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


#: weight files of a checkpoint (full model, shards, a LoRA adapter, the older torch format)
WEIGHT_PREFIXES = ("model", "adapter_model", "pytorch_model")


def is_weight_file(name: str) -> bool:
    return name.startswith(WEIGHT_PREFIXES) and name.endswith((".safetensors", ".bin"))


def is_trainer_state_file(name: str) -> bool:
    """A file of a checkpoint that only the Trainer's resume reads (``from_pretrained`` never does): the
    optimizer, scheduler and RNG state and the training arguments."""
    return name in ("optimizer.pt", "scheduler.pt", "training_args.bin") or name.startswith("rng_state")


def checkpoint_problem(checkpoint: str, *, weights_only: bool = False, content: bool = False,
                       saves_optimizer: bool = False) -> str | None:
    """Why ``checkpoint`` (marked complete) cannot be resumed, as ``"<file>: <reason>"``: a file its marker lists
    is missing or has another size, a weight or optimizer file is missing (a marker without the list), or a
    file is cut or corrupt (:func:`checkpoint_damage`); None when it is whole. ``weights_only``: the weight
    files alone (whether the trained weights survive). ``content``: also each file's sha256 against the marker's
    and the weights' finiteness (reads every byte: ``--resume``). ``saves_optimizer``: the run saves optimizer
    state (not ``save_only_model``), so a marker that lists none is damaged."""
    record = _marker(os.path.join(checkpoint, COMPLETE_MARKER))
    listed = record.get("files")
    present = file_sizes(checkpoint)
    if isinstance(listed, dict):
        expected = listed
        reason = _unlisted(checkpoint, listed, weights_only=weights_only, saves_optimizer=saves_optimizer)
        if reason:
            return reason
    else:  # a marker from before the file list: the weights, and the optimizer state beside a scheduler's
        expected = {name: present.get(name) for name in present if is_weight_file(name)} or {"model.safetensors": None}
        if "scheduler.pt" in present:
            expected.setdefault("optimizer.pt", None)
    for name, size in sorted(expected.items()):
        if weights_only and not is_weight_file(name):
            continue
        if name not in present:
            return f"{name}: missing"
        if isinstance(size, int) and present[name] != size:
            return f"{name}: {present[name]} bytes, {size} when it was saved"
    reason = checkpoint_damage(checkpoint, only=is_weight_file if weights_only else None)
    if reason or not content:
        return reason
    return _content_problem(checkpoint, record.get(DIGEST), [n for n in expected if not weights_only or
                                                             is_weight_file(n)]) or non_finite_weights(checkpoint)


def _unlisted(checkpoint: str, listed: dict, *, weights_only: bool, saves_optimizer: bool) -> str | None:
    """What a marker's file list lacks of what every checkpoint holds (its list emptied, a file taken out of it)."""
    if not any(is_weight_file(name) for name in listed):
        return "the completion marker lists no weight file, which every checkpoint holds: it is not the save's marker"
    if weights_only:
        return None
    if TRAINER_STATE not in listed:
        return f"{TRAINER_STATE}: not in the completion marker's list (every checkpoint holds it)"
    if saves_optimizer and not any(name.startswith("optimizer") for name in listed) \
            and not any(entry.name.startswith("global_step") for entry in os.scandir(checkpoint) if entry.is_dir()):
        return ("optimizer.pt: not in the completion marker's list, and the run saves its optimizer state "
                "(trl.save_only_model is off)")
    return None


def _content_problem(checkpoint: str, digests, names: list[str]) -> str | None:
    """The first of ``names`` whose sha256 is not the one the marker recorded (``digests``; None: a marker from
    before the digests, checked by sizes only)."""
    if not isinstance(digests, dict):
        return None
    missing = sorted(name for name in names if name not in digests)
    if missing:
        return f"{missing[0]}: no {DIGEST} in the completion marker, which records one for every file it lists"
    actual = file_digests(checkpoint, names)
    for name in sorted(names):
        if actual[name] != digests[name]:
            return (f"{name}: its content is not what was saved (same size, {DIGEST} {actual[name][:12]}…, "
                    f"{str(digests[name])[:12]}… when it was saved): overwritten or corrupted since")
    return None


def non_finite_weights(checkpoint: str) -> str | None:
    """``"<file>: N non-finite values (first in <tensor>)"`` for the first weight file of ``checkpoint`` holding
    NaN or ±inf, or None (grae never saves such weights: something changed them since)."""
    import torch
    from safetensors import safe_open

    from grae.engines.divergence import non_finite_count

    for name in sorted(n for n in os.listdir(checkpoint) if is_weight_file(n)):
        path = os.path.join(checkpoint, name)
        if name.endswith(".safetensors"):
            with safe_open(path, framework="pt") as f:
                tensors = ((key, f.get_tensor(key)) for key in f.keys())
                bad = _first_non_finite(tensors, non_finite_count)
        else:
            bad = _first_non_finite(torch.load(path, map_location="cpu", weights_only=True).items(), non_finite_count)
        if bad:
            return f"{name}: {bad[1]:,} non-finite values (first in {bad[0]}), which grae never saves"
    return None


def _first_non_finite(tensors, count) -> tuple[str, int] | None:
    """(name of the first tensor holding non-finite values, their count over every tensor) or None."""
    first, total = None, 0
    for key, tensor in tensors:
        bad = count([tensor])[0]
        if bad and first is None:
            first = key
        total += bad
    return (first, total) if first is not None else None


def latest_complete_checkpoint(folder: str, run_id: str | None = None, on_damaged=None, *,
                               content: bool = False) -> str | None:
    """The newest ``checkpoint-N`` in ``folder`` whose save finished (has the completion marker), whose
    files are whole (:func:`checkpoint_damage`) and, when ``run_id`` is given, that this run wrote (a
    marker naming another run, or none, is foreign). ``on_damaged(checkpoint, reason)`` hears of each
    newer complete checkpoint passed over because a file of it is missing, cut or corrupt. ``content``: each
    file's content checked too, and the weights' finiteness (:func:`checkpoint_problem`)."""
    if not os.path.isdir(folder):
        return None
    steps = []
    for name in os.listdir(folder):
        marker = os.path.join(folder, name, COMPLETE_MARKER)
        if name.startswith("checkpoint-") and name[len("checkpoint-"):].isdigit() and os.path.exists(marker):
            if run_id is None or marker_run_id(marker) == run_id:
                steps.append(int(name[len("checkpoint-"):]))
    for step in sorted(steps, reverse=True):
        checkpoint = os.path.join(folder, f"checkpoint-{step}")
        reason = checkpoint_problem(checkpoint, content=content)
        if reason is None:
            return checkpoint
        if on_damaged is not None:
            on_damaged(checkpoint, reason)
    return None


def marker_run_id(marker: str) -> str | None:
    """The run id a completion marker names (None: none, or unreadable)."""
    return _marker(marker).get("run_id")


def _marker(marker: str) -> dict:
    """The completion marker's record ({} when it is missing or unreadable)."""
    try:
        with open(marker) as f:
            record = json.load(f)
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}
