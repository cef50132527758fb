"""Which checkpoint ``grae train --resume`` continues from, or why it refuses.

A resume continues from the newest *whole* checkpoint of the run: marked complete, every file its marker
lists there with its size and its content (sha256), nothing cut, the weights finite, and the marker listing what
every checkpoint of the run holds (:func:`grae.train.checkpoints.checkpoint_problem`). A newer
checkpoint is passed over, in one line, only when nothing trained is lost by it: its save never finished
(no completion marker: a kill or a full disk mid-save, when the one-checkpoint rule still keeps the one
before), or its weights themselves are cut or missing. Otherwise ``--resume`` refuses in one line that
names the checkpoint, what is wrong and the choices, and changes nothing:

* the only checkpoint is damaged or unmarked (nothing whole to resume from) — never a new start from
  step 0 over the run's metrics and checkpoint;
* a newer checkpoint's weights are whole but its optimizer state (or another file) is not: resuming from
  an older one would retrain over those weights and rotate them away;
* the run logged training steps but saved no checkpoint.
"""

from __future__ import annotations

import os
from pathlib import Path

from grae.engines import COMPLETE_MARKER
from grae.train.checkpoints import checkpoint_problem, marker_run_id
from grae.train.config import ConfigError
from grae.train.metrics_file import METRICS_FILE, read_metrics

#: what an unmarked checkpoint is
UNFINISHED = "no completion marker: its save did not finish, or the marker was removed"


def resume_checkpoint(out: Path, run_id: str, *, saves_optimizer: bool = True) -> tuple[str | None, list[str]]:
    """The checkpoint run ``run_id`` in ``out`` resumes from (None: it saved none and trained no step) and the
    lines to say about newer checkpoints passed over; :class:`ConfigError` when resuming would lose or hide
    trained state (module docstring). ``saves_optimizer``: the run saves optimizer state (``trl.save_only_model``
    off), so a checkpoint whose marker lists none is damaged."""
    passed: list[tuple[str, str, bool]] = []  # (checkpoint, what is wrong, marked complete)
    whole = None
    for path in _own_checkpoints(out / "checkpoints", run_id):
        marked = os.path.exists(os.path.join(path, COMPLETE_MARKER))
        reason = checkpoint_problem(path, content=True, saves_optimizer=saves_optimizer) if marked else UNFINISHED
        if reason is None:
            whole = path
            break
        passed.append((path, reason, marked))
    for path, reason, marked in passed:
        weights_whole = checkpoint_problem(path, weights_only=True, content=True) is None
        if whole is None or (marked and weights_whole):
            raise ConfigError(_refusal(out, run_id, path, reason, whole, weights_whole, marked))
    if whole is None:
        trained = _logged_steps(out)
        if trained:
            raise ConfigError(f"--resume: run {run_id} in {out} logged {trained} training steps but saved no checkpoint, "
                              "so nothing of it can be resumed; nothing was changed. --overwrite trains it anew, "
                              "or choose another --output-dir")
        return None, []
    notes = [f"{path} is {_state(marked)} ({reason}"
             + ("; its weights are not whole" if marked else "")
             + f"); resuming from {whole}, the newest whole checkpoint (the steps after it are trained again)"
             for path, reason, marked in passed]
    return whole, notes


def _own_checkpoints(folder: Path, run_id: str) -> list[str]:
    """``checkpoint-N`` folders of ``folder``, newest first, leaving out those another run marked complete."""
    if not folder.is_dir():
        return []
    found = []
    for entry in folder.iterdir():
        step = entry.name[len("checkpoint-"):]
        if not (entry.name.startswith("checkpoint-") and step.isdigit() and entry.is_dir()):
            continue
        marker = entry / COMPLETE_MARKER
        if marker.exists() and marker_run_id(str(marker)) != run_id:
            continue  # another run's (left behind, copied in): never this run's, never resumed
        found.append((int(step), str(entry)))
    return [path for _, path in sorted(found, reverse=True)]


def _state(marked: bool) -> str:
    return "damaged" if marked else "unfinished"


def _refusal(out: Path, run_id: str, path: str, reason: str, whole: str | None, weights_whole: bool,
             marked: bool) -> str:
    if whole is None:
        head = f"--resume: {path} is {_state(marked)} ({reason}) and run {run_id} has no whole checkpoint before it"
    else:
        head = (f"--resume: {path} is {_state(marked)} ({reason}) but its weights are whole, and resuming from "
                f"{whole} (the newest whole checkpoint) would train over them")
    choices = []
    if weights_whole:
        choices.append(f"start a new run from its weights (--model {path} --output-dir NEW)")
    if marked:
        choices.append("put the file back and rerun with --resume")
    if whole is not None:
        choices.append(f"delete {path} to resume from {whole}")
    choices.append(f"--overwrite trains {out} anew")
    return f"{head}; nothing was changed. Choices: " + "; ".join(choices)


def _logged_steps(out: Path) -> int:
    rows = read_metrics(out / METRICS_FILE) if (out / METRICS_FILE).exists() else []
    return max((int(row["step"]) for row in rows), default=0)
