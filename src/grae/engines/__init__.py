"""Engine adapters: grae's estimators and losses inside TRL (:mod:`grae.engines.trl`) and verl.

This package's own module imports only the standard library (the verl engine imports it without TRL, and the
reverse)."""

import os

#: estimator state file both engines write into a checkpoint folder
STATE_FILE = "grae_estimator_state.json"
#: written last into a checkpoint folder: a folder without it was cut off mid-write and is never resumed
#: (:func:`grae.train.checkpoints.latest_complete_checkpoint`)
COMPLETE_MARKER = "grae_checkpoint_complete"


def file_sizes(checkpoint: str) -> dict[str, int]:
    """``{name: bytes}`` of every regular file in ``checkpoint`` but the completion marker (the marker's list):
    the engine writes it into the marker, :func:`grae.train.checkpoints.checkpoint_problem` checks it."""
    return {entry.name: entry.stat().st_size for entry in os.scandir(checkpoint)
            if entry.is_file() and entry.name != COMPLETE_MARKER}
