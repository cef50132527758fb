"""The ``grae train`` recipe: evaluate → train with GraeTrainer → evaluate → report.

Run directory layout (``output_dir``)::

    config.yaml            the resolved configuration
    metrics.jsonl          one object per logged step (step, reward_mean, omega, acr, entropy, …)
    checkpoints/           TRL checkpoints (+ grae estimator state and a completion marker)
    final/                 the trained model and tokenizer
    eval/before.jsonl      held-out samples of the base model (resumable), eval/after.jsonl
    eval/summary.json      pass@k before and after
    report.md, *.png       the report

Every step is resumable: a rerun with ``resume=True`` continues training from the newest complete
checkpoint *of this run* and skips evaluation samples already on disk *of the same weights*. The
directory has one owner (``run.json``, :mod:`grae.train.rundir`); held-out rows are tied to what
they evaluated (:mod:`grae.eval.identity`): the base by the content hash of its weight files, the
trained model by ``<run id>@step<N>`` — an extended run re-evaluates.

Exit status of an interrupted run (SIGINT/SIGTERM: the current step finishes, a checkpoint is saved):
:data:`INTERRUPTED_EXIT` — never 0, so a pre-empted job never looks finished to a scheduler.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from grae.eval.identity import model_identity, trained_identity
from grae.eval.records import atomic_write_text
from grae.train.config import TrainConfig, grpo_config, to_dict
from grae.train.rundir import claim

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


def run_train(cfg: TrainConfig, *, resume: bool = False, overwrite: bool = False, console=None,
              progress: bool = True) -> RunResult:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()

    from grae.advantage import get_estimator, with_reward_correction
    from grae.data import get_task
    from grae.engines.trl import GraeTrainer, latest_complete_checkpoint
    from grae.presets import resolve_model
    from grae.train.callbacks import GracefulInterrupt, MetricsJsonl, RichProgress

    out = Path(cfg.output_dir)
    run_id = claim(out, to_dict(cfg), resume=resume, overwrite=overwrite)  # refuses before writing anything
    atomic_write_text(out / "config.yaml", yaml.safe_dump(to_dict(cfg), sort_keys=False))
    log = (lambda m: console.print(m, markup=False, emoji=False, highlight=False, soft_wrap=True)) if console is not None else print
    torch.manual_seed(cfg.seed)

    # data
    task = get_task(cfg.task.name, **cfg.task.params)
    train_examples = task.train(cfg.task.train_size, seed=cfg.seed)
    heldout = task.heldout(cfg.eval.num_problems) if cfg.eval.enabled else []
    dataset = task.to_hf_dataset(train_examples)

    # model
    model_path = resolve_model(cfg.model)
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)

    summary_path = out / "eval" / "summary.json"
    before = (evaluate_heldout(cfg, model, tokenizer, heldout, task, out / "eval" / "before.jsonl", log,
                               identity=model_identity(cfg.model, model_path)) if cfg.eval.enabled else {})

    estimator = get_estimator(cfg.estimator, **cfg.estimator_params)
    if cfg.reward_correction:
        estimator = with_reward_correction(estimator, **cfg.reward_correction)
    checkpoints = out / "checkpoints"
    resume_from = latest_complete_checkpoint(str(checkpoints), run_id) if resume else None
    resume_step = int(resume_from.rsplit("-", 1)[1]) if resume_from else (0 if resume else None)
    interrupt = GracefulInterrupt()
    callbacks = [MetricsJsonl(out / "metrics.jsonl", resume_step=resume_step), interrupt]
    if progress:
        callbacks.append(RichProgress(console))
    trainer = GraeTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[task.reward_fn()],
        args=grpo_config(cfg, output_dir=str(checkpoints)),
        train_dataset=dataset,
        callbacks=callbacks,
        estimator=estimator,
        loss_agg_mode=cfg.loss_agg_mode,
        dual_clip=cfg.dual_clip,
    )
    trainer.grae_run_id = run_id
    if progress:
        from transformers import PrinterCallback

        trainer.remove_callback(PrinterCallback)  # the rich bar shows the same numbers
    if resume_from:
        log(f"resuming from {resume_from}")
    t0 = time.perf_counter()
    try:
        trainer.train(resume_from_checkpoint=resume_from)
        steps = trainer.state.global_step
        if latest_complete_checkpoint(str(checkpoints), run_id) != os.path.join(str(checkpoints), f"checkpoint-{steps}"):
            trainer._save_checkpoint(trainer.model, trial=None)  # the final state is always resumable
    except OSError as err:
        if err.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        last = latest_complete_checkpoint(str(checkpoints), run_id)
        raise DiskFullError(f"disk full while checkpointing into {checkpoints} ({err.strerror}); the newest complete "
                            f"checkpoint is {last or 'none'}: free space, then rerun with --resume") from None
    train_seconds = time.perf_counter() - t0
    if interrupt.requested:
        log(f"interrupted at step {steps}: checkpoint saved; continue with --resume")
        return RunResult(out, steps, train_seconds, before, interrupted_by=interrupt.signal)
    _save_final(trainer, tokenizer, out / "final")

    after = (evaluate_heldout(cfg, trainer.model, tokenizer, heldout, task, out / "eval" / "after.jsonl", log,
                              identity=trained_identity(run_id, steps)) if cfg.eval.enabled else {})
    from grae.eval import atomic_write_json

    summary = {"before": before, "after": after, "steps": steps, "train_seconds": train_seconds,
               "estimator": cfg.estimator, "estimator_params": cfg.estimator_params}
    atomic_write_json(summary_path, {k: ({str(kk): vv for kk, vv in v.items()} if isinstance(v, dict) else v)
                                     for k, v in summary.items()})
    report = None
    if cfg.report:
        from grae.train.report import write_train_report

        report = write_train_report(out, cfg, before, after, steps=steps, train_seconds=train_seconds)
    return RunResult(out, steps, train_seconds, before, after, report)


class DiskFullError(RuntimeError):
    """No space left while checkpointing; the run resumes from its newest complete checkpoint."""


def evaluate_heldout(cfg: TrainConfig, model, tokenizer, heldout, task, path: Path, log, *,
                     identity: str | None = None) -> dict[int, float]:
    """Held-out pass@k of ``model`` (named by ``identity``) with ``cfg.eval``'s settings, resumable into
    ``path``. Rows there from other weights or settings (an extended run's old step) are replaced."""
    from grae.eval import evaluate
    from grae.eval.runner import discard_rows, stale_reason

    e = cfg.eval
    settings = {"identity": identity, "temperature": e.temperature, "top_p": e.top_p, "max_tokens": e.max_tokens,
                "seed": e.seed} if identity else {}
    reason = stale_reason(path, settings)
    if reason:
        log(f"{path.name}: rows of other weights or settings ({reason}); evaluating anew")
        discard_rows(path)
    result = evaluate(model, tokenizer, heldout, task, n=e.n, temperature=e.temperature, top_p=e.top_p,
                      max_tokens=e.max_tokens, batch_size=e.batch_size, seed=e.seed, output_path=path,
                      identity=identity)
    log(f"{path.stem}: " + "  ".join(f"pass@{k}={v:.3f}" for k, v in result.curve.items()) + f"  ({result.seconds:.0f}s)")
    return dict(result.curve)


def _save_final(trainer, tokenizer, target: Path) -> None:
    staging = target.with_name(target.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    trainer.save_model(str(staging))
    tokenizer.save_pretrained(str(staging))
    shutil.rmtree(target, ignore_errors=True)
    os.replace(staging, target)
