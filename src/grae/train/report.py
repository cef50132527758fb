"""The ``grae train`` report: markdown, ``training.png`` (the panels TRL users read: reward, completion length,
clip ratio, KL, grad norm, lr, entropy, collapsed groups, held-out pass@k) and ``passk.png``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from grae.io import atomic_write_text
from grae.train.rundir import METRICS_FILE, read_metrics

if TYPE_CHECKING:
    from grae.train.config import TrainConfig

#: the training figure's panels: (title, {series label: metrics.jsonl column}, y range or None). TRL's log keys
#: (grae.train.callbacks.COLUMNS names them) in the order TRL users read them; the collapsed groups split into
#: their two kinds (ACR is their sum), so no quantity is drawn twice (ω is the batch mean reward: not redrawn)
PANELS = (
    ("reward (batch mean)", {"reward": "reward_mean"}, None),
    ("completion length (tokens)", {"mean": "completion_length"}, None),
    ("clip ratio (PPO region)", {"clip ratio": "clip_ratio"}, (0.0, 1.0)),
    ("KL to the reference", {"kl": "kl"}, None),
    ("grad norm", {"grad norm": "grad_norm"}, None),
    ("learning rate", {"lr": "learning_rate"}, None),
    ("entropy (nats/token)", {"entropy": "entropy"}, None),
    ("collapsed groups (share; sum = ACR)", {"all correct": "frac_all_correct", "all wrong": "frac_all_wrong"},
     (0.0, 1.0)),
)
#: curves drawn as logged, without the running mean (a schedule, not a noisy estimate)
EXACT_CURVES = {"learning_rate"}
#: why a panel can be empty
NOT_LOGGED = {"kl": "not logged: TRL logs kl only with trl.beta > 0", "clip_ratio": "not logged by this TRL loss"}
#: the report's table of first vs last steps
TABLE_KEYS = ("reward_mean", "completion_length", "clip_ratio", "kl", "grad_norm", "entropy", "acr", "frac_all_correct",
              "frac_all_wrong", "omega", "adv_pos_mass", "adv_neg_mass")


#: the label of the completion-length panel's line at the token cap (a constant, drawn dashed)
CAP_LABEL = "cap (max_completion_length)"


def panel_series(rows: list[dict], before: dict[int, float] | None = None, after: dict[int, float] | None = None,
                 steps: int | None = None, cap: int | None = None,
                 ) -> list[tuple[str, dict[str, list[tuple[float, float]]], tuple | None]]:
    """What the training figure draws: per panel its title, ``{label: [(step, value)]}`` and y range. The
    completion-length panel carries the token ``cap`` as a line (:data:`CAP_LABEL`) over the logged steps; the
    last panel is held-out pass@k in % at each evaluation (before training at step 0, after it at ``steps``), a
    line per k, as every other pass@k figure."""
    out = []
    logged = [float(r["step"]) for r in rows if isinstance(r.get("step"), (int, float))]
    for title, series, limits in PANELS:
        drawn = {label: [(float(r["step"]), float(r[key])) for r in rows if isinstance(r.get(key), (int, float))]
                 for label, key in series.items()}
        drawn = {label: pts for label, pts in drawn.items() if pts}
        if "completion_length" in series.values() and cap and logged:
            drawn[CAP_LABEL] = [(min(logged), float(cap)), (max(logged), float(cap))]
        out.append((title, drawn, limits))
    heldout: dict[str, list[tuple[float, float]]] = {}
    for step, passk in ((0, before or {}), (steps, after or {})):
        if step is None:
            continue
        for k in _shown_ks(passk):
            heldout.setdefault(f"pass@{k}", []).append((float(step), 100.0 * float(passk[k])))
    out.append(("held-out pass@k (%) at each evaluation", heldout, (0.0, 100.0)))
    return out


def _shown_ks(passk: dict[int, float]) -> list[int]:
    """pass@1, a middle k and the largest k (all of them when there are three or fewer)."""
    ks = sorted(passk)
    return ks if len(ks) <= 3 else [ks[0], ks[len(ks) // 2], ks[-1]]


def plot_training_curves(rows: list[dict], path: Path, title: str, before: dict[int, float] | None = None,
                         after: dict[int, float] | None = None, steps: int | None = None, cap: int | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    panels = panel_series(rows, before, after, steps, cap)
    fig, axes = plt.subplots(3, 3, figsize=(12, 9), dpi=110)
    for ax, (label, series, limits), spec in zip(axes.ravel(), panels, [*PANELS, None]):
        limit = series.pop(CAP_LABEL, None)
        if limit:
            ax.axhline(limit[0][1], color="grey", linestyle="--", linewidth=1.0, label=f"cap {limit[0][1]:.0f}")
        smoothed = spec is not None and len(series) == 1 and not set(spec[1].values()) & EXACT_CURVES
        for name, pts in series.items():
            xs, ys = zip(*pts)
            heldout = spec is None
            line, = ax.plot(xs, ys, linewidth=0.8 if smoothed else 1.4, alpha=0.4 if smoothed else 1.0,
                            marker="o" if heldout else None, markersize=3, label=name)
            if smoothed and len(ys) > 2:
                window = max(1, len(ys) // 20)
                smooth = [sum(ys[max(0, i - window + 1): i + 1]) / len(ys[max(0, i - window + 1): i + 1])
                          for i in range(len(ys))]
                ax.plot(xs, smooth, linewidth=1.6, color=line.get_color())
        if len(series) > 1 or limit:
            ax.legend(fontsize=7)
        if not series:
            key = next(iter(spec[1].values())) if spec else None
            ax.text(0.5, 0.5, NOT_LOGGED.get(key, "not logged") if key else "held-out evaluation off",
                    ha="center", va="center", fontsize=8, transform=ax.transAxes, wrap=True)
        if limits:
            pad = 0.02 * (limits[1] - limits[0])
            ax.set_ylim(limits[0] - pad, limits[1] + pad)
        ax.set_title(label, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
        ax.grid(True, alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def signal_notes(cfg: TrainConfig, rows: list[dict], base_note: str | None = None) -> list[str]:
    """The learning-signal warnings of a run, as the console said them: the base model's diagnosis before
    step 1 (``base_note``, :func:`grae.engines.learning_signal.base_diagnosis`), the warning of the first streak
    of steps without signal (:func:`~grae.engines.learning_signal.first_streak_note`: word for word), and how much
    of the run had no gradient (:func:`grae.train.callbacks.sparse_signal_note`)."""
    from grae.engines.learning_signal import first_streak_note
    from grae.train.callbacks import sparse_signal_note
    from grae.train.trl_values import trl_fields

    budget = cfg.trl.get("max_completion_length", trl_fields()["max_completion_length"].default)
    notes = [base_note, first_streak_note(rows, cfg.no_signal_steps, budget), sparse_signal_note(rows)]
    return [note if note.endswith(".") else f"{note}." for note in notes if note]


def write_train_report(out: Path, cfg: TrainConfig, before: dict[int, float], after: dict[int, float], *,
                       steps: int, train_seconds: float, base_note: str | None = None, exact=None) -> Path:
    """``report.md`` with ``training.png`` and ``passk.png``; ``exact`` (:class:`grae.train.exact_eval.ExactReport`)
    opens it with the gain per held-out stratum against the base's temperature frontier, drawn in passk.png."""
    from grae.eval import plot_passk_curves

    rows = read_metrics(out / METRICS_FILE) if (out / METRICS_FILE).exists() else []
    plot_training_curves(rows, out / "training.png", f"{run_title(out, cfg)} ({cfg.model})", before, after, steps,
                         cap=completion_cap(cfg))
    from grae.train.heldout_table import heldout_table, markdown

    curves = {"base": before, f"after {cfg.estimator}": after} if before else {}
    held = heldout_table(out, before, after, cfg.eval.n, cfg.eval.seed) if before else None
    if curves and held is not None:
        from grae.train.oracle import ORACLE

        if ORACLE in held.rows:  # the base with its wrong output mode removed, beside the trained model
            curves[ORACLE] = {k: e.value for k, e in held.rows[ORACLE].items()}
        bands = {label: {k: (e.lo, e.hi) for k, e in held.rows[row].items() if e.lo == e.lo}
                 for label, row in zip(curves, ("base", "trained", ORACLE)) if row in held.rows}
        title = f"held-out pass@k, {run_title(out, cfg)}"
        if exact is not None:  # one stratum's base, trained model and the base's temperature frontier
            where, curves, bands = exact_curves(exact.report, cfg.estimator)
            title = f"held-out pass@k ({where}), {run_title(out, cfg)}"
        plot_passk_curves(curves, out / "passk.png", title,
                          intervals={label: band for label, band in bands.items() if band})
    trl = cfg.trl
    completions = trl.get("per_device_train_batch_size", 8) * trl.get("gradient_accumulation_steps", 1)
    lines = [
        f"# grae train: {cfg.estimator} on {cfg.task.name}",
        "",
        f"- model: `{cfg.model}`; estimator: `{cfg.estimator}` {cfg.estimator_params or ''}",
        f"- budget: {steps} steps, {train_seconds:.0f} s training wall time{machine_note(out)}, "
        f"{completions} completions/step (G = {trl.get('num_generations', 8)}), seed {cfg.seed}",
        (f"- held-out: {cfg.eval.num_problems} problems, exact pass@k (teacher-forced gold completions) for k ≤ "
         f"{cfg.eval.n}, T = {cfg.eval.temperature}" if cfg.eval.enabled and cfg.eval.exact else
         f"- held-out: {cfg.eval.num_problems} problems × n = {cfg.eval.n} samples, T = {cfg.eval.temperature}"
         if cfg.eval.enabled else f"- held-out: not evaluated (eval.enabled: false); `grae eval {out}` evaluates the "
                                  "trained model on the run's held-out problems"),
        "",
    ]
    if exact is not None:
        lines += ["## What the training gained", "", exact.markdown, ""]
    if curves and held is not None:
        first, last = min(before), max(before)
        lines += ["## Held-out pass@k (%)", "", markdown(held), "",
                  f"pass@{first}: {100 * before[first]:.1f} → {100 * after[first]:.1f} "
                  f"({100 * (after[first] - before[first]):+.1f} points); pass@{last}: {100 * before[last]:.1f} → "
                  f"{100 * after[last]:.1f} ({100 * (after[last] - before[last]):+.1f} points)", "",
                  "![pass@k](passk.png)", ""]
    for note in signal_notes(cfg, rows, base_note):
        lines += [f"> **Warning — {note}**", ""]
    if rows:
        def mean(key, part):
            vals = [r[key] for r in part if r.get(key) is not None]
            return sum(vals) / len(vals) if vals else float("nan")

        head, tail = rows[: max(1, len(rows) // 10)], rows[-max(1, len(rows) // 10):]
        lines += ["## Training dynamics (first vs last 10% of steps)", "", "| quantity | first | last |", "|---|---|---|"]
        lines += [f"| {key} | {mean(key, head):.4g} | {mean(key, tail):.4g} |" for key in TABLE_KEYS
                  if any(r.get(key) is not None for r in rows)]
        lines += ["", "![training](training.png)", ""]
    if not cfg.eval.exact:  # exact rows hold no sampled answers to compare with the training answers
        lines += memorisation_lines(out, cfg, rows)
    lines += [f"Reproduce: `grae train {out / 'config.yaml'}` (the resolved config of this run).", ""]
    path = out / "report.md"
    atomic_write_text(path, "\n".join(lines))
    return path


def exact_curves(report, estimator: str) -> tuple[str, dict[str, dict[int, float]], dict[str, dict]]:
    """passk.png's lines for an exact run: on the main stratum where the report has one (in range on the two-modes
    testbed), else on every held-out problem, the base, the trained model (with their intervals) and the base's
    temperature frontier F at the trained model's pass@1. Returns (the stratum's name, curves, intervals)."""
    from grae.train.exact_heldout import ALL
    from grae.train.exact_heldout_text import MAIN, stratum_name

    s = report.strata.get(MAIN) or report.strata[ALL]
    curves = {"base": {k: e.value for k, e in s.base.items()},
              f"after {estimator}": {k: e.value for k, e in s.trained.items()},
              f"base's temperature frontier (best T = {s.best.temperature:g})": dict(s.frontier)}
    bands = {label: {k: (e.lo, e.hi) for k, e in rows.items() if e.lo == e.lo}
             for label, rows in zip(curves, (s.base, s.trained))}
    return stratum_name(s.name), curves, bands


def completion_cap(cfg: TrainConfig) -> int | None:
    """The run's token cap per completion: ``trl.max_completion_length``, else TRL's default."""
    from grae.train.trl_values import trl_fields

    given = cfg.trl.get("max_completion_length")
    if given:
        return int(given)
    default = getattr(trl_fields().get("max_completion_length"), "default", None)
    return int(default) if isinstance(default, int) else None


def run_title(out: Path, cfg: TrainConfig) -> str:
    """How the figures name a run: its directory's name and what it trained (``agrae-s0: agrae on chain_sum``)."""
    return f"{Path(out).resolve().name}: {cfg.estimator} on {cfg.task.name}"


def machine_note(out: Path) -> str:
    """`` on cpu (AMD EPYC 7B13, 1 thread), load 5.2 on 2 CPUs``: what the run's wall time ran on and under, from
    its ``eval/summary.json``; "" where it is not recorded."""
    import json

    try:
        summary = json.loads((out / "eval" / "summary.json").read_text())
    except (OSError, ValueError):
        return ""
    device, load = summary.get("device"), summary.get("load")
    return "".join([f" on {device}" if device else "", f", {load}" if load else ""])


def memorisation_lines(out: Path, cfg: TrainConfig, metrics: list[dict]) -> list[str]:
    """The train vs held-out gap and the answer-leakage rate (:mod:`grae.eval.diagnostics`) of a run whose
    held-out rows are on disk; [] without them."""
    from grae.eval.diagnostics import answer_leakage, diagnostics_lines, train_heldout_gap
    from grae.eval.records import read_rows

    after_path, before_path = out / "eval" / "after.jsonl", out / "eval" / "before.jsonl"
    if not after_path.exists() or not metrics:
        return []
    try:
        train_answers = [e["answer"] for e in cfg.task.build().train(cfg.task.train_size, seed=cfg.seed)]
    except (KeyError, OSError, TypeError, ValueError) as err:  # a task whose training answers cannot be listed
        return ["## Memorisation diagnostics", "", f"- not computed: the training answers are unavailable ({err})", ""]
    after = read_rows(after_path)
    base = answer_leakage(read_rows(before_path), train_answers) if before_path.exists() else None
    return (["## Memorisation diagnostics", ""]
            + diagnostics_lines(train_heldout_gap(metrics, after), answer_leakage(after, train_answers), base) + [""])
