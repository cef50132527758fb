"""The ``grae train`` report: markdown + PNG plots of reward, entropy, ACR and the pass@k change."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from grae.io import atomic_write_text
from grae.train.rundir import METRICS_FILE, read_metrics

if TYPE_CHECKING:
    from grae.train.config import TrainConfig

PANELS = [("reward_mean", "reward (batch mean)"), ("entropy", "entropy (nats/token)"), ("acr", "ACR (collapsed groups)"),
          ("omega", "ω (batch mean reward)"), ("adv_pos_mass", "positive advantage mass"),
          ("adv_neg_mass", "negative advantage mass")]


def plot_training_curves(rows: list[dict], path: Path, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, axes = plt.subplots(2, 3, figsize=(11, 6), dpi=120)
    steps = [r["step"] for r in rows]
    for ax, (key, label) in zip(axes.ravel(), PANELS):
        values = [r.get(key) for r in rows]
        pts = [(s, v) for s, v in zip(steps, values) if v is not None]
        if pts:
            xs, ys = zip(*pts)
            ax.plot(xs, ys, linewidth=0.8, alpha=0.4)
            window = max(1, len(ys) // 20)
            smooth = [sum(ys[max(0, i - window + 1): i + 1]) / len(ys[max(0, i - window + 1): i + 1]) for i in range(len(ys))]
            ax.plot(xs, smooth, linewidth=1.6)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
        ax.grid(True, alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def write_train_report(out: Path, cfg: TrainConfig, before: dict[int, float], after: dict[int, float], *,
                       steps: int, train_seconds: float) -> Path:
    from grae.eval import markdown_table, plot_passk_curves

    rows = read_metrics(out / METRICS_FILE) if (out / METRICS_FILE).exists() else []
    plot_training_curves(rows, out / "training.png", f"{cfg.estimator} on {cfg.task.name} ({cfg.model})")
    curves = {"base": before, f"after {cfg.estimator}": after} if before else {}
    if curves:
        plot_passk_curves(curves, out / "passk.png", f"held-out pass@k, {cfg.task.name}")
    trl = cfg.trl
    completions = trl.get("per_device_train_batch_size", 8) * trl.get("gradient_accumulation_steps", 1)
    lines = [
        f"# grae train: {cfg.estimator} on {cfg.task.name}",
        "",
        f"- model: `{cfg.model}`; estimator: `{cfg.estimator}` {cfg.estimator_params or ''}",
        f"- budget: {steps} steps, {train_seconds:.0f} s training wall time, "
        f"{completions} completions/step (G = {trl.get('num_generations', 8)}), seed {cfg.seed}",
        (f"- held-out: {cfg.eval.num_problems} problems × n = {cfg.eval.n} samples, T = {cfg.eval.temperature}"
         if cfg.eval.enabled else "- held-out: not evaluated (eval.enabled: false); `grae eval final/` evaluates the model"),
        "",
    ]
    if curves:
        first, last = min(before), max(before)
        lines += ["## Held-out pass@k (%)", "", markdown_table(curves), "",
                  f"pass@{first}: {100 * before[first]:.1f} → {100 * after[first]:.1f} "
                  f"({100 * (after[first] - before[first]):+.1f} points); pass@{last}: {100 * before[last]:.1f} → "
                  f"{100 * after[last]:.1f} ({100 * (after[last] - before[last]):+.1f} points)", "",
                  "![pass@k](passk.png)", ""]
    from grae.train.callbacks import sparse_signal_note, zero_signal_note

    note = zero_signal_note(rows) or sparse_signal_note(rows)
    if note is not None:
        lines += [f"> **Warning — {note}.**", ""]
    if rows:
        def mean(key, part):
            vals = [r[key] for r in part if r.get(key) is not None]
            return sum(vals) / len(vals) if vals else float("nan")

        head, tail = rows[: max(1, len(rows) // 10)], rows[-max(1, len(rows) // 10):]
        lines += ["## Training dynamics (first vs last 10% of steps)", "", "| quantity | first | last |", "|---|---|---|"]
        lines += [f"| {key} | {mean(key, head):.3f} | {mean(key, tail):.3f} |" for key, _ in PANELS]
        lines += ["", "![training](training.png)", ""]
    lines += memorisation_lines(out, cfg, rows)
    lines += [f"Reproduce: `grae train {out / 'config.yaml'}` (the resolved config of this run).", ""]
    path = out / "report.md"
    atomic_write_text(path, "\n".join(lines))
    return path


def memorisation_lines(out: Path, cfg: TrainConfig, metrics: list[dict]) -> list[str]:
    """The train vs held-out gap and the answer-leakage rate (:mod:`grae.eval.diagnostics`) of a run whose
    held-out rows are on disk; [] without them."""
    from grae.eval.diagnostics import answer_leakage, diagnostics_lines, train_heldout_gap
    from grae.eval.records import read_rows

    after_path, before_path = out / "eval" / "after.jsonl", out / "eval" / "before.jsonl"
    if not after_path.exists() or not metrics:
        return []
    from grae.data import get_task

    try:
        train_answers = [e["answer"] for e in get_task(cfg.task.name, **cfg.task.params).train(cfg.task.train_size,
                                                                                                seed=cfg.seed)]
    except (KeyError, OSError, TypeError, ValueError) as err:  # a task whose training answers cannot be listed
        return ["## Memorisation diagnostics", "", f"- not computed: the training answers are unavailable ({err})", ""]
    after = read_rows(after_path)
    base = answer_leakage(read_rows(before_path), train_answers) if before_path.exists() else None
    return (["## Memorisation diagnostics", ""]
            + diagnostics_lines(train_heldout_gap(metrics, after), answer_leakage(after, train_answers), base) + [""])
