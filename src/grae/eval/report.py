"""pass@k curves on a log-2 k axis (PNG) and markdown tables, from eval outputs or in-memory curves.

:func:`plot_passk_curves` is the reusable piece (``grae train`` draws its before/after curve with
it); :func:`write_report` is ``grae report``: inputs are ``grae eval`` directories, sample JSONL files,
summary JSONs and ``grae train`` run directories (their held-out rows before and after training). Where
several inputs have sample rows for a task, they are compared on the problems they all have.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from grae.io import atomic_write_text

from .records import RecordsError, file_stem, iter_rows, task_label
from .stats import ProblemCounts, count_problems, passk_estimates, shared_problems

Curve = Mapping[int, float]


def line_colors(n: int) -> list:
    """``n`` distinguishable line colours: tab10 up to 10 lines, tab20 beyond (no colour repeats up to 20)."""
    import matplotlib

    cmap = matplotlib.colormaps["tab10" if n <= 10 else "tab20"]
    return [cmap(i % cmap.N) for i in range(n)]


def plot_passk_curves(curves: Mapping[str, Curve], path: str | Path, title: str | None = None, *,
                      intervals: Mapping[str, Mapping[int, tuple[float, float]]] | None = None,
                      ylabel: str = "pass@k") -> Path:
    """One line per label of pass@k against k (log-2 axis), saved as a PNG.

    Args:
        curves: ``{label: {k: pass@k}}``; k need not be the same across labels.
        path: output file (its suffix picks the format; ``.png`` expected).
        title: figure title.
        intervals: optional ``{label: {k: (lo, hi)}}`` drawn as shaded bands.
    """
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, NullLocator

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(6.0, 4.2), dpi=150)
    all_ks: set[int] = set()
    for (label, curve), color in zip(curves.items(), line_colors(len(curves))):
        ks = sorted(int(k) for k in curve)
        values = [100.0 * curve[k] for k in ks]
        line, = ax.plot(ks, values, marker="o", markersize=3.5, linewidth=1.6, label=label, color=color)
        band = (intervals or {}).get(label)
        if band:
            kb = [k for k in ks if k in band]
            ax.fill_between(kb, [100.0 * band[k][0] for k in kb], [100.0 * band[k][1] for k in kb],
                            color=line.get_color(), alpha=0.15, linewidth=0)
        all_ks.update(ks)
    ax.set_xscale("log", base=2)
    ticks = sorted(all_ks)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xticklabels([str(k) for k in ticks])
    ax.set_xlabel("k (samples)")
    ax.set_ylabel(f"{ylabel} (%)")
    ax.set_ylim(0, 100)
    ax.grid(True, alpha=0.3)
    if title:
        # each line wrapped on its own: a second line (a note under the title) stays a line of its own
        ax.set_title("\n".join(textwrap.fill(part, 70) for part in title.split("\n")),
                     fontsize=10 if len(title) > 70 else None)
    if curves:
        ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
    return path


def markdown_table(curves: Mapping[str, Curve], ks: Sequence[int] | None = None, *, digits: int = 1) -> str:
    """Markdown table, one row per label, one column per k, values in percent."""
    if ks is None:
        ks = sorted({int(k) for curve in curves.values() for k in curve})
    header = "| model | " + " | ".join(f"pass@{k}" for k in ks) + " |"
    rule = "|---|" + "---:|" * len(ks)
    lines = [header, rule]
    for label, curve in curves.items():
        cells = [f"{100.0 * curve[k]:.{digits}f}" if k in curve else "–" for k in ks]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# -- reading eval outputs -----------------------------------------------------------------------


@dataclass
class TaskCurve:
    """One input's pass@k on one task, with its 95 % interval per k when known, and what it was computed
    on: the per-problem ``counts`` (from rows), or the ``rows`` file (and its ``n``) behind a summary."""

    curve: dict[int, float]
    intervals: dict[int, tuple[float, float]] | None = None
    counts: ProblemCounts | None = None
    rows: Path | None = None
    n: int | None = None
    #: the sampling temperature the rows were drawn at (their ``.run.json`` sidecar, or the summary); None: unknown
    temperature: float | None = None

    def problem_counts(self) -> ProblemCounts | None:
        """Per-problem counts (read from :attr:`rows` for a summary), None when only a summary is known."""
        if self.counts is None and self.rows is not None:
            self.counts = count_problems(iter_rows(self.rows), n=self.n)
        return self.counts


def _curve(counts: ProblemCounts, bootstrap: int = 1000) -> TaskCurve:
    estimates = passk_estimates(counts, bootstrap=bootstrap)
    return TaskCurve({k: e.value for k, e in estimates.items()},
                     {k: (e.lo, e.hi) for k, e in estimates.items()} if bootstrap > 0 else None, counts)


def _from_summary(summary: dict, rows_dir: Path | None = None) -> TaskCurve:
    values = summary.get("pass_at_k") or {k.split("@", 1)[1]: v for k, v in summary.items() if k.startswith("pass@")}
    if not values:
        raise RecordsError("summary has no pass@k values")
    ci = summary.get("ci95") or {}
    intervals = {int(k.split("@")[-1]): (float(v[0]), float(v[1])) for k, v in ci.items()} if ci else None
    samples = summary.get("samples")
    rows = rows_dir / samples if rows_dir is not None and isinstance(samples, str) else None
    rows = rows if rows is not None and rows.is_file() else None
    temperature = summary.get("temperature")
    return TaskCurve({int(k): float(v) for k, v in values.items()}, intervals, rows=rows, n=summary.get("n"),
                     temperature=float(temperature) if isinstance(temperature, (int, float)) else
                     (sampled_temperature(rows) if rows is not None else None))


def sampled_temperature(rows: Path) -> float | None:
    """The temperature ``rows`` (a samples JSONL) was sampled at, from the settings recorded beside it
    (``<stem>.run.json``, grae.eval.runner.settings_path); None when nothing records it."""
    sidecar = rows.with_name(rows.stem + ".run.json")
    try:
        value = json.loads(sidecar.read_text()).get("temperature")
    except (OSError, ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _from_rows(path: Path, bootstrap: int = 1000) -> dict[str, TaskCurve]:
    by_task: dict[str, list[dict]] = {}
    for row in iter_rows(path):
        by_task.setdefault(str(row.get("task") or _stem(path)), []).append(
            {key: row[key] for key in ("question_id", "generation_id", "label") if key in row})
    temperature = sampled_temperature(path)
    out = {task: _curve(count_problems(task_rows), bootstrap) for task, task_rows in by_task.items()}
    for curve in out.values():
        curve.temperature = temperature
    return out


def _stem(path: Path) -> str:
    name = path.name
    for suffix in (".summary.json", ".jsonl", ".json"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return path.stem


def load_task_curves(source: str | Path) -> dict[str, TaskCurve]:
    """``{task: TaskCurve}`` from an eval output directory, a samples JSONL or a summary JSON."""
    source = Path(source)
    if source.is_dir():
        combined = source / "summary.json"
        if combined.exists():
            return load_task_curves(combined)
        summaries = sorted(source.glob("*.summary.json"))
        if summaries:
            return {task: tc for s in summaries for task, tc in load_task_curves(s).items()}
        files = sorted(source.glob("*.jsonl"))
        if not files:
            raise RecordsError(f"{source}: no summary.json, *.summary.json or *.jsonl inside")
        return {task: tc for f in files for task, tc in _from_rows(f).items()}
    if source.suffix == ".jsonl":
        return _from_rows(source)
    if source.suffix == ".json":
        try:
            data = json.loads(source.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise RecordsError(f"{source}: not valid JSON ({err})") from None
        if not isinstance(data, dict):
            raise RecordsError(f"{source}: expected a JSON object, got {type(data).__name__}")
        if isinstance(data.get("tasks"), dict):  # combined summary of `grae eval`
            return {task: _from_summary(s, source.parent) for task, s in data["tasks"].items()}
        return {str(data.get("task") or _stem(source)): _from_summary(data, source.parent)}
    raise RecordsError(f"{source}: expected a directory, .jsonl or .json")


def load_curves(source: str | Path) -> dict[str, dict[int, float]]:
    """``{task: {k: pass@k}}`` from an eval output directory, a samples JSONL or a summary JSON."""
    return {task: tc.curve for task, tc in load_task_curves(source).items()}


def train_run(source: str | Path) -> Path | None:
    """The ``grae train`` run directory ``source`` is (or whose ``eval/`` it is), None for anything else."""
    from grae.train.rundir import RUN_MARKERS

    source = Path(source)
    for run in (source, source.parent) if source.name == "eval" else (source,):
        if source.is_dir() and any((run / marker).is_file() for marker in RUN_MARKERS) and (run / "eval").is_dir():
            return run
    return None


def _run_curves(run: Path, label: str) -> list[tuple[str, dict[str, TaskCurve]]]:
    """A train run's held-out pass@k: ``"<label> (base)"`` before training, ``label`` after."""
    found = [(label + suffix, _from_rows(run / "eval" / name))
             for name, suffix in (("before.jsonl", " (base)"), ("after.jsonl", "")) if (run / "eval" / name).is_file()]
    if not found:
        raise RecordsError(f"{run}: a grae train run without held-out rows (eval/before.jsonl, eval/after.jsonl)")
    return found


def _label_path(source: str | Path) -> Path:
    """The absolute path an input is named by: a train run's directory (also for its ``eval/``), an eval
    directory, the directory of a ``summary.json``/``samples.jsonl``, else the file without its suffixes."""
    source = Path(source)
    run = train_run(source)
    if run is not None:
        return run.resolve()
    if source.is_dir():
        return source.resolve()
    if source.name in ("summary.json", "samples.jsonl"):
        return source.resolve().parent
    return source.resolve().with_name(_stem(source))


def default_label(source: str | Path) -> str:
    """Label of an input: a directory's name (a train run's for its ``eval/``), else the file name without
    its suffixes."""
    return _label_path(source).name


def distinct_suffixes(paths: Sequence[str | Path]) -> list[str]:
    """The shortest path suffixes, one depth for all, that tell the paths apart (``eval/a``, ``runs/a``);
    the whole paths when even they are equal."""
    parts = [Path(p).parts[1:] if Path(p).is_absolute() else Path(p).parts for p in paths]
    for depth in range(1, max((len(p) for p in parts), default=0) + 1):
        names = ["/".join(p[-depth:]) for p in parts]
        if len(set(names)) == len(names):
            return names
    return [str(p) for p in paths]


def default_labels(sources: Sequence[str | Path]) -> list[str]:
    """:func:`default_label` of each input; inputs whose labels are equal (``eval/a``, ``runs/a``) are
    named by the shortest path suffixes that tell them apart instead (:func:`distinct_suffixes`)."""
    paths = [_label_path(s) for s in sources]
    labels = [p.name for p in paths]
    for name in {label for label in labels if labels.count(label) > 1}:
        same = [i for i, label in enumerate(labels) if label == name]
        for i, suffix in zip(same, distinct_suffixes([paths[i] for i in same])):
            labels[i] = suffix
    return labels


@dataclass
class Report:
    """Files written by :func:`write_report`, the curves they show (``{task: {label: curve}}``) and, per task
    with several inputs, which problems they were compared on (``notes``)."""

    curves: dict[str, dict[str, dict[int, float]]]
    figures: dict[str, Path]
    markdown: Path
    notes: dict[str, str] = field(default_factory=dict)


def compare_on_shared(curves: dict[str, TaskCurve]) -> str:
    """Restrict the inputs of one task (``{label: TaskCurve}``, changed in place) to the problems they all
    have, and say so: how many are shared, and each input's own count when they differ. Inputs known only
    by a summary cannot be checked; inputs without a common problem (other question ids) keep their own."""
    unknown = [label for label, tc in curves.items() if tc.problem_counts() is None]
    if unknown:
        return f"problem sets not checked: no sample rows for {', '.join(unknown)} (a summary only)"
    counts = {label: tc.problem_counts() for label, tc in curves.items()}
    shared = shared_problems([c for c in counts.values() if c is not None])
    sizes = ", ".join(f"{label}: {c.num_problems}" for label, c in counts.items() if c is not None)
    if not shared:
        return f"the inputs share no problem (question ids differ; {sizes}): each curve is on its own problems"
    if all(c is not None and c.num_problems == len(shared) for c in counts.values()):
        return f"{len(shared)} problems, the same in every input"
    for label, c in counts.items():
        if c is not None and c.num_problems != len(shared):
            curves[label] = replace(_curve(c.subset(shared)), temperature=curves[label].temperature)
    return f"compared on the {len(shared)} problems shared by all inputs ({sizes}); the others are left out"


def temperature_labels(curves: Mapping[str, TaskCurve]) -> dict[str, str] | None:
    """``{label: "label (T = 0.6)"}`` when the curves of one task were sampled at two or more known temperatures,
    so no plot or table mixes them unmarked (a curve whose rows record none is then ``"T unknown"``); None when
    the known ones agree."""
    temperatures = {label: tc.temperature for label, tc in curves.items()}
    if len({t for t in temperatures.values() if t is not None}) <= 1:
        return None
    return {label: f"{label} (T = {t:g})" if t is not None else f"{label} (T unknown)" for label, t in temperatures.items()}


def write_report(sources: Sequence[str | Path], output_dir: str | Path, labels: Sequence[str] | None = None) -> Report:
    """One PNG per task (``passk_<task>.png``, a curve per input) and ``report.md`` with the tables."""
    if labels and len(labels) != len(sources):
        raise ValueError(f"{len(labels)} labels for {len(sources)} inputs")
    labels = list(labels) if labels else default_labels(sources)
    inputs: list[tuple[str, dict[str, TaskCurve]]] = []
    for source, label in zip(sources, labels):
        run = train_run(source)
        found = _run_curves(run, label) if run is not None else [(label, load_task_curves(source))]
        if not any(task_curves for _, task_curves in found):  # as passk: an empty input is an error, not an empty report
            raise RecordsError(f"{source}: no sample rows or summaries to report (an empty file?); give grae eval "
                               "output, a train run, a samples JSONL or a summary JSON")
        inputs += found
    labels = [label for label, _ in inputs]
    if len(set(labels)) != len(labels):
        raise ValueError(f"labels must be distinct, got {labels} (an input given twice?); pass --label for each input")
    per_task: dict[str, dict[str, TaskCurve]] = {}
    for label, task_curves in inputs:
        for task, tc in task_curves.items():  # a train run's local:<path> and an eval of <path>: one task
            per_task.setdefault(task_label(task), {})[label] = tc
    notes = {task: compare_on_shared(tcs) for task, tcs in per_task.items() if len(tcs) > 1}
    for task, tcs in per_task.items():
        mixed = temperature_labels(tcs)
        if mixed:
            per_task[task] = {mixed[label]: tc for label, tc in tcs.items()}
            notes[task] = "; ".join(filter(None, [notes.get(task), "the curves were sampled at different temperatures "
                                                                  "(T in each label), and pass@k depends on T"]))
    by_task: dict[str, dict[str, dict[int, float]]] = {}
    bands: dict[str, dict[str, dict[int, tuple[float, float]]]] = {}
    for task, tcs in per_task.items():
        for label, tc in tcs.items():
            by_task.setdefault(task, {})[label] = tc.curve
            if tc.intervals:
                bands.setdefault(task, {})[label] = tc.intervals
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    figures: dict[str, Path] = {}
    parts = ["# pass@k\n", "Unbiased estimator (Chen et al. 2021), mean over problems, in percent; shaded bands in "
             "the figures are 95 % bootstrap intervals over problems.\n"]
    for task, curves in by_task.items():
        figure = plot_passk_curves(curves, output_dir / f"passk_{file_stem(task)}.png", title=task,
                                   intervals=bands.get(task))
        figures[task] = figure
        parts += [f"\n## {task}\n"] + ([f"\n{notes[task]}.\n"] if task in notes else [])
        parts += [f"\n![pass@k on {task}]({figure.name})\n\n", markdown_table(curves)]
    markdown = atomic_write_text(output_dir / "report.md", "".join(parts))
    return Report(by_task, figures, markdown, notes)
