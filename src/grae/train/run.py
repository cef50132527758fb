"""The ``grae train`` recipe: evaluate → train with GraeTrainer → evaluate → report.

Run directory layout (``output_dir``)::

    config.yaml            the resolved configuration
    metrics.jsonl          one object per logged step (step, reward_mean, omega, acr, entropy, …)
    checkpoints/           the last TRL checkpoint (+ grae estimator state and a completion marker;
                           trl.save_total_limit, default 1)
    final/                 the trained model and its tokenizer (a VLM: its processor); files equal to the
                           last checkpoint's are hard links to them (grae.train.disk)
    eval/before.jsonl      held-out samples of the base model (resumable), eval/after.jsonl
    eval/before_exact.jsonl  the base's exact rows, for the format-only oracle (grae.train.oracle; a task with
                           a finite answer set)
    eval/summary.json      pass@k before and after
    report.md, *.png       the report

Every step is resumable: a rerun with ``resume=True`` continues training from the newest complete
checkpoint *of this run* and skips evaluation samples already on disk *of the same weights*. The
directory has one owner (``run.json``, :mod:`grae.train.rundir`); held-out rows are tied to what
they evaluated (:mod:`grae.eval.identity`): the base by the content hash of its weight files, the
trained model by ``<run id>@step<N>`` — an extended run re-evaluates.

On several processes (``accelerate launch … grae train``, ``torchrun``) the main process claims the
directory, picks the checkpoint, evaluates and reports; every process trains and agrees on when to
stop (:mod:`grae.train.ranks`).

Exit status of an interrupted run (SIGINT/SIGTERM: the current step finishes, a checkpoint is saved):
:data:`INTERRUPTED_EXIT` — never 0, so a pre-empted job never looks finished to a scheduler.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import platform
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from grae import presets
from grae.advantage import get_estimator, with_reward_correction
from grae.engines.divergence import DivergenceError
from grae.eval import evaluate
from grae.eval.backends import is_vision_language
from grae.eval.identity import model_identity, trained_identity
from grae.eval.progress_lines import plain_progress
from grae.eval.records import iter_rows
from grae.eval.runner import discard_rows, evaluate_exact, stale_reason
from grae.io import atomic_write_json
from grae.printing import line_printer
from grae.supervision import beacon
from grae.train.build import heldout_task
from grae.train.checkpoints import latest_complete_checkpoint
from grae.train.config import (
    ConfigError,
    TrainConfig,
    grpo_config,
    lora_config,
    resolve_rewards,
    reward_specs,
    to_dict,
)
from grae.train.context_check import context_problems, measure_context, unmeasured
from grae.train.disk import share_identical_files
from grae.train.errors import BaseWithoutSignal, TrainingWithoutSignal
from grae.train.exact_eval import exact_report, write_base_temperatures, write_parts
from grae.train.faults import DiskFullError, disk_full_is_resumable
from grae.train.model_defaults import fit_sizes
from grae.train.oracle import ORACLE_FILE, base_oracle
from grae.train.ranks import decided_by_main, is_main, wait_for_everyone
from grae.train.report import write_train_report
from grae.train.rundir import checkpoint_step, open_run, read_metrics
from grae.train.trl_recipe import model_load_kwargs, processor_load_kwargs

# transformers, trl and the grae modules that load them (grae.engines.trl, grae.engines.learning_signal,
# grae.train.callbacks) are imported inside the functions that use them, marked "heavy": grae compare imports this
# module in its own process (INTERRUPTED_EXIT, cpu_name, evaluate_heldout), which trains nothing itself

__all__ = ["INTERRUPTED_EXIT", "BaseWithoutSignal", "DiskFullError", "DivergenceError", "RunResult", "TrainRecipe",
           "TrainingWithoutSignal", "evaluate_heldout", "run_train"]

#: exit status after SIGINT / SIGTERM (the shell's 128 + signal number)
INTERRUPTED_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}


@dataclass
class RunResult:
    """What a run did: its directory, steps and training time, held-out pass@k before and after, its report."""

    output_dir: Path
    steps: int
    train_seconds: float
    before: dict[int, float] = field(default_factory=dict)
    after: dict[int, float] = field(default_factory=dict)
    report: Path | None = None
    #: the signal that stopped the run (a checkpoint was saved), None when it finished
    interrupted_by: int | None = None
    #: False on the other processes of a multi-process run (the main one evaluates and reports)
    main: bool = True
    #: bytes of final/ stored once, as hard links to the last checkpoint's identical files (grae.train.disk)
    shared_bytes: int = 0
    #: the exact held-out report's console lines (``eval.exact``: the sentence, then each stratum; [] otherwise)
    exact_lines: list[str] = field(default_factory=list)


def run_train(cfg: TrainConfig, *, resume: bool = False, overwrite: bool = False, console=None,
              progress: bool = True) -> RunResult:
    """Run the recipe on ``cfg`` (:class:`TrainRecipe`): claim ``cfg.output_dir``, evaluate the base, train,
    save ``final/``, evaluate the trained model and report. ``resume`` continues the run there; ``overwrite``
    clears a directory that holds another run; ``console`` gets the log lines (``print`` without one), and
    ``progress`` the progress bars.

    Returns the :class:`RunResult` of a finished run, of one stopped by SIGINT/SIGTERM (``interrupted_by``, a
    checkpoint saved) and, on the other processes of a multi-process run, ``main=False`` once ``final/`` is
    written. Raises :class:`ConfigError` for data, a model or prompts that cannot train (before the run directory
    is claimed; a refused claim too), :class:`BaseWithoutSignal` when the base has nothing to learn from (before
    step 1), :class:`TrainingWithoutSignal` after ``no_signal_steps`` steps in a row without signal (a checkpoint
    saved), :class:`DiskFullError` and :class:`DivergenceError` naming the checkpoint that is kept."""
    recipe = TrainRecipe(cfg, resume=resume, overwrite=overwrite, console=console, progress=progress)
    recipe.setup()
    recipe.evaluate("before")
    recipe.setup_trainer()
    stopped = recipe.train()
    if stopped is not None:
        return stopped
    if not recipe.main:
        return RunResult(recipe.out, recipe.steps, recipe.train_seconds, main=False)
    recipe.evaluate("after")
    return recipe.finish()


class TrainRecipe:
    """``grae train`` top to bottom: :meth:`setup` (data, model, run directory), :meth:`evaluate` ``"before"``,
    :meth:`setup_trainer`, :meth:`train`, :meth:`evaluate` ``"after"``, :meth:`finish` (:func:`run_train` runs them
    in this order). The trainer is built after the base's evaluation, whose pass@k its tracker callback logs."""

    def __init__(self, cfg: TrainConfig, *, resume: bool = False, overwrite: bool = False, console=None,
                 progress: bool = True):
        self.cfg, self.resume, self.overwrite, self.console, self.progress = cfg, resume, overwrite, console, progress
        self.out = Path(os.path.abspath(cfg.output_dir))  # every run path absolute: a reward that chdirs cannot move the run
        self.checkpoints = self.out / "checkpoints"
        self.before: dict[int, float] = {}
        self.after: dict[int, float] = {}
        self.base_note: str | None = None
        self.steps, self.train_seconds, self.shared = 0, 0.0, 0

    # -- setup: data, tokenizer, the run directory, the model ---------------------------------------------------------

    def setup(self) -> None:
        """Everything up to the loaded base model. What makes the run a config error — data with fewer distinct
        problems than asked, a preset whose package is missing, a prompt too long for the model's context — stops it
        (one line, exit 2) before the run directory is claimed; a refused claim writes nothing, on every process."""
        from transformers import AutoModelForCausalLM, AutoModelForImageTextToText  # heavy
        from transformers.utils import logging as hf_logging  # heavy

        hf_logging.disable_progress_bar()
        cfg = self.cfg
        # under accelerate/torchrun: the process group, with ddp_timeout
        self.args = grpo_config(cfg, output_dir=str(self.checkpoints))
        self.main = is_main(self.args)
        self._load_data()
        try:
            self.model_path = presets.resolve_model(cfg.model)
        except RuntimeError as err:
            raise ConfigError(f"model: {err}") from None
        self._load_processing()
        self._claim()
        torch.manual_seed(cfg.seed)
        self.dataset = self.task.to_hf_dataset(self.train_examples)
        # model: a causal LM with its tokenizer, or a vision-language model with its processor (TRL's processing_class)
        # with trl.model_init_kwargs (dtype, attn_implementation, revision) and trust_remote_code, as TRL loads a model id
        self.model = (AutoModelForImageTextToText if self.vision else AutoModelForCausalLM).from_pretrained(
            self.model_path, **self.load)
        # the files' hash, computed once
        self.base_identity = functools.cache(lambda: model_identity(cfg.model, self.model_path, self.model))

    def _load_data(self) -> None:
        """The task, its training examples and held-out problems, and the reward functions."""
        cfg = self.cfg
        self.task = cfg.task.build()  # load_config built it once: it builds
        # a hub dataset's sizes, now that it is loaded (a local file's were fitted before)
        self.fitted = fit_sizes(cfg, self.task)
        try:
            self.train_examples = self.task.train(cfg.task.train_size, seed=cfg.seed)
            self.heldout_task = heldout_task(cfg, self.task)  # with eval.heldout_params, the held-out problems' own
            self.heldout = self.heldout_task.heldout(cfg.eval.num_problems) if cfg.eval.enabled else []
        except (ValueError, RuntimeError) as err:  # RuntimeError: a hub dataset that cannot be read (grae.data.hub)
            raise ConfigError(f"task: {err.args[0] if err.args else err}") from None
        self.reward_funcs = resolve_rewards(cfg, self.task)

    def _load_processing(self) -> None:
        """The tokenizer (a VLM: its processor), before the claim: a prompt that does not fit in the model's context
        with its budget is a config error, as --dry-run says it."""
        from transformers import AutoConfig, AutoProcessor, AutoTokenizer  # heavy

        self.load, aux = model_load_kwargs(self.cfg.trl), processor_load_kwargs(self.cfg.trl)
        model_config = AutoConfig.from_pretrained(self.model_path, **aux)
        self.vision = is_vision_language(model_config)
        self.processing = (AutoProcessor if self.vision else AutoTokenizer).from_pretrained(self.model_path, **aux)
        too_long = _context_problem(self.cfg, self.task, self.train_examples, self.heldout, self.processing,
                                    model_config, self.args)
        if too_long:
            raise ConfigError(too_long)

    def _claim(self) -> None:
        """The main process claims the run directory and picks the checkpoint to resume from; every process gets
        its answer. The main one tells the supervisor and says the notes (sizes fitted to the data, the claim's)."""
        self.run_id, self.resume_from, notes = decided_by_main(self.args, lambda: open_run(
            self.out, to_dict(self.cfg), resume=self.resume, overwrite=self.overwrite))
        if self.main:
            beacon.run_directory(str(self.out), self.run_id)
            if self.resume_from:
                beacon.checkpoint_saved(self.resume_from)
        self.log = line_printer(self.console) if self.main else (lambda text: None)
        for note in [*self.fitted, *notes]:
            self.log(note)

    def _newest(self) -> str | None:
        """The newest complete checkpoint of this run (by sizes)."""
        return latest_complete_checkpoint(str(self.checkpoints), self.run_id)

    def _newest_verified(self) -> str | None:
        """What a divergence names as kept: the newest complete checkpoint, its content and finiteness read."""
        return latest_complete_checkpoint(str(self.checkpoints), self.run_id, content=True)

    # -- held-out evaluation ----------------------------------------------------------------------------------------

    def evaluate(self, which: str) -> dict[int, float]:
        """Held-out pass@k of the base (``"before"``, with the check that it has a learning signal and its
        format-only oracle) or of the trained model (``"after"``, also logged to the trackers)."""
        if which == "before":
            self._evaluate_base()
            return self.before
        if which == "after":
            self.after = self._heldout("after", self.trainer.model, lambda: trained_identity(self.run_id, self.steps))
            self.tracker.log_heldout(self.args, "after", self.after, step=self.steps)
            return self.after
        raise ValueError(f"which: 'before' or 'after', not {which!r}")

    def _evaluate_base(self) -> None:
        """The base's pass@k on the main process, then (every process) whether it has a learning signal — a base
        without one stops the run before step 1 unless ``continue_without_signal`` (a resumed run has trained
        already) — then its format-only oracle."""
        self.before = self._heldout("before", self.model, self.base_identity)
        wait_for_everyone(self.args)
        self.base_note = decided_by_main(self.args, lambda: base_without_signal(
            self.cfg, self.out / "eval" / "before.jsonl", self.heldout, self.processing, self.args.num_generations)
            if self.before else None)
        if self.base_note and not self.cfg.continue_without_signal and not self.resume_from:
            raise BaseWithoutSignal(self.base_note)
        if self.base_note:
            self.log(f"warning: {self.base_note} (training anyway: continue_without_signal)")
        if self.before and self.main:  # the base's format-only oracle, from its exact rows: computed once, before training
            exact_path = self.out / "eval" / ORACLE_FILE
            with disk_full_is_resumable(f"writing the base's exact rows into {exact_path}", exact_path, self._newest), \
                    _progress_bar(self._bar_console(), "held-out base, exact") as bar:
                base_oracle(self.cfg, self.model, self.processing, self.heldout, self.heldout_task, self.out, self.log,
                            self.base_identity, progress=bar)
        wait_for_everyone(self.args)

    def _heldout(self, which: str, weights, identity) -> dict[int, float]:
        """Held-out pass@k of ``weights`` into ``eval/<which>.jsonl`` on the main process (the others wait); {} with
        evaluation off."""
        if not (self.cfg.eval.enabled and self.main):
            return {}
        path = self.out / "eval" / f"{which}.jsonl"
        with disk_full_is_resumable(f"writing held-out samples into {path}", path, self._newest), \
                _progress_bar(self._bar_console(), f"held-out {which}") as bar:
            curve = evaluate_heldout(self.cfg, weights, self.processing, self.heldout, self.heldout_task, path,
                                     self.log, identity=identity(), progress=bar, exact=self.cfg.eval.exact)
        if self.cfg.eval.exact:
            self._exact_extras(which, weights, identity())
        return curve

    def _exact_extras(self, which: str, weights, identity: str) -> None:
        """Beside exact rows (:mod:`grae.train.exact_eval`): the base's temperature frontier (before training) and
        each strategy's mass (before and after)."""
        path = self.out / "eval"
        with disk_full_is_resumable(f"writing the exact evaluation's records into {path}", path, self._newest):
            if which == "before":
                write_base_temperatures(self.cfg, weights, self.processing, self.heldout, self.heldout_task, self.out,
                                        identity, self.log)
            write_parts(which, self.cfg, weights, self.processing, self.heldout, self.heldout_task, self.out, identity)

    def _bar_console(self):
        """Where progress bars draw: the console, None with ``progress`` off."""
        return self.console if self.progress else None

    # -- the trainer ------------------------------------------------------------------------------------------------

    def setup_trainer(self) -> None:
        """The estimator, the callbacks and the :class:`GraeTrainer` over the loaded model."""
        from transformers import PrinterCallback  # heavy

        from grae.engines.trl import GraeTrainer  # heavy

        cfg = self.cfg
        estimator = self._estimator()
        self.resume_step = checkpoint_step(self.resume_from) if self.resume else None
        callbacks = self._callbacks()
        self.trainer = GraeTrainer(
            model=self.model,
            processing_class=self.processing,
            reward_funcs=self.reward_funcs,
            args=self.args,
            train_dataset=self.dataset,
            callbacks=callbacks,
            estimator=estimator,
            loss_agg_mode=cfg.loss_agg_mode,
            dual_clip=cfg.dual_clip,
            cov_loss=cfg.cov_loss,
            sampling=cfg.sampling,
            rollouts=cfg.rollouts,
            reward_timeout=cfg.reward_timeout,
            missing_reward_steps=cfg.missing_reward_steps,
            peft_config=lora_config(cfg.peft) if cfg.peft is not None else None,
        )
        self.trainer.grae_run_id = self.run_id
        for watcher in self.watchers:
            watcher.trainer = self.trainer
        if self.progress:
            self.trainer.remove_callback(PrinterCallback)  # the rich bar shows the same numbers

    def _estimator(self):
        """``cfg.estimator`` with TRL's ``scale_rewards`` as its scale (as GraeTrainer maps it for a named
        estimator: the object is built here, so the mapping is made here), and the reward correction."""
        from grae.engines.trl import scale_from_trl  # heavy

        cfg = self.cfg
        estimator = get_estimator(cfg.estimator, **cfg.estimator_params)
        scale = scale_from_trl(dict(estimator.params), cfg.estimator_params, self.args.scale_rewards,
                               self.args.multi_objective_aggregation)
        if scale:
            estimator = get_estimator(cfg.estimator, **{**cfg.estimator_params, **scale})
        if cfg.reward_correction:
            estimator = with_reward_correction(estimator, **cfg.reward_correction)
        return estimator

    def _callbacks(self) -> list:
        """The run's callbacks: metrics.jsonl, the graceful interrupt, the no-signal watch, snapshots, and the
        watchers (:attr:`watchers`: callbacks that read the trainer — its sampling state, its trackers)."""
        from grae.engines.learning_signal import NoSignalWatch  # heavy
        from grae.train.callbacks import (  # heavy
            GracefulInterrupt,
            MetricsJsonl,
            ModelOnlyResume,
            RichProgress,
            Snapshots,
            is_model_only,
        )

        cfg, out, main = self.cfg, self.out, self.main
        self.interrupt = GracefulInterrupt()
        # no_signal_steps steps in a row without signal stop the run after the last (a checkpoint of it is saved)
        self.watch = NoSignalWatch(self.log, cfg.no_signal_steps, stop=not cfg.continue_without_signal)
        callbacks = [MetricsJsonl(out / "metrics.jsonl", resume_step=self.resume_step, owner=main,
                                  checkpoint=self.resume_from, log=self.log), self.interrupt, self.watch]
        if self.resume_from and self.args.save_only_model and is_model_only(self.resume_from):
            callbacks.append(ModelOnlyResume(self.log))
        if cfg.keep_steps:
            callbacks.append(Snapshots(out, cfg.keep_steps, self.processing, owner=main))
        self.watchers = self._watchers()
        callbacks += self.watchers
        if self.progress:
            callbacks.append(RichProgress(self.console))
        return callbacks

    def _watchers(self) -> list:
        """Callbacks that read the trainer: the tracker run config (:attr:`tracker`), groups.jsonl, the completion
        budget."""
        from grae.train.callbacks import CompletionBudget, GroupsJsonl, TrackerRunConfig  # heavy

        cfg = self.cfg
        self.tracker = TrackerRunConfig({"estimator": cfg.estimator, "estimator_params": cfg.estimator_params,
                                         "loss_agg_mode": cfg.loss_agg_mode, "task": to_dict(cfg)["task"],
                                         "sampling": to_dict(cfg)["sampling"], "model": cfg.model}, self.before)
        watchers = [self.tracker]
        if cfg.sampling.log_groups:
            watchers.append(GroupsJsonl(self.out / "groups.jsonl", resume_step=self.resume_step, owner=self.main))
        if cfg.sampling.budget_completions is not None:
            watchers.append(CompletionBudget(cfg.sampling.budget_completions))
        return watchers

    # -- training ---------------------------------------------------------------------------------------------------

    def train(self) -> RunResult | None:
        """Train (or resume) to ``max_steps``, save a checkpoint of the final state, then ``final/``. Returns the
        :class:`RunResult` of a run stopped by SIGINT/SIGTERM (a checkpoint saved), else None; raises
        :class:`TrainingWithoutSignal` when the no-signal watch stopped it."""
        if self.resume_from:
            self.log(f"resuming from {self.resume_from}")
        t0 = time.perf_counter()
        with disk_full_is_resumable(f"checkpointing into {self.checkpoints}", self.checkpoints, self._newest), \
                _stops_diverged(self._newest_verified, self._newest):
            self._fit()
            self.steps = self.trainer.state.global_step
            final = os.path.join(str(self.checkpoints), f"checkpoint-{self.steps}")
            if decided_by_main(self.args, lambda: self._newest() != final):
                self.trainer._save_checkpoint(self.trainer.model, trial=None)  # the final state is always resumable
            stopped_by = self.interrupt.after_training(self.args)
        # a resumed run also counts the logged step times of the steps an earlier process trained
        self.train_seconds = time.perf_counter() - t0 + _seconds_before(self.out / "metrics.jsonl", self.resume_step)
        if stopped_by:
            self.log(f"interrupted at step {self.steps}: checkpoint saved; continue with --resume")
            wait_for_everyone(self.args)  # no rank leaves (and has the launcher stop the others) before this is said
            return RunResult(self.out, self.steps, self.train_seconds, self.before, interrupted_by=stopped_by,
                             main=self.main)
        if self.watch.stopped:
            wait_for_everyone(self.args)
            raise TrainingWithoutSignal(self.watch.stopped, self.steps, self._newest())
        self._write_final()
        return None

    def _fit(self) -> None:
        """``trainer.train``, or, for a run trained to the end before (stopped in evaluation, or pre-empted after the
        last step), its checkpoint's state: transformers' train() would take one more step before it checks
        max_steps or the budget."""
        step, checkpoint = self.resume_step, self.resume_from
        if step is not None and (step >= self.cfg.max_steps or _budget_spent(self.cfg, checkpoint)):
            self.trainer._load_from_checkpoint(checkpoint)
            self.trainer._load_sampling_state(checkpoint)
            self.trainer.state.global_step = step
        else:
            self.trainer.train(resume_from_checkpoint=checkpoint)

    def _write_final(self) -> None:
        """``final/``, its weights checked finite; on the main process, its files equal to the last checkpoint's
        stored once (hard links)."""
        with disk_full_is_resumable(f"saving the final model into {self.out / 'final'}", self.out, self._newest), \
                _stops_diverged(self._newest_verified, self._newest):
            self.trainer.grae_check_weights()  # final/ never holds non-finite weights
            _save_final(self.trainer, self.processing, self.out / "final", self.args)
        if self.main:
            last = self._newest()
            self.shared = share_identical_files(self.out / "final", Path(last)) if last else 0  # the same weights stored once

    # -- the end ----------------------------------------------------------------------------------------------------

    def finish(self) -> RunResult:
        """``eval/summary.json`` (pass@k before and after, steps, time, device, load, completions, estimator; with
        ``eval.exact`` the exact report's sentence and Δ_F per stratum), the report (``cfg.report``) and the
        :class:`RunResult`."""
        exact = exact_report(self.out, self.cfg, self.heldout_task, self.heldout) if self.cfg.eval.exact else None
        summary = {"before": self.before, "after": self.after, "steps": self.steps, "train_seconds": self.train_seconds,
                   "device": device_label(self.trainer.args), "load": load_label(),
                   "generated_completions": self.trainer.grae_generated_completions,
                   "estimator": self.cfg.estimator, "estimator_params": self.cfg.estimator_params,
                   **({"exact": exact.summary()} if exact else {})}
        atomic_write_json(self.out / "eval" / "summary.json",
                          {k: ({str(kk): vv for kk, vv in v.items()} if isinstance(v, dict) and k != "exact" else v)
                           for k, v in summary.items()})
        report = None
        if self.cfg.report:
            report = write_train_report(self.out, self.cfg, self.before, self.after, steps=self.steps,
                                        train_seconds=self.train_seconds, base_note=self.base_note, exact=exact)
        return RunResult(self.out, self.steps, self.train_seconds, self.before, self.after, report,
                         shared_bytes=self.shared, exact_lines=exact.lines if exact else [])


def _context_problem(cfg: TrainConfig, task, train_examples: list[dict], heldout: list[dict], processing,
                     model_config, args) -> str | None:
    """The line a run stops on before the claim when a training prompt with ``trl.max_completion_length`` (a
    held-out one with ``eval.max_tokens``) does not fit in the model's context (:mod:`grae.train.context_check`),
    else None; prompts that cannot be measured here are left to the other checks."""
    if unmeasured([*train_examples, *heldout], processing, model_config):
        return None
    fit = measure_context(task, train_examples, heldout, processing, model_config, args.max_completion_length,
                          cfg.eval.max_tokens if cfg.eval.enabled else None, args.chat_template_kwargs)
    return "; ".join(context_problems(fit)) or None


def base_without_signal(cfg: TrainConfig, path: Path, heldout: list[dict], processing,
                        group_size: int | None = None) -> str | None:
    """The diagnosis of a base model without learning signal (:func:`grae.engines.learning_signal.base_diagnosis`)
    from its held-out rows in ``path``, or None. A completion counts as cut when it re-encodes to at least
    ``eval.max_tokens`` tokens (re-encoding merges tokens at most, so a cut is never overcounted) and as unreadable
    when the verifier reads no answer in it; each problem's success rate is read from its rows, for the groups of
    ``group_size`` (the training's ``num_generations``); exact rows (``eval.exact``) give each problem's p
    (:func:`~grae.engines.learning_signal.exact_base_diagnosis`). Only where the task's verifier is a reward
    (``reward_funcs``)."""
    from grae.engines.learning_signal import base_diagnosis, exact_base_diagnosis  # heavy

    if "task" not in reward_specs(cfg):
        return None
    ids = {str(example["question_id"]) for example in heldout}
    if cfg.eval.exact:  # each problem's p, not samples
        rates = [float(row["p"]) for row in iter_rows(path) if str(row.get("question_id")) in ids and row.get("exact")]
        return exact_base_diagnosis(rates, group_size or 8)
    rows = [row for row in iter_rows(path) if str(row.get("question_id")) in ids
            and isinstance(row.get("generation_id"), int) and row["generation_id"] < cfg.eval.n]
    tokenizer = getattr(processing, "tokenizer", processing)
    lengths = [len(tokenizer(str(row.get("response") or ""), add_special_tokens=False)["input_ids"]) for row in rows]
    return base_diagnosis([bool(row.get("label")) for row in rows], [n >= cfg.eval.max_tokens for n in lengths],
                          [row.get("pred_answer") is not None for row in rows], cfg.eval.max_tokens,
                          problems=[str(row["question_id"]) for row in rows], group_size=group_size)


def _seconds_before(metrics: Path, resume_step: int | None) -> float:
    """Summed ``step_time`` of the logged steps up to ``resume_step`` (0 for a fresh run)."""
    if not resume_step:
        return 0.0
    return float(sum(row.get("step_time") or 0.0 for row in read_metrics(metrics) if int(row["step"]) <= resume_step))


def device_label(args) -> str:
    """What trained, for a run's summary: ``"cuda (NVIDIA H100 80GB HBM3)"``, ``"cpu (AMD EPYC 7B13, 2
    threads)"``, with ``" × N processes"`` when several trained together."""
    device = torch.device(args.device)
    if device.type == "cuda":
        label = f"cuda ({torch.cuda.get_device_name(device)})"
    elif device.type == "cpu":
        threads = torch.get_num_threads()
        label = f"cpu ({cpu_name()}, {threads} thread{'s' if threads != 1 else ''})"
    else:
        label = device.type
    return label + (f" × {args.world_size} processes" if args.world_size > 1 else "")


def load_label() -> str | None:
    """The machine's load as a run's wall time ran under: ``load 5.2 on 2 CPUs`` (the 15-minute load average at
    its end, which spans a short run and the end of a long one); None where the platform has no load average."""
    try:
        load = os.getloadavg()[2]
    except (AttributeError, OSError):
        return None
    cpus = os.cpu_count() or 1
    return f"load {load:.1f} on {cpus} CPU{'s' if cpus != 1 else ''}"


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``; the platform's processor string elsewhere)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown CPU"


@contextlib.contextmanager
def _stops_diverged(newest, saved):
    """A :class:`DivergenceError` in the block names what is kept: the newest checkpoint whose files are what was
    saved and whose weights are finite (``newest``: a non-finite one is never written, and one changed on disk
    since is passed over; ``saved``: the newest by sizes alone) and no ``final/``."""
    try:
        yield
    except DivergenceError as err:
        kept = newest()
        where = (f"the last finite checkpoint is {kept}" if kept else "no checkpoint was saved before it" if not saved()
                 else "no checkpoint of this run on disk holds its saved content with finite weights")
        raise DivergenceError(err.step, err.what, err.cause,
                              note=f"{where}, no final/ written; start anew once it is fixed (another --output-dir, "
                                   "or --overwrite)") from None


def _budget_spent(cfg: TrainConfig, checkpoint: str | None) -> bool:
    """The checkpoint had generated ``sampling.budget_completions`` already (the run is trained)."""
    from grae.engines.trl.checkpoint import SAMPLING_STATE_FILE  # heavy

    budget = cfg.sampling.budget_completions
    path = Path(checkpoint or "") / SAMPLING_STATE_FILE
    if budget is None or not checkpoint or not path.exists():
        return False
    return json.loads(path.read_text()).get("generated_completions", 0) >= budget


def evaluate_heldout(cfg: TrainConfig, model, processing, heldout, task, path: Path, log, *,
                     identity: str | None = None, progress=None, exact: bool = False) -> dict[int, float]:
    """Held-out pass@k of ``model`` (named by ``identity``) with ``cfg.eval``'s settings, resumable into
    ``path``. Rows there from other weights or settings (an extended run's old step) are replaced.

    ``exact``: exact pass@k by answer enumeration or a one-gold task's teacher-forced gold completion
    (:func:`grae.eval.runner.evaluate_exact`, the code path of ``grae eval --exact``) instead of
    ``cfg.eval.n`` samples; ``n`` is then the largest k reported."""
    e = cfg.eval
    settings = {"identity": identity, "temperature": e.temperature, "top_p": e.top_p, "max_tokens": e.max_tokens,
                "seed": e.seed, **({"exact": True} if exact else {})} if identity else {}
    reason = stale_reason(path, settings)
    if reason:
        log(f"{path.name}: rows of other weights or settings ({reason}); evaluating anew")
        discard_rows(path)
    if exact:
        result = evaluate_exact(model, processing, heldout, task, k_max=e.n, output_path=path, seed=e.seed,
                                progress=progress, settings={**settings, "backend": "hf", "temperature": e.temperature,
                                                             "top_p": e.top_p, "max_tokens": e.max_tokens})
    else:
        result = evaluate(model, processing, heldout, task, n=e.n, temperature=e.temperature, top_p=e.top_p,
                          max_tokens=e.max_tokens, batch_size=e.batch_size, seed=e.seed, output_path=path,
                          identity=identity, progress=progress)
    log(f"{path.stem}: {'exact ' if exact else ''}" + "  ".join(f"pass@{k}={v:.3f}" for k, v in result.curve.items())
        + f"  ({result.seconds:.0f}s)")
    return dict(result.curve)


#: seconds between the plain progress lines of a held-out evaluation whose output is not a terminal
PLAIN_PROGRESS_EVERY_S = 30.0


@contextlib.contextmanager
def _progress_bar(console, label: str):
    """``progress(done, total)`` drawing the bar ``grae eval`` draws at a terminal; into a pipe or a log file, a
    plain line every :data:`PLAIN_PROGRESS_EVERY_S` seconds and at the end (no bar frame); None without a console."""
    if console is None:
        yield None
        return
    if not console.is_terminal:
        state: dict = {}

        def update(done: int, total: int) -> None:  # the total is known at the first call
            if "lines" not in state:
                state["lines"] = plain_progress(label, total, line_printer(console), every_s=PLAIN_PROGRESS_EVERY_S)
            state["lines"](done, total)

        def decoding(tokens: int, max_tokens: int, sequences: int) -> None:
            if "lines" in state:
                state["lines"].decoding(tokens, max_tokens, sequences)

        update.decoding = decoding  # type: ignore[attr-defined]
        yield update
        return
    with Progress(TextColumn(label, markup=False), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                  console=console, transient=True) as bar:
        job = bar.add_task(label, total=None)
        yield lambda done, total: bar.update(job, completed=done, total=total)


def _save_final(trainer, processing, target: Path, args) -> None:
    """``final/``, whole or not at all: written to ``final.partial`` and renamed. Every process takes
    part in ``save_model`` (ZeRO-3 gathers the weights); the main one writes and renames."""
    staging = target.with_name(target.name + ".partial")
    if is_main(args):
        shutil.rmtree(staging, ignore_errors=True)
    wait_for_everyone(args)
    trainer.save_model(str(staging))
    if is_main(args):
        processing.save_pretrained(str(staging))
        shutil.rmtree(target, ignore_errors=True)
        os.replace(staging, target)
    wait_for_everyone(args)
