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
import os
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from grae.engines.divergence import DivergenceError
from grae.eval.identity import model_identity, trained_identity
from grae.supervision import beacon
from grae.train.config import ConfigError, TrainConfig, grpo_config, lora_config, resolve_rewards, to_dict
from grae.train.errors import BaseWithoutSignal, TrainingWithoutSignal
from grae.train.faults import DiskFullError, disk_full_is_resumable
from grae.train.model_defaults import fit_sizes
from grae.train.ranks import decided_by_main, is_main, wait_for_everyone
from grae.train.rundir import checkpoint_step, open_run
from grae.train.trl_recipe import model_load_kwargs, processor_load_kwargs

__all__ = ["INTERRUPTED_EXIT", "BaseWithoutSignal", "DiskFullError", "DivergenceError", "RunResult",
           "TrainingWithoutSignal", "evaluate_heldout", "run_train"]

#: exit status after SIGINT / SIGTERM (the shell's 128 + signal number)
INTERRUPTED_EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}


@dataclass
class RunResult:
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


def run_train(cfg: TrainConfig, *, resume: bool = False, overwrite: bool = False, console=None,
              progress: bool = True) -> RunResult:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForImageTextToText, AutoProcessor, AutoTokenizer
    from transformers.utils import logging as hf_logging

    from grae.eval.backends import is_vision_language

    hf_logging.disable_progress_bar()

    from grae.advantage import get_estimator, with_reward_correction
    from grae.engines.learning_signal import NoSignalWatch
    from grae.engines.trl import GraeTrainer, scale_from_trl
    from grae.presets import resolve_model
    from grae.train.callbacks import (
        CompletionBudget,
        GracefulInterrupt,
        GroupsJsonl,
        MetricsJsonl,
        ModelOnlyResume,
        RichProgress,
        Snapshots,
        TrackerRunConfig,
        is_model_only,
    )
    from grae.train.checkpoints import latest_complete_checkpoint

    out = Path(os.path.abspath(cfg.output_dir))  # every run path absolute: a reward that chdirs cannot move the run
    checkpoints = out / "checkpoints"
    args = grpo_config(cfg, output_dir=str(checkpoints))  # under accelerate/torchrun: the process group, with ddp_timeout
    main = is_main(args)
    # one process claims the directory and picks the checkpoint; a refusal writes nothing, on every process
    # data and the model's files first: a task that has fewer distinct problems than asked, or a preset
    # whose package is missing, is a config error (one line, exit 2) before the run directory is claimed
    task = cfg.task.build()  # load_config built it once: it builds
    fitted = fit_sizes(cfg, task)  # a hub dataset's sizes, now that it is loaded (a local file's were fitted before)
    try:
        train_examples = task.train(cfg.task.train_size, seed=cfg.seed)
        heldout = task.heldout(cfg.eval.num_problems) if cfg.eval.enabled else []
    except (ValueError, RuntimeError) as err:  # RuntimeError: a hub dataset that cannot be read (grae.data.hub)
        raise ConfigError(f"task: {err.args[0] if err.args else err}") from None
    reward_funcs = resolve_rewards(cfg, task)
    try:
        model_path = resolve_model(cfg.model)
    except RuntimeError as err:
        raise ConfigError(f"model: {err}") from None
    # the tokenizer (a VLM: its processor) before the claim too: a prompt that does not fit in the model's
    # context with its budget is a config error, as --dry-run says it
    load, aux = model_load_kwargs(cfg.trl), processor_load_kwargs(cfg.trl)
    model_config = AutoConfig.from_pretrained(model_path, **aux)
    vision = is_vision_language(model_config)
    processing = (AutoProcessor if vision else AutoTokenizer).from_pretrained(model_path, **aux)
    too_long = _context_problem(cfg, task, train_examples, heldout, processing, model_config, args)
    if too_long:
        raise ConfigError(too_long)
    run_id, resume_from, notes = decided_by_main(args, lambda: open_run(out, to_dict(cfg), resume=resume,
                                                                        overwrite=overwrite))
    if main:
        beacon.run_directory(str(out), run_id)
        if resume_from:
            beacon.checkpoint_saved(resume_from)
    log = _logger(console) if main else (lambda message: None)
    for note in [*fitted, *notes]:
        log(note)
    torch.manual_seed(cfg.seed)
    dataset = task.to_hf_dataset(train_examples)

    # model: a causal LM with its tokenizer, or a vision-language model with its processor (TRL's processing_class)
    # with trl.model_init_kwargs (dtype, attn_implementation, revision) and trust_remote_code, as TRL loads a model id
    model = (AutoModelForImageTextToText if vision else AutoModelForCausalLM).from_pretrained(model_path, **load)

    def newest() -> str | None:
        return latest_complete_checkpoint(str(checkpoints), run_id)

    def newest_verified() -> str | None:  # what a divergence names as kept: its content and finiteness read
        return latest_complete_checkpoint(str(checkpoints), run_id, content=True)

    def heldout_pass_at_k(which: str, weights, identity) -> dict[int, float]:
        """Held-out pass@k on the main process (the others wait); {} with evaluation off."""
        if not (cfg.eval.enabled and main):
            return {}
        path = out / "eval" / f"{which}.jsonl"
        with disk_full_is_resumable(f"writing held-out samples into {path}", path, newest), \
                _progress_bar(console if progress else None, f"held-out {which}") as bar:
            return evaluate_heldout(cfg, weights, processing, heldout, task, path, log, identity=identity(), progress=bar)

    base_identity = functools.cache(lambda: model_identity(cfg.model, model_path, model))  # the files' hash, once
    before = heldout_pass_at_k("before", model, base_identity)
    wait_for_everyone(args)
    base_note = decided_by_main(args, lambda: base_without_signal(cfg, out / "eval" / "before.jsonl", heldout,
                                                                  processing, args.num_generations) if before else None)
    if base_note and not cfg.continue_without_signal and not resume_from:  # a resumed run has trained already
        raise BaseWithoutSignal(base_note)
    if base_note:
        log(f"warning: {base_note} (training anyway: continue_without_signal)")
    if before and main:  # the base's format-only oracle, from its exact rows: computed once, before training
        from grae.train.oracle import ORACLE_FILE, base_oracle

        exact_path = out / "eval" / ORACLE_FILE
        with disk_full_is_resumable(f"writing the base's exact rows into {exact_path}", exact_path, newest), \
                _progress_bar(console if progress else None, "held-out base, exact") as bar:
            base_oracle(cfg, model, processing, heldout, task, out, log, base_identity, progress=bar)
    wait_for_everyone(args)

    estimator = get_estimator(cfg.estimator, **cfg.estimator_params)
    # TRL's scale_rewards is the estimator's scale (as GraeTrainer maps it for a named estimator): the object
    # is built here, so the mapping is made here
    scale = scale_from_trl(dict(estimator.params), cfg.estimator_params, args.scale_rewards,
                           args.multi_objective_aggregation)
    if scale:
        estimator = get_estimator(cfg.estimator, **{**cfg.estimator_params, **scale})
    if cfg.reward_correction:
        estimator = with_reward_correction(estimator, **cfg.reward_correction)
    resume_step = checkpoint_step(resume_from) if resume else None
    interrupt = GracefulInterrupt()
    # no_signal_steps steps in a row without signal stop the run after the last (a checkpoint of it is saved)
    watch = NoSignalWatch(log, cfg.no_signal_steps, stop=not cfg.continue_without_signal)
    tracker = TrackerRunConfig({"estimator": cfg.estimator, "estimator_params": cfg.estimator_params,
                                "loss_agg_mode": cfg.loss_agg_mode, "task": to_dict(cfg)["task"],
                                "sampling": to_dict(cfg)["sampling"], "model": cfg.model}, before)
    callbacks = [MetricsJsonl(out / "metrics.jsonl", resume_step=resume_step, owner=main, checkpoint=resume_from, log=log),
                 interrupt, watch]
    if resume_from and args.save_only_model and is_model_only(resume_from):
        callbacks.append(ModelOnlyResume(log))
    if cfg.keep_steps:
        callbacks.append(Snapshots(out, cfg.keep_steps, processing, owner=main))
    watchers = [tracker]  # callbacks that read the trainer (its sampling state, its trackers)
    if cfg.sampling.log_groups:
        watchers.append(GroupsJsonl(out / "groups.jsonl", resume_step=resume_step, owner=main))
    if cfg.sampling.budget_completions is not None:
        watchers.append(CompletionBudget(cfg.sampling.budget_completions))
    callbacks += watchers
    if progress:
        callbacks.append(RichProgress(console))
    trainer = GraeTrainer(
        model=model,
        processing_class=processing,
        reward_funcs=reward_funcs,
        args=args,
        train_dataset=dataset,
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
    trainer.grae_run_id = run_id
    for watcher in watchers:
        watcher.trainer = trainer
    if progress:
        from transformers import PrinterCallback

        trainer.remove_callback(PrinterCallback)  # the rich bar shows the same numbers
    if resume_from:
        log(f"resuming from {resume_from}")
    t0 = time.perf_counter()
    with disk_full_is_resumable(f"checkpointing into {checkpoints}", checkpoints, newest), \
            _stops_diverged(newest_verified, newest):
        if resume_step is not None and (resume_step >= cfg.max_steps or _budget_spent(cfg, resume_from)):
            # trained to the end before (stopped in evaluation, or pre-empted after the last step):
            # transformers' train() would take one more step before it checks max_steps or the budget
            trainer._load_from_checkpoint(resume_from)
            trainer._load_sampling_state(resume_from)
            trainer.state.global_step = resume_step
        else:
            trainer.train(resume_from_checkpoint=resume_from)
        steps = trainer.state.global_step
        final = os.path.join(str(checkpoints), f"checkpoint-{steps}")
        if decided_by_main(args, lambda: newest() != final):
            trainer._save_checkpoint(trainer.model, trial=None)  # the final state is always resumable
        stopped_by = interrupt.after_training(args)
    # a resumed run also counts the logged step times of the steps an earlier process trained
    train_seconds = time.perf_counter() - t0 + _seconds_before(out / "metrics.jsonl", resume_step)
    if stopped_by:
        log(f"interrupted at step {steps}: checkpoint saved; continue with --resume")
        wait_for_everyone(args)  # no rank leaves (and has the launcher stop the others) before this is said
        return RunResult(out, steps, train_seconds, before, interrupted_by=stopped_by, main=main)
    if watch.stopped:
        wait_for_everyone(args)
        raise TrainingWithoutSignal(watch.stopped, steps, newest())
    with disk_full_is_resumable(f"saving the final model into {out / 'final'}", out, newest), \
            _stops_diverged(newest_verified, newest):
        trainer.grae_check_weights()  # final/ never holds non-finite weights
        _save_final(trainer, processing, out / "final", args)
    if not main:
        return RunResult(out, steps, train_seconds, main=False)
    from grae.train.disk import share_identical_files

    last = newest()
    shared = share_identical_files(out / "final", Path(last)) if last else 0  # the same weights stored once

    after = heldout_pass_at_k("after", trainer.model, lambda: trained_identity(run_id, steps))
    tracker.log_heldout(args, "after", after, step=steps)
    from grae.io import atomic_write_json

    summary = {"before": before, "after": after, "steps": steps, "train_seconds": train_seconds,
               "device": device_label(trainer.args), "load": load_label(),
               "generated_completions": trainer.grae_generated_completions,
               "estimator": cfg.estimator, "estimator_params": cfg.estimator_params}
    atomic_write_json(out / "eval" / "summary.json", {k: ({str(kk): vv for kk, vv in v.items()} if isinstance(v, dict) else v)
                                                      for k, v in summary.items()})
    report = None
    if cfg.report:
        from grae.train.report import write_train_report

        report = write_train_report(out, cfg, before, after, steps=steps, train_seconds=train_seconds,
                                    base_note=base_note)
    return RunResult(out, steps, train_seconds, before, after, report, shared_bytes=shared)


def _context_problem(cfg: TrainConfig, task, train_examples: list[dict], heldout: list[dict], processing,
                     model_config, args) -> str | None:
    """The line a run stops on before the claim when a training prompt with ``trl.max_completion_length`` (a
    held-out one with ``eval.max_tokens``) does not fit in the model's context (:mod:`grae.train.context_check`),
    else None; prompts that cannot be measured here are left to the other checks."""
    from grae.train.context_check import context_problems, measure_context, unmeasured

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
    ``group_size`` (the training's ``num_generations``). Only where the task's verifier is a reward
    (``reward_funcs``)."""
    from grae.engines.learning_signal import base_diagnosis
    from grae.eval.records import iter_rows
    from grae.train.config import reward_specs

    if "task" not in reward_specs(cfg):
        return None
    ids = {str(example["question_id"]) for example in heldout}
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
    from grae.train.rundir import read_metrics

    return float(sum(row.get("step_time") or 0.0 for row in read_metrics(metrics) if int(row["step"]) <= resume_step))


def device_label(args) -> str:
    """What trained, for a run's summary: ``"cuda (NVIDIA H100 80GB HBM3)"``, ``"cpu (AMD EPYC 7B13, 2
    threads)"``, with ``" × N processes"`` when several trained together."""
    import torch

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
    import platform

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
    import json

    from grae.engines.trl.checkpoint import SAMPLING_STATE_FILE

    budget = cfg.sampling.budget_completions
    path = Path(checkpoint or "") / SAMPLING_STATE_FILE
    if budget is None or not checkpoint or not path.exists():
        return False
    return json.loads(path.read_text()).get("generated_completions", 0) >= budget


def _logger(console):
    """Lines printed literally (paths may hold ``[x]`` or ``:100:``)."""
    if console is None:
        return print
    return lambda message: console.print(message, markup=False, emoji=False, highlight=False, soft_wrap=True)


def evaluate_heldout(cfg: TrainConfig, model, processing, heldout, task, path: Path, log, *,
                     identity: str | None = None, progress=None, exact: bool = False) -> dict[int, float]:
    """Held-out pass@k of ``model`` (named by ``identity``) with ``cfg.eval``'s settings, resumable into
    ``path``. Rows there from other weights or settings (an extended run's old step) are replaced.

    ``exact``: exact pass@k by answer enumeration or a one-gold task's teacher-forced gold completion
    (:func:`grae.eval.runner.evaluate_exact`, the code path of ``grae eval --exact``) instead of
    ``cfg.eval.n`` samples; ``n`` is then the largest k reported."""
    from grae.eval import evaluate
    from grae.eval.runner import discard_rows, evaluate_exact, stale_reason

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
        from grae.eval.progress_lines import plain_progress

        state: dict = {}

        def update(done: int, total: int) -> None:  # the total is known at the first call
            if "lines" not in state:
                state["lines"] = plain_progress(label, total, lambda line: console.print(
                    line, markup=False, highlight=False, soft_wrap=True), every_s=PLAIN_PROGRESS_EVERY_S)
            state["lines"](done, total)

        def decoding(tokens: int, max_tokens: int, sequences: int) -> None:
            if "lines" in state:
                state["lines"].decoding(tokens, max_tokens, sequences)

        update.decoding = decoding  # type: ignore[attr-defined]
        yield update
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

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
