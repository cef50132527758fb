"""Engine adapters: grae's estimators and losses inside TRL (:mod:`grae.engines.trl`) and verl.

This package's own module imports only the standard library (the verl engine imports it without TRL, and the
reverse)."""

import hashlib
import os
from concurrent.futures import ThreadPoolExecutor

#: estimator state file both engines write into a checkpoint folder
STATE_FILE = "grae_estimator_state.json"
#: written last into a checkpoint folder: a folder without it was cut off mid-write and is never resumed
#: (:func:`grae.train.checkpoints.latest_complete_checkpoint`)
COMPLETE_MARKER = "grae_checkpoint_complete"


#: the content hash a completion marker records of each file (``hashlib`` name)
DIGEST = "sha256"


def file_sizes(checkpoint: str) -> dict[str, int]:
    """``{name: bytes}`` of every regular file in ``checkpoint`` but the completion marker (the marker's list):
    the engine writes it into the marker, :func:`grae.train.checkpoints.checkpoint_problem` checks it."""
    return {entry.name: entry.stat().st_size for entry in os.scandir(checkpoint)
            if entry.is_file() and entry.name != COMPLETE_MARKER}


def file_digests(checkpoint: str, names=None) -> dict[str, str]:
    """``{name: sha256 hex}`` of the files :func:`file_sizes` lists (``names``: of those only): the content the
    completion marker records, so a file changed after the save with its size kept (bytes overwritten in place) is
    found on resume. The files are hashed in parallel threads (``hashlib`` releases the GIL), each read once."""
    names = sorted(file_sizes(checkpoint) if names is None else names)

    def digest(name: str) -> str:
        with open(os.path.join(checkpoint, name), "rb") as f:
            return hashlib.file_digest(f, DIGEST).hexdigest()

    with ThreadPoolExecutor(max_workers=max(1, min(len(names), os.cpu_count() or 1, 8))) as pool:
        return dict(zip(names, pool.map(digest, names)))
