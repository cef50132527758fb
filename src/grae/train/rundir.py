"""One owner per run directory.

A ``grae train`` run claims its ``output_dir`` by writing ``run.json`` (a run id, the time, and the
fingerprint of its configuration) before anything else. A later command into the same directory:

* without flags, is refused in one line naming the choices, leaving the directory untouched;
* with ``--resume``, continues *that* run — only ``max_steps``, the ``eval`` settings and ``report``
  may differ from the run's configuration (:data:`RESUMABLE_KEYS`); anything else is refused,
  naming the keys;
* with ``--overwrite``, clears the directory and starts a new run (a directory that holds no grae run
  is never cleared).

The claim is made under an exclusive lock (``fcntl.flock`` on :data:`LOCK_FILE` in the directory),
held until the process ends: of two commands started together into one directory exactly one runs,
the other is refused in one line (``… is in use by another grae process``). A run that never trained
a step (it failed on bad task parameters, say: no checkpoint, no metrics row) and whose process has
ended holds nothing: the next command into the directory starts a new run there without
``--overwrite``.

Checkpoints carry the run id (``GraeTrainer.grae_run_id`` → the completion marker), and resume only
considers checkpoints of this run, so another run's ``checkpoint-12`` left behind is never resumed.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import time
import uuid
from pathlib import Path
from typing import Any

import yaml

from grae.io import atomic_write_json, atomic_write_text
from grae.train.config import ConfigError
from grae.train.metrics_file import METRICS_FILE as METRICS_FILE  # the names lived here
from grae.train.metrics_file import read_metrics as read_metrics

RUN_FILE = "run.json"
#: configuration keys a ``--resume`` may change
RESUMABLE_KEYS = ("max_steps", "eval", "report", "output_dir", "no_signal_steps", "continue_without_signal",
                  "missing_reward_steps")
#: what marks a directory as a grae run's (``config.yaml``: runs from before run.json existed)
RUN_MARKERS = (RUN_FILE, "config.yaml")
#: files a new run may find in its directory: ``grae compare``'s job configuration (its job folders)
PRE_RUN_FILES = ("job.yaml",)
#: the lock a claiming process holds for its lifetime (:func:`claim`); never cleared, never a run's content
LOCK_FILE = ".grae.lock"
#: this process's locks, by resolved directory (flock is per open file: a second open would conflict)
_HELD: dict[str, int] = {}


def fingerprint(config: dict[str, Any]) -> dict[str, Any]:
    """The part of a run's configuration that defines the run (everything but :data:`RESUMABLE_KEYS`)."""
    return json.loads(json.dumps({k: v for k, v in config.items() if k not in RESUMABLE_KEYS}, default=str))


def _digest(config: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(fingerprint(config), sort_keys=True, default=str).encode()).hexdigest()[:16]


def _differences(a: dict, b: dict, prefix: str = "") -> list[str]:
    keys = []
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key), b.get(key)
        if isinstance(x, dict) and isinstance(y, dict):
            keys += _differences(x, y, f"{prefix}{key}.")
        elif x != y:
            keys.append(f"{prefix}{key}: {x!r} → {y!r}")
    return keys


def owner(out: Path) -> dict[str, Any] | None:
    """The record (``run.json``) of the run that owns ``out``; None when there is none."""
    run_file = Path(out) / RUN_FILE
    if not run_file.exists():
        return None
    try:
        record = json.loads(run_file.read_text())
        record["run_id"], record["fingerprint"]
    except (ValueError, KeyError, TypeError):
        raise ConfigError(f"{run_file}: not a run record grae wrote; --overwrite clears the directory") from None
    return record


def changes(record: dict[str, Any], config: dict[str, Any]) -> list[str]:
    """What ``config`` changes in the run ``record`` beyond :data:`RESUMABLE_KEYS` (``"key: a → b"``); keys
    the record predates count as their defaults (:func:`grae.train.config.with_defaults`)."""
    from grae.train.config import with_defaults

    return _differences(fingerprint(with_defaults(record["fingerprint"])), fingerprint(config))


def job_changes(recorded: dict[str, Any], config: dict[str, Any]) -> list[str]:
    """What ``config`` (``to_dict(TrainConfig)``) changes in a job's recorded configuration ``recorded`` (a
    ``grae compare`` job's ``job.yaml``; keys it predates count as their defaults), every key counted but one.

    ``continue_without_signal`` false → true does not count: that flag only decides whether training stops at a
    stretch of steps without learning signal, so the steps a job trained with the stop armed are the steps it
    would have trained with the stop off, and a job the stop ended resumes where it stopped (``grae train
    --resume --continue-without-signal``). The reverse counts: a job that trained on through such a stretch is not
    the run an armed stop would have given."""
    from grae.train.config import with_defaults

    recorded = json.loads(json.dumps(with_defaults(recorded), default=str))
    config = json.loads(json.dumps(config, default=str))
    if config.get("continue_without_signal") is True and recorded.get("continue_without_signal") is False:
        recorded = {**recorded, "continue_without_signal": True}
    return _differences(recorded, config)


def claim(out: Path, config: dict[str, Any], *, resume: bool, overwrite: bool, dry_run: bool = False) -> str | None:
    """Claim ``out`` for the run configured by ``config`` (``to_dict(TrainConfig)``); the run id.

    Raises :class:`ConfigError` (one line, before anything is written) when the directory belongs to
    another run, or ``--resume`` would change what the run is. ``dry_run``: only check (nothing is
    cleared or written; None where a new run would start).
    """
    if resume and overwrite:
        raise ConfigError("--resume and --overwrite: choose one (continue the run in the directory, or clear it)")
    if out.exists() and not out.is_dir():
        raise ConfigError(f"output_dir: {out} is a file, not a directory")
    if not dry_run:
        _lock(out)
    record = owner(out) if not overwrite else None
    owned = any((out / name).exists() for name in RUN_MARKERS)
    stale = record is not None and not overwrite and never_trained(out)
    if stale:  # a run that failed before its first step holds nothing: a new run takes its place
        record, owned = None, False
    if overwrite and owned:
        if dry_run:
            return None
        _clear(out)
    elif resume and record is not None:
        changed = changes(record, config)
        if changed:
            raise ConfigError(f"--resume: {out} holds run {record['run_id']} with another configuration "
                              f"({'; '.join(changed)}); only {', '.join(RESUMABLE_KEYS[:3])} may change on resume; "
                              "use --overwrite to start a new run there")
        return record["run_id"]
    elif owned:
        what = f"run {record['run_id']}" if record else "a run written before grae recorded run owners"
        hint = "--resume continues it (only max_steps and eval settings may change)" if record else ""
        raise ConfigError(f"output_dir: {out} holds {what}; " + (f"{hint}, " if hint else "")
                          + "--overwrite clears it, or choose another --output-dir")
    elif not stale and out.is_dir() and any(entry.name not in PRE_RUN_FILES + (LOCK_FILE,) for entry in out.iterdir()):
        raise ConfigError(f"output_dir: {out} is not empty and holds no grae run; choose another --output-dir")
    if dry_run:
        return None
    run_id = uuid.uuid4().hex[:12]
    atomic_write_json(out / RUN_FILE, {"run_id": run_id, "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
                                       "config_hash": _digest(config), "fingerprint": fingerprint(config)})
    return run_id


def open_run(out: Path, config: dict[str, Any], *, resume: bool,
             overwrite: bool) -> tuple[str, str | None, list[str]]:
    """Claim ``out`` (:func:`claim`), pick the checkpoint to resume — this run's newest complete one
    whose files are whole — and record the configuration (``config.yaml``): ``(run id, checkpoint or
    None, lines to say)``; a newer checkpoint passed over (its save unfinished, its weights cut) is one line, and a
    resume that would lose or hide trained state is refused (:mod:`grae.train.resume`).

    A resume cannot shorten a run: ``max_steps`` below the steps already trained is refused (the
    weights, metrics and report would describe more steps than the configuration). Nothing is
    written when it refuses."""
    from grae.train.resume import resume_checkpoint

    run_id = claim(out, config, resume=resume, overwrite=overwrite)
    saves_optimizer = not (config.get("trl") or {}).get("save_only_model")
    checkpoint, notes = resume_checkpoint(out, run_id, saves_optimizer=saves_optimizer) if resume else (None, [])
    done = checkpoint_step(checkpoint)
    if done > config["max_steps"]:
        raise ConfigError(f"max_steps: {config['max_steps']}, but run {run_id} in {out} has trained {done} steps "
                          f"({checkpoint}); a resume keeps or extends the steps (--max-steps {done} or more), "
                          "--overwrite starts anew")
    atomic_write_text(out / "config.yaml", yaml.safe_dump(config, sort_keys=False))
    return run_id, checkpoint, notes


def checkpoint_step(checkpoint: str | None) -> int:
    """The global step of ``…/checkpoint-N`` (0 for None)."""
    return int(str(checkpoint).rsplit("-", 1)[1]) if checkpoint else 0


def never_trained(out: Path) -> bool:
    """``out``'s run trained no step: no checkpoint directory, no metrics row."""
    checkpoints = out / "checkpoints"
    if checkpoints.is_dir() and any(c.name.startswith("checkpoint-") for c in checkpoints.iterdir()):
        return False
    return not (out / METRICS_FILE).exists() or not read_metrics(out / METRICS_FILE)


def _lock(out: Path) -> None:
    """Hold ``out``'s :data:`LOCK_FILE` until this process ends; refused in one line while another holds it."""
    key = str(out.resolve())
    if key in _HELD:
        return
    out.mkdir(parents=True, exist_ok=True)
    fd = os.open(out / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise ConfigError(f"output_dir: {out} is in use by another grae process; wait for it to end, "
                          "or choose another --output-dir") from None
    _HELD[key] = fd


def release(out: Path) -> None:
    """Give up this process's lock on ``out`` (``grae compare`` claims a job folder, then its
    ``grae train`` process runs there)."""
    fd = _HELD.pop(str(Path(out).resolve()), None)
    if fd is not None:
        os.close(fd)


def _clear(out: Path) -> None:
    for child in out.iterdir():
        if child.name == LOCK_FILE:
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
