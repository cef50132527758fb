"""Stateful grae estimators through verl's checkpoint/resume (v1 trainer), without a fork.

verl 0.9.1's v1 trainer instantiates ``trainer.checkpoint_callback_class`` on the driver, in the
process that also runs the advantage estimator, and calls ``on_save(trainer, global_step,
checkpoint_dir)`` after every checkpoint (actor/critic shards, ``data.pt``, and — unless
``async_save`` — ``latest_checkpointed_iteration.txt``). Set::

    trainer.checkpoint_callback_class=grae.engines.verl.checkpoint.GraeCheckpointCallback

and grae writes ``global_step_N/grae_estimator_state.json`` beside verl's ``data.pt``: the state of
every estimator this process has used, keyed by name + parameters, *after* step N's advantage
computation (the estimator runs before the checkpoint within a step). On a restart the callback
is constructed before verl loads its checkpoint; it finds the folder verl will resume from with
verl's own rules (``trainer.resume_mode``: ``auto`` → ``latest_checkpointed_iteration.txt`` under
``trainer.default_local_dir``; ``resume_path`` → ``trainer.resume_from_path``; ``disable`` → none)
and hands the saved states to the estimators' first call, so step N+1 sees exactly the state a
run without interruption would have seen.

verl writes its tracker file before it calls ``on_save``: a crash between the two leaves a checkpoint
verl resumes from without grae's file. The adapter therefore also snapshots the state right after
every advantage call (``default_local_dir/grae_estimator_state/global_step_N.json``, the newest 3
kept) — before step N's checkpoint exists — and the resume falls back to the snapshot of the
checkpoint's own step when the checkpoint has no state file.

Only the v1 trainer (``trainer.use_v1=true``, verl's default) calls checkpoint callbacks; the
deprecated legacy trainer does not, and stateful estimators then restart from their defaults on
resume (grae logs a warning).
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Any

from verl.trainer.ppo.checkpoint_callback import CheckpointCallback

from grae.engines import STATE_FILE
from grae.engines.verl import advantage as adv
from grae.io import atomic_write_json

logger = logging.getLogger("grae.engines.verl")
FORMAT = adv.STATE_FORMAT
SNAPSHOT_DIR = "grae_estimator_state"


def local_dir(config: Any) -> str | None:
    """``trainer.default_local_dir`` as an absolute path (verl resolves it against the working directory)."""
    trainer = config.get("trainer", {}) if config is not None and hasattr(config, "get") else {}
    base = trainer.get("default_local_dir")
    return None if not base else base if os.path.isabs(base) else os.path.join(os.getcwd(), base)


def resume_folder(config: Any) -> str | None:
    """The ``global_step_N`` folder verl's v1 ``_load_checkpoint`` will resume from (None: fresh start)."""
    if config is None:
        return None
    trainer = config.get("trainer", {}) if hasattr(config, "get") else {}
    mode = trainer.get("resume_mode", "auto")
    if mode == "disable":
        return None
    if mode == "resume_path":
        folder = trainer.get("resume_from_path")
        if not isinstance(folder, str):
            return None
        return folder if os.path.isabs(folder) else os.path.join(os.getcwd(), folder)
    base = local_dir(config)
    if mode != "auto" or base is None:
        return None
    tracker = os.path.join(base, "latest_checkpointed_iteration.txt")
    if not os.path.exists(tracker):
        return None
    with open(tracker) as f:
        step = int(f.read().strip())
    folder = os.path.join(base, f"global_step_{step}")
    return folder if os.path.isdir(folder) else None


def save_state(checkpoint_dir: str, global_step: int | None) -> str | None:
    """Write the state of every stateful cached estimator to ``checkpoint_dir/grae_estimator_state.json``."""
    state = adv.snapshot(global_step)
    if state is None:
        return None
    return str(atomic_write_json(os.path.join(checkpoint_dir, STATE_FILE), state))


def load_state(folder: str | None, snapshot_dir: str | None = None) -> None:
    """Queue the states saved in ``folder`` for the estimators' first call (see advantage.PENDING_STATE);
    when ``folder`` has no state file (a crash before ``on_save``), its step's snapshot in ``snapshot_dir``."""
    adv.RESUME.update(callback=True, folder=folder, file_found=False)
    if folder is None:
        return
    path = os.path.join(folder, STATE_FILE)
    step = re.search(r"global_step_(\d+)$", os.path.normpath(folder))
    if not os.path.exists(path) and snapshot_dir and step:
        path = os.path.join(snapshot_dir, f"global_step_{step.group(1)}.json")
        if os.path.exists(path):
            logger.warning("grae: %s has no %s (verl stopped between its tracker file and on_save); "
                           "estimator state from the step's snapshot %s", folder, STATE_FILE, path)
    if not os.path.exists(path):
        return
    with open(path) as f:
        saved = json.load(f)
    if saved.get("format") != FORMAT:
        raise ValueError(f"{path}: unknown grae state format {saved.get('format')!r} (expected {FORMAT})")
    adv.RESUME["file_found"] = True
    for key, entry in saved["estimators"].items():
        adv.PENDING_STATE[key] = entry["state"]
        adv.CACHE.pop(key, None)  # a restored state replaces whatever this process built before
    logger.info("grae: estimator state for %d estimator(s) queued from %s", len(saved["estimators"]), path)


class GraeCheckpointCallback(CheckpointCallback):
    """verl checkpoint callback that saves and restores grae estimator state (see the module docstring).

    Subclass it (and call ``super()``) to combine with your own ``on_save``.
    """

    def __init__(self, config=None):
        super().__init__(config=config)
        base = local_dir(config)
        snapshots = os.path.join(base, SNAPSHOT_DIR) if base else None
        load_state(resume_folder(config), snapshots)
        adv.RESUME["snapshot_dir"] = snapshots

    def on_save(self, trainer, global_step: int, checkpoint_dir: str, async_save: bool = False, **kwargs) -> None:
        path = save_state(checkpoint_dir, global_step)
        if path:
            logger.info("grae: estimator state saved to %s", path)
