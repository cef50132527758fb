"""``grae eval RUN_DIR``: evaluate a ``grae train`` run's trained model on the run's own held-out problems.

A run records its resolved configuration in ``config.yaml``. The held-out problems are the ones ``grae train``
evaluated before and after training: the task built as the run built it (``task.name`` with ``task.params``,
so the same file, split, prompt and answer extraction) and its first ``eval.num_problems`` held-out problems.
The sampling settings default to the run's ``eval`` section, so the numbers are comparable with the run's own
table; the rows carry the run's task name, so ``grae report RUN_DIR eval/RUN`` files both under one task.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


class RunHeldoutError(ValueError):
    """A run directory whose held-out problems cannot be evaluated (no final model, no readable config)."""


#: the ``eval`` keys of a run's config that ``grae eval`` takes as its own defaults (the batch size too: each
#: generate call is seeded from its first problem, so the same calls draw the same samples as the run's)
EVAL_DEFAULTS = ("n", "temperature", "top_p", "max_tokens", "seed", "num_problems", "batch_size")


@dataclass
class RunHeldout:
    """What ``grae eval RUN_DIR`` evaluates: the run's final model on its task's held-out problems."""

    run: Path
    model: Path
    task_name: str
    task_params: dict[str, Any] = field(default_factory=dict)
    #: the run's ``eval`` settings among :data:`EVAL_DEFAULTS`
    settings: dict[str, Any] = field(default_factory=dict)

    def task(self):
        """The task as ``grae train`` built it (:func:`grae.data.get_task`)."""
        from grae.data import get_task

        return get_task(self.task_name, **self.task_params)

    def describe(self) -> str:
        """One line: what is evaluated and with which settings."""
        extraction = self.task_params.get("answer_extraction")
        return (f"{self.run}: its final model on its {self.settings.get('num_problems', '?')} held-out problems of "
                f"{self.task_name}" + (f" (extraction {extraction})" if extraction else "")
                + ", sampling as the run did (" + ", ".join(f"{k}={self.settings[k]}" for k in EVAL_DEFAULTS[:4]
                                                           if k in self.settings) + ")")


def run_directory(path: str | Path) -> Path | None:
    """The ``grae train`` run directory ``path`` is, or whose ``final/`` it is; None for anything else."""
    from grae.train.rundir import RUN_FILE

    path = Path(path).expanduser()
    for run in (path, path.parent) if path.name == "final" else (path,):
        if run.is_dir() and (run / RUN_FILE).is_file() and (run / "config.yaml").is_file():
            return run
    return None


def read_run(run: Path) -> RunHeldout:
    """The run in ``run``'s held-out evaluation, from its ``config.yaml``; :class:`RunHeldoutError` naming the
    fix where it has no final model or no readable task."""
    import yaml

    from grae.yaml_io import load_yaml

    final = run / "final"
    if not final.is_dir():
        raise RunHeldoutError(f"{run} has no final/ model (training has not finished): finish it with grae train "
                              f"{run / 'config.yaml'} --output-dir {run} --resume, or evaluate a checkpoint with "
                              f"grae eval {run}/checkpoints/checkpoint-N --tasks TASK")
    try:
        config = load_yaml((run / "config.yaml").read_text()) or {}
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as err:
        raise RunHeldoutError(f"{run / 'config.yaml'} cannot be read ({err}); give --tasks to evaluate final/") from None
    task = config.get("task") if isinstance(config, dict) else None
    if not isinstance(task, dict) or not isinstance(task.get("name"), str):
        raise RunHeldoutError(f"{run / 'config.yaml'} names no task (task.name); give --tasks to evaluate final/")
    evaluation = config.get("eval") if isinstance(config.get("eval"), dict) else {}
    return RunHeldout(run, final, task["name"], dict(task.get("params") or {}),
                      {key: evaluation[key] for key in EVAL_DEFAULTS if evaluation.get(key) is not None})
