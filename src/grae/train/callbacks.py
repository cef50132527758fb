"""Trainer callbacks for ``grae train``: metrics.jsonl, a rich progress bar, graceful Ctrl-C."""

from __future__ import annotations

import importlib.util
import json
import math
import shutil
import signal
import warnings
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from transformers import TrainerCallback
from transformers.integrations import TensorBoardCallback

from grae.engines.divergence import non_finite_count
from grae.engines.learning_signal import progress_mark
from grae.io import append_jsonl, atomic_write_text
from grae.printing import print_line
from grae.supervision.beacon import StopSignal, raises_stop_signal
from grae.train.ranks import agreed_signal

#: metrics.jsonl column -> TRL/GraeTrainer log key
COLUMNS = {
    "reward_mean": "reward",
    "reward_std": "reward_std",
    "omega": "grae/omega",
    "acr": "grae/acr",
    "frac_all_correct": "grae/frac_all_correct",
    "frac_all_wrong": "grae/frac_all_wrong",
    "entropy": "entropy",
    "adv_pos_mass": "grae/adv_pos_mass",
    "adv_neg_mass": "grae/adv_neg_mass",
    "clip_ratio": "clip_ratio/region_mean",
    "loss": "loss",
    "grad_norm": "grad_norm",
    "learning_rate": "learning_rate",
    "completion_length": "completions/mean_length",
    "step_time": "step_time",
    "kept_group_frac": "grae/kept_group_frac",
    "gen_batches": "grae/gen_batches",
    "selected_p": "grae/selected_p",
}


class MetricsJsonl(TrainerCallback):
    """Appends one JSON object per logged training step to ``metrics.jsonl`` (flushed and fsync'd).

    Named columns (``step``, ``reward_mean``, ``omega``, ``acr``, ``entropy``, ``adv_pos_mass``,
    ``adv_neg_mass``, …) come first, then every raw log key. On resume, rows after the checkpoint
    step are dropped first, so a resumed run's file has each step once; rows up to the checkpoint
    step that the file lost (torn by a kill, cut by hand) are rebuilt from the checkpoint's
    ``trainer_state.json`` log history — the same logs, so the same rows — and ``log`` says how many.
    History is never dropped silently.
    """

    def __init__(self, path: str | Path, resume_step: int | None = None, *, owner: bool = True,
                 checkpoint: str | None = None, log=None):
        self.path = Path(path)
        if owner:  # another process of a multi-process run: the main one keeps the file
            _restart_jsonl(self.path, resume_step)
            if resume_step is not None and checkpoint:
                _rebuild_lost_rows(self.path, checkpoint, log or print)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not logs or "reward" not in logs or not state.is_world_process_zero:
            return
        append_jsonl(self.path, [metrics_row(state.global_step, logs)])


def metrics_row(step: int, logs: dict) -> dict:
    """The ``metrics.jsonl`` row of the trainer's ``logs`` at ``step``."""
    row = {"step": step}
    row.update({name: _clean(logs.get(key)) for name, key in COLUMNS.items()})
    row.update({k: _clean(v) for k, v in logs.items() if isinstance(v, (int, float))})
    return row


def _rebuild_lost_rows(path: Path, checkpoint: str, log) -> None:
    """Put back the rows of ``checkpoint``'s log history that ``path`` lacks (the file ends at the checkpoint)."""
    state_file = Path(checkpoint) / "trainer_state.json"
    try:
        history = json.loads(state_file.read_text()).get("log_history", [])
    except (OSError, ValueError, AttributeError):
        history = None
    kept = {}
    for line in (path.read_text().splitlines() if path.exists() else []):
        step = _step_of(line)
        if step is not None:
            kept[step] = json.loads(line)
    if history is None:
        if kept:
            return
        log(f"{path.name}: no rows and no readable {state_file}; the history before step "
            f"{Path(checkpoint).name.rsplit('-', 1)[-1]} is lost")
        return
    logged = {int(entry["step"]): entry for entry in history
              if isinstance(entry, dict) and "reward" in entry and isinstance(entry.get("step"), int)}
    lost = sorted(set(logged) - set(kept))
    if not lost:
        return
    rows = {**kept, **{step: metrics_row(step, {k: v for k, v in logged[step].items() if k != "step"}) for step in lost}}
    atomic_write_text(path, "".join(json.dumps(rows[step]) + "\n" for step in sorted(rows)))
    log(f"{path.name}: {len(lost)} rows missing (steps {lost[0]}-{lost[-1]}) were rebuilt from {state_file}")


#: share of logged steps without signal above which the report says how much of the run trained nothing
SPARSE_SIGNAL_FRAC = 0.5


def sparse_signal_note(rows: list[dict], threshold: float = SPARSE_SIGNAL_FRAC) -> str | None:
    """One line when more than ``threshold`` of the logged steps had ``frac_reward_zero_std == 1`` (no
    gradient): the smollm2 recipe at training temperature 1.0 spends 29 of 50 steps so. None otherwise."""
    fracs = [r["frac_reward_zero_std"] for r in rows if isinstance(r.get("frac_reward_zero_std"), (int, float))]
    empty = sum(f >= 1.0 for f in fracs)
    if not fracs or empty <= threshold * len(fracs):
        return None
    rewards = [r["reward"] for r in rows if isinstance(r.get("reward"), (int, float))]
    mean = sum(rewards) / len(rewards) if rewards else float("nan")
    side = ("rarely right: an easier task, a lower training temperature, more completion tokens or more "
            "generations raise the share of groups with a right answer" if mean < 0.5 else
            "rarely wrong: a harder task keeps groups mixed")
    return (f"sparse learning signal: {empty} of {len(fracs)} logged steps had equal rewards within every group "
            f"(no gradient); mean training reward {mean:.3f}, so groups were {side}")


def is_model_only(checkpoint: str | Path) -> bool:
    """A checkpoint saved with ``save_only_model``: weights and trainer state, no optimizer, scheduler or RNG."""
    return not (Path(checkpoint) / "scheduler.pt").is_file()


class ModelOnlyResume(TrainerCallback):
    """Resuming from a ``save_only_model`` checkpoint. transformers then builds a fresh lr scheduler at step
    0 and says nothing, so a linear or cosine schedule would restart; this steps the new scheduler forward to
    the checkpoint's step before the first update and says once in the log what does restart: AdamW's
    moments and the sampling RNG (their states were never saved)."""

    def __init__(self, log):
        self.log = log

    def on_train_begin(self, args, state, control, lr_scheduler=None, **kwargs):
        if lr_scheduler is None or state.global_step == 0:
            return
        scheduler = getattr(lr_scheduler, "scheduler", lr_scheduler)  # accelerate's wrapper steps per process
        with warnings.catch_warnings():  # "lr_scheduler.step() before optimizer.step()": intended here
            warnings.simplefilter("ignore")
            for _ in range(state.global_step):
                scheduler.step()
        self.log(f"warning: resuming from a checkpoint saved with save_only_model: the lr schedule continues "
                 f"from step {state.global_step} (lr {lr_scheduler.get_last_lr()[0]:.3g}), but AdamW's moments "
                 "and the sampling RNG start afresh (not saved); set trl.save_only_model false to resume exactly")


class TrackerRunConfig(TrainerCallback):
    """grae's part of the run config in TRL's trackers (``report_to``): the estimator and its parameters
    (plus task and sampling) in the W&B run config and as TensorBoard text ``grae/config``, and held-out
    pass@k as ``heldout/<which>/pass@k`` (before training at its start, after it via :meth:`log_heldout`).
    Runs after transformers' integration callbacks, which open the W&B run and TensorBoard writer first."""

    def __init__(self, values: dict, before: dict[int, float] | None = None):
        self.values, self.before, self.trainer = values, before or {}, None

    @staticmethod
    def _wandb_run():
        if importlib.util.find_spec("wandb") is None:
            return None
        import wandb  # an optional dependency: imported where it is installed

        return wandb.run

    def _tensorboard(self, args):
        if "tensorboard" not in (args.report_to or []):
            return None
        callbacks: list = self.trainer.callback_handler.callbacks if self.trainer is not None else []
        board = next((c for c in callbacks if isinstance(c, TensorBoardCallback)), None)
        if board is None:
            return None
        if board.tb_writer is not None:
            return board.tb_writer
        # tensorboard is an optional dependency. After training TRL's writer is closed: a new one, same directory
        from torch.utils.tensorboard import SummaryWriter

        return SummaryWriter(log_dir=board.logging_dir)

    def on_train_begin(self, args, state, control, **kwargs):
        if not state.is_world_process_zero or args.report_to in (None, "none", []):
            return
        run = self._wandb_run() if "wandb" in args.report_to else None
        if run is not None:
            run.config.update({"grae": self.values}, allow_val_change=True)
        writer = self._tensorboard(args)
        if writer is not None:
            writer.add_text("grae/config", "```\n" + json.dumps(self.values, indent=2, default=str) + "\n```")
        self.log_heldout(args, "before", self.before, step=state.global_step)

    def log_heldout(self, args, which: str, passk: dict[int, float], step: int) -> None:
        if not passk or args.report_to in (None, "none", []):
            return
        values = {f"heldout/{which}/pass@{k}": float(v) for k, v in sorted(passk.items())}
        run = self._wandb_run() if "wandb" in args.report_to else None
        if run is not None:  # on transformers' x-axis (train/global_step); wandb's own step is past `step` after
            run.log({**values, "train/global_step": step})  # training, and a row logged with step= below it is dropped
        writer = self._tensorboard(args)
        if writer is not None:
            for key, value in values.items():
                writer.add_scalar(key, value, step)
            writer.flush()


class GroupsJsonl(TrainerCallback):
    """With ``sampling.log_groups``: every generated group of every training step in ``groups.jsonl``
    — step, generation round, prompt index (None where TRL's sampler chose it), kind
    (informative / all_correct / all_wrong / unscored), rewards, and whether the step trained on it.
    ``trainer`` is set once the :class:`~grae.engines.trl.GraeTrainer` exists."""

    def __init__(self, path: str | Path, resume_step: int | None = None, *, owner: bool = True):
        self.path, self.owner, self.trainer = Path(path), owner, None
        self._written = None
        if owner:
            _restart_jsonl(self.path, resume_step)

    def on_step_end(self, args, state, control, **kwargs):
        groups = getattr(self.trainer, "last_groups", None)
        if not self.owner or not groups or groups is self._written:
            return
        self._written = groups
        append_jsonl(self.path, [{"step": state.global_step, **group} for group in groups])


class CompletionBudget(TrainerCallback):
    """Stop once ``budget`` completions have been generated for training (``sampling.budget_completions``).

    The count (``trainer.grae_generated_completions``) is global and the same on every process, so all
    stop after the same step; it is saved in checkpoints and resumes."""

    def __init__(self, budget: int):
        self.budget, self.trainer = budget, None

    def on_step_end(self, args, state, control, **kwargs):
        if self.trainer is not None and self.trainer.grae_generated_completions >= self.budget:
            control.should_training_stop = True


def _restart_jsonl(path: Path, resume_step: int | None) -> None:
    """On resume keep the rows up to the checkpoint step (each step once); on a fresh run, none."""
    if resume_step is not None and path.exists():
        keep = [line for line in path.read_text().splitlines() if (step := _step_of(line)) is not None and step <= resume_step]
        atomic_write_text(path, "".join(line + "\n" for line in keep))
    elif resume_step is None and path.exists():
        path.unlink()


def _clean(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _step_of(line: str) -> int | None:
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return None  # a torn last line from a kill


class RichProgress(TrainerCallback):
    """A rich progress bar with the quantities the papers watch: reward, ω, ACR, entropy."""

    def __init__(self, console=None):
        self.progress = Progress(
            TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
            TextColumn("{task.fields[stats]}"), console=console, transient=False,
        )
        self.task = None
        #: this process speaks (the main one of a multi-process run)
        self.main = False

    def on_train_begin(self, args, state, control, **kwargs):
        if state.is_world_process_zero:
            self.main = True
            if self.progress.console.is_terminal:  # a log file or a pipe gets plain lines only: no bar frame
                self.progress.start()
                self.task = self.progress.add_task("train", total=state.max_steps, completed=state.global_step,
                                                   stats="")

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not self.main or not logs or "reward" not in logs:
            return
        stats = " ".join(f"{label}={logs[key]:.3f}" for label, key in
                         [("reward", "reward"), ("ω", "grae/omega"), ("ACR", "grae/acr"), ("H", "entropy")]
                         if isinstance(logs.get(key), (int, float))) + progress_mark(logs)
        if self.task is not None:
            self.progress.update(self.task, completed=state.global_step, stats=stats)
        else:  # a log file or a pipe: a plain line per logged step
            print_line(self.progress.console, f"train step {state.global_step}/{state.max_steps} {stats}")

    def on_train_end(self, args, state, control, **kwargs):
        if self.task is not None:
            self.progress.update(self.task, completed=state.global_step)
            self.progress.stop()
            self.task = None


class GracefulInterrupt(TrainerCallback):
    """First Ctrl-C (SIGINT) or SIGTERM: finish the current step, save a checkpoint, stop.
    ``grae train --resume`` continues from it. A second Ctrl-C interrupts immediately.

    On several processes the ranks agree at every step end (:func:`grae.train.ranks.agreed_signal`):
    a signal that reached any rank stops all of them after the same step."""

    def __init__(self):
        #: the signal this process received
        self.signal: int | None = None
        #: the signal that stops the run, agreed by every process (``grae train`` exits 128 + its number)
        self.stopped_by: int | None = None
        self._previous = {}

    def on_train_begin(self, args, state, control, **kwargs):
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not in the main thread
                pass

    @raises_stop_signal  # a KeyboardInterrupt it did not raise is the code's own (grae.supervision.beacon)
    def _handle(self, signum, frame):
        if self.signal is not None:
            signal.signal(signum, self._previous.get(signum, signal.SIG_DFL))
            raise StopSignal
        self.signal = signum

    def on_step_end(self, args, state, control, **kwargs):
        self.stopped_by = agreed_signal(args, self.signal)
        if self.stopped_by:
            control.should_save = True
            control.should_training_stop = True

    def after_training(self, args) -> int | None:
        """The agreed stopping signal once ``train()`` returned (one arriving after the last step counts:
        the job is being pre-empted, and the run must not look finished)."""
        if self.stopped_by is None:
            self.stopped_by = agreed_signal(args, self.signal)
        return self.stopped_by

    def on_train_end(self, args, state, control, **kwargs):
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        self._previous.clear()


#: where :class:`Snapshots` writes (``<run>/snapshots/step-N``)
SNAPSHOT_DIR = "snapshots"


def snapshot_path(out: str | Path, step: int) -> Path:
    """``<run>/snapshots/step-<step>``: the weights a run kept at ``step`` (``keep_steps``)."""
    return Path(out) / SNAPSHOT_DIR / f"step-{step}"


class Snapshots(TrainerCallback):
    """Keeps the model (weights + tokenizer/processor, no optimiser state) at the training steps in
    ``steps``, under ``<run>/snapshots/step-N`` — the checkpoints of a compare frontier
    (``grae.compare``). TRL's rotating ``checkpoints/`` (``save_total_limit``) never
    deletes them. A snapshot is written whole or not at all (``.partial`` then rename) and an existing
    one (a resumed run) is kept, and one with non-finite weights is never written. Only the main process
    writes."""

    def __init__(self, out: str | Path, steps, processing, owner: bool = True):
        self.out, self.steps, self.processing, self.owner = Path(out), set(steps), processing, owner

    def on_step_end(self, args, state, control, model=None, **kwargs):
        step = state.global_step
        if not self.owner or step not in self.steps or model is None:
            return
        target = snapshot_path(self.out, step)
        if target.exists():
            return
        if non_finite_count(model.parameters())[0]:  # diverged: the trainer stops at its next check
            return
        staging = target.with_name(target.name + ".partial")
        shutil.rmtree(staging, ignore_errors=True)
        model.save_pretrained(staging)
        self.processing.save_pretrained(staging)
        staging.rename(target)
