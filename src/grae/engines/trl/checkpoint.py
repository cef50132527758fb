"""GraeTrainer's checkpoint state: what grae adds to each checkpoint folder and reads back on resume.

* ``grae_estimator_state.json`` (:data:`~grae.engines.STATE_FILE`): the estimator's state (AVSPO's τ),
  restored on resume — the mechanism TRL uses for its adaptive-entropy controller;
* ``grae_sampling_state.json`` (:data:`SAMPLING_STATE_FILE`): completions generated so far (the budget),
  the VADE posterior and the uniform prompt stream;
* ``grae_checkpoint_complete`` (:data:`~grae.engines.COMPLETE_MARKER`), written last, naming the step,
  the run and every file of the checkpoint with its size and its sha256 (:func:`~grae.engines.file_digests`):
  :func:`grae.train.checkpoints.latest_complete_checkpoint` only resumes from folders that have it, and
  ``--resume`` checks every file's content against it (:func:`grae.train.checkpoints.checkpoint_problem`).
"""

from __future__ import annotations

import contextlib
import json
import os
from typing import Any

import torch

from grae.engines import COMPLETE_MARKER, DIGEST, STATE_FILE, file_digests, file_sizes
from grae.io import atomic_write_json
from grae.supervision import beacon

#: dynamic sampling / prompt selection state in a checkpoint: the VADE posterior, the uniform stream, the budget
SAMPLING_STATE_FILE = "grae_sampling_state.json"


class CheckpointState:
    """GraeTrainer's checkpoint pieces (a mixin of :class:`~grae.engines.trl.GraeTrainer`; every attribute
    it reads is the trainer's)."""

    def _write_grae_state(self, folder: str) -> None:
        """The estimator's and the sampling state into checkpoint ``folder``, then the completion marker."""
        atomic_write_json(os.path.join(folder, STATE_FILE), {"estimator": getattr(self.estimator, "name", ""),
                                                             "state": self.estimator.state_dict()})
        atomic_write_json(os.path.join(folder, SAMPLING_STATE_FILE), self._sampling_state())
        atomic_write_json(os.path.join(folder, COMPLETE_MARKER), {"step": self.state.global_step,
                                                                  "run_id": self.grae_run_id,
                                                                  "files": file_sizes(folder),
                                                                  DIGEST: file_digests(folder)})
        beacon.checkpoint_saved(folder)

    def _load_grae_state(self, checkpoint: str) -> None:
        """The sampling and the estimator's state of ``checkpoint``; a stateful estimator refuses a
        checkpoint without its state."""
        self._load_sampling_state(checkpoint)
        path = os.path.join(checkpoint, STATE_FILE)
        if os.path.exists(path):
            with open(path) as f:
                saved = json.load(f)
            self.estimator.load_state_dict(saved["state"])
        elif self.estimator.state_dict():
            raise FileNotFoundError(
                f"{path}: resuming a stateful estimator ({getattr(self.estimator, 'name', '')}) from a checkpoint "
                "without its state; it was not written by GraeTrainer."
            )

    def _sampling_state(self) -> dict:
        return {"generated_completions": self.grae_generated_completions,
                "posterior": self._posterior.state_dict() if self._posterior is not None else None,
                "stream": self._prompt_stream.state_dict() if self._prompt_stream is not None else None}

    def _load_sampling_state(self, checkpoint: str) -> None:
        path = os.path.join(checkpoint, SAMPLING_STATE_FILE)
        if not os.path.exists(path):  # a checkpoint from before dynamic sampling existed
            if self._posterior is not None:
                raise FileNotFoundError(f"{path}: resuming prompt selection (sampling.selection=vade) from a checkpoint "
                                        "without its posterior")
            return
        with open(path) as f:
            saved = json.load(f)
        self.grae_generated_completions = int(saved.get("generated_completions", 0))
        if self._posterior is not None:
            if saved.get("posterior") is None:
                raise ValueError(f"{path}: the checkpoint was trained without sampling.selection=vade; resume with "
                                 "the same sampling settings")
            self._posterior.load_state_dict(saved["posterior"])
        if self._prompt_stream is not None and saved.get("stream") is not None:
            self._prompt_stream.load_state_dict(saved["stream"])


@contextlib.contextmanager
def cpu_map_location():
    """Load ``"cpu:<rank>"`` map locations as ``"cpu"``.

    transformers loads the optimizer state with ``map_location=args.device`` under data parallelism;
    on CPU (gloo) that device is ``cpu:<rank>``, which ``torch.load`` cannot restore ("don't know how to
    restore data location ... tagged with cpu:0"), so every multi-process CPU resume would fail.
    """
    original = torch.load

    def load(*args: Any, map_location: Any = None, **kwargs: Any) -> Any:
        if map_location is not None and str(map_location).startswith("cpu:"):
            map_location = "cpu"
        return original(*args, map_location=map_location, **kwargs)

    torch.load = load
    try:
        yield
    finally:
        torch.load = original
