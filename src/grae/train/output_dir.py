"""Where a run goes when no user named its directory: beside the runs it is not.

A packaged layer (the embedded default, a preset recipe, a packaged config) names the directory of *its* run:
``runs/default`` is the embedded default's tiny model on its task with its estimator, ``runs/smollm2`` the
smollm2 recipe's. A run that changes the model, the task or the estimator without ``--output-dir`` (or an
``output_dir`` in the user's own file) is another run, and goes to ``runs/<model>-<task>-<estimator>`` instead:
an own-data run never lands in (and is never refused by, or resumed into) the default run's directory.
"""

from __future__ import annotations

import re
from pathlib import PurePath
from typing import Any

#: the keys that make a run another run than its recipe's
RUN_KEYS = ("model", "task.name", "estimator")


def run_name(model: Any, task: Any, estimator: Any) -> str:
    """``runs/<model>-<task>-<estimator>``, each part as a file name: a model directory or hub id by its last
    part, a data file by its stem (``local:``/``hf:`` dropped)."""
    def part(value: Any, stem: bool = False) -> str:
        text = str(value).removeprefix("local:").removeprefix("hf:").rstrip("/")
        path = PurePath(text)
        text = (path.stem if stem and path.suffix else path.name) or text
        return re.sub(r"[^A-Za-z0-9._]+", "-", text).strip("-.") or "run"

    return f"runs/{part(model)}-{part(task, stem=True)}-{part(estimator)}"


def default_output_dir(layers: list[tuple[str, str, dict[str, Any]]], raw: dict[str, Any], explicit: frozenset[str],
                       defaults: dict[str, Any]) -> str | None:
    """The run directory of a run whose ``output_dir`` no user gave (not in ``explicit``), or None to keep the
    merged one: None when the layer that named it (the last in ``layers`` to assign ``output_dir``) describes this
    same run (the :data:`RUN_KEYS` as merged up to that layer, ``defaults`` where none assigned them, equal those
    of ``raw``), else :func:`run_name`."""
    if "output_dir" in explicit:
        return None
    merged: dict[str, Any] = dict(defaults)
    owner = None
    for _, _, layer in layers:
        merged.update({key: layer[key] for key in RUN_KEYS if key in layer})
        if "output_dir" in layer:
            owner = {key: merged[key] for key in RUN_KEYS}
    task = raw.get("task")
    this = {"model": raw.get("model", defaults["model"]),
            "task.name": task.get("name", defaults["task.name"]) if isinstance(task, dict) else defaults["task.name"],
            "estimator": raw.get("estimator", defaults["estimator"])}
    if owner == this:
        return None
    return run_name(this["model"], this["task.name"], this["estimator"])
