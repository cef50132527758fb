"""The checkpoint frontier read from a study's table (:class:`grae.compare.results.StudyResults`): each
method's (pass@1, pass@k) path over training with intervals, whether a point lies above the baseline's path
(the early-stopping frontier), its table lines and ``frontier.png``. The checkpoints themselves are
evaluated and collected by :mod:`grae.compare.frontier`."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from grae.compare.stats import Interval

if TYPE_CHECKING:
    from grae.compare.results import StudyResults


def frontier_points(results: StudyResults, k: int | None = None,
                    ) -> tuple[dict[str, dict[float, dict[int, Interval]]], int, dict[int, Interval] | None]:
    """``({method: {fraction: {1: Interval, k: Interval}}}, k, base)``: every method's checkpoints at pass@1
    and pass@k (default k_max, the largest power of two every checkpoint's ``n`` reaches) over the seeds
    every checkpoint of the method has, and the base model's point (the path's 0 %) when its rows reach k."""
    from grae.compare.stats import proportion_interval
    from grae.eval.stats import per_problem_passk
    from grae.metrics import powers_of_two

    study = results.study
    if k is None:
        k = powers_of_two(min(n for by_f in results.frontier.values() for cp in by_f.values()
                              for n in cp.n_min.values()))[-1]
    base = None
    for name in ("frontier.jsonl",) if study.eval else ("frontier.jsonl", "before.jsonl"):
        counts = results.base_files.get(name)
        if counts is not None and int(counts.n.min()) >= k:
            base = dict(zip([1, k], proportion_interval(per_problem_passk(counts, [1, k])[None])))
            break
    points: dict[str, dict[float, dict[int, Interval]]] = {}
    for method, by_f in results.frontier.items():
        for f, cp in by_f.items():
            if cp.shared and min(cp.n_min[s] for s in cp.shared) >= k:
                points.setdefault(method, {})[f] = {1: cp.passk[1], k: cp.passk[k]}
    return points, k, base


def above_frontier(point: tuple[float, float], path: Sequence[tuple[float, float]], *,
                   extend: bool = False) -> float | None:
    """Vertical distance (pass@k_max points) of ``point`` = (pass@1, pass@k_max) above the piecewise-linear
    ``path`` at the same pass@1; None where the path does not reach that pass@1, or with ``extend`` the
    distance above the path's nearest end point there (a point beyond the frontier's last pass@1 is
    compared with its last point). Positive: above the frontier (better at large k than early-stopping
    the baseline at equal pass@1)."""
    pts = sorted(path)
    xs = [p[0] for p in pts]
    if not pts or not (extend or xs[0] <= point[0] <= xs[-1]):
        return None
    return float(point[1] - np.interp(point[0], xs, [p[1] for p in pts]))


def frontier_lines(points: dict[str, dict[float, dict[int, Interval]]], baseline: str, k_max: int,
                   base: dict[int, Interval] | None = None, note: str = "") -> list[str]:
    """The report's frontier section: a table of every method's path and each final point's distance
    above the baseline's early-stopping frontier; ``note``: what the fractions are of, where the jobs trained
    other than the config's steps (grae.compare.report_budget.frontier_note)."""
    if not points:
        return []
    fractions = sorted({f for by_f in points.values() for f in by_f})
    lines = [f"## Checkpoint frontier (pass@1 → pass@{k_max} over training; %, mean [95% CI])", "",
             f"Each method evaluated at {', '.join(f'{100 * f:.0f}%' for f in fractions)} of its training steps. "
             + note +
             f"**{baseline}'s path is the early-stopping frontier**: a method beats it only where its point lies above "
             f"that path at equal pass@1 (last column: pass@{k_max} above the frontier at the method's final pass@1; "
             "– where the frontier does not reach that pass@1).", "",
             "| method | " + " | ".join(f"{100 * f:.0f}%" for f in fractions) + f" | above {baseline}'s frontier |",
             "|---|" + "---|" * (len(fractions) + 1)]

    def cell(iv: dict[int, Interval]) -> str:
        return f"{100 * iv[1].mean:.1f} → {100 * iv[k_max].mean:.1f}"

    path = _path(points.get(baseline, {}), k_max, base)
    if base:
        lines.append("| base model (0%) | " + " | ".join(cell(base) if i == 0 else "" for i in range(len(fractions)))
                     + " | |")
    for method, by_f in points.items():
        cells = [cell(by_f[f]) if f in by_f else "–" for f in fractions]
        last = by_f[max(by_f)]
        d = above_frontier((last[1].mean, last[k_max].mean), path) if method != baseline else None
        lines.append(f"| {method} | " + " | ".join(cells) + " | " + ("–" if d is None else f"{100 * d:+.1f}") + " |")
    lines += ["", f"Intervals of every point (pass@1 [CI] / pass@{k_max} [CI]):", ""]
    for method, by_f in points.items():
        lines.append(f"- {method}: " + "; ".join(
            f"{100 * f:.0f}%: {100 * iv[1].mean:.1f} [{100 * iv[1].lo:.1f}, {100 * iv[1].hi:.1f}] / "
            f"{100 * iv[k_max].mean:.1f} [{100 * iv[k_max].lo:.1f}, {100 * iv[k_max].hi:.1f}]" for f, iv in by_f.items()))
    return lines + ["", "![frontier](frontier.png)", ""]


def _path(by_f: dict[float, dict[int, Interval]], k_max: int, base: dict[int, Interval] | None) -> list[tuple[float, float]]:
    pts = [(base[1].mean, base[k_max].mean)] if base else []
    return pts + [(iv[1].mean, iv[k_max].mean) for _, iv in sorted(by_f.items())]


def plot_frontier(points: dict[str, dict[float, dict[int, Interval]]], baseline: str, k_max: int, path: Path,
                  base: dict[int, Interval] | None = None, title: str = "", note: str | None = None) -> Path:
    """Each method's (pass@1, pass@k_max) path from the base (0 %) to 100 % of training; the baseline's
    path drawn thick as the early-stopping frontier; 95 % intervals as error bars. ``note``: the measured budget
    on a line under the title (grae.compare.report_budget.figure_note), None where it is what the config asks."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    from grae.eval.report import line_colors

    fig, ax = plt.subplots(figsize=(7, 5), dpi=130)
    order = [baseline] + [m for m in points if m != baseline] if baseline in points else list(points)
    for method, color in zip(order, line_colors(len(order))):
        by_f = points[method]
        pts = _path(by_f, k_max, base)
        xs, ys = [100 * p[0] for p in pts], [100 * p[1] for p in pts]
        is_frontier = method == baseline
        ax.plot(xs, ys, marker="o", markersize=4, linewidth=3 if is_frontier else 1.3, color=color,
                label=f"{method} (early-stopping frontier)" if is_frontier else method, zorder=3 if is_frontier else 2)
        for f, iv in by_f.items():
            ax.errorbar(100 * iv[1].mean, 100 * iv[k_max].mean,
                        xerr=[[100 * (iv[1].mean - iv[1].lo)], [100 * (iv[1].hi - iv[1].mean)]],
                        yerr=[[100 * (iv[k_max].mean - iv[k_max].lo)], [100 * (iv[k_max].hi - iv[k_max].mean)]],
                        color=color, alpha=0.35, linewidth=0.8)
            ax.annotate(f"{100 * f:.0f}%", (100 * iv[1].mean, 100 * iv[k_max].mean), fontsize=6,
                        xytext=(3, 3), textcoords="offset points", color=color)
    if base:
        ax.scatter([100 * base[1].mean], [100 * base[k_max].mean], marker="*", s=120, color="black", zorder=4,
                   label="base model")
    ax.set_xlabel("pass@1 (%)")
    ax.set_ylabel(f"pass@{k_max} (%)")
    ax.set_title((title or f"checkpoint frontier: pass@1 vs pass@{k_max} over training") + (f"\n{note}" if note else ""),
                 fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path
