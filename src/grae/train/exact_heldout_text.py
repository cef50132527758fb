"""The exact held-out report (:mod:`grae.train.exact_heldout`) in words: the one sentence that says what the gain
is, report.md's tables and the console's lines.

The sentence weighs the trained model's pass@1 on the main stratum (in range, on the two-modes testbed) against
the base's temperature frontier there: Δ_F@1 with its interval above 0 is a gain "beyond the best any temperature
gives the base"; an interval that includes 0, or lies below it, is said as "no gain beyond the frontier". Then the
rare stratum (excursions), where the rare strategy is needed: its pass@k at the largest k before → after, and the
rare strategy's mass.
"""

from __future__ import annotations

from grae.eval.crossed import Interval
from grae.eval.stats import Estimate
from grae.train.exact_heldout import ALL, ExactHeldout, StratumReport, frontier_side
from grae.train.oracle import cell  # the held-out table's cell format

#: the stratum the sentence's gain is read on, where the report has it (else :data:`ALL`)
MAIN = "totals=in_range"
#: the stratum where the rare strategy is needed
RARE = "totals=excursion"
#: the strategy that is rare in the base
RARE_STRATEGY = "G"


def stratum_name(label: str) -> str:
    """``totals=in_range`` → ``in-range``, ``totals=excursion`` → ``excursions``; :data:`ALL` → ``all held-out``;
    a stratum of several keys as it is labelled."""
    if label == ALL:
        return "all held-out"
    if "," in label or "=" not in label:
        return label
    value = label.split("=", 1)[1].replace("_", "-")
    return "excursions" if value == "excursion" else value


def _pct(value: float) -> str:
    return f"{100 * value:.1f}"


def interval_cell(interval: Interval) -> str:
    """``+11.8 [+9.0, +14.6]``: a signed difference in points with its interval."""
    return f"{100 * interval.mean:+.1f} [{100 * interval.lo:+.1f}, {100 * interval.hi:+.1f}]"


def _frontier_clause(s: StratumReport) -> str:
    """Δ_F@1 against the best any temperature gives the base, said as where its interval lies."""
    delta = s.delta_f[1]
    best = f"T = {s.best.temperature:g}: {_pct(s.best.pass1)}"
    side = frontier_side(delta)
    if side == "above":
        return f"{interval_cell(delta)} beyond the best any temperature gives the base ({best})"
    if side == "within":
        return (f"no gain beyond the frontier: {interval_cell(delta)} against the best any temperature gives the base "
                f"({best}), an interval that includes 0")
    return f"no gain beyond the frontier: {interval_cell(delta)}, below the best any temperature gives the base ({best})"


def _rare_clause(s: StratumReport, k: int, strategy: str) -> str:
    """The rare stratum's pass@k and the rare strategy's mass, before → after."""
    mass = s.mass.get(strategy)
    share = f" ({strategy} mass {_pct(mass[0].value)} → {_pct(mass[1].value)})" if mass else ""
    return (f"the rare strategy on {stratum_name(s.name)}: pass@{k} {_pct(s.base[k].value)} → "
            f"{_pct(s.trained[k].value)}{share}")


def gain_sentence(report: ExactHeldout, estimator: str, *, main: str = MAIN, rare: str = RARE,
                  rare_strategy: str = RARE_STRATEGY, rare_k: int | None = None) -> str:
    """The one sentence (module docstring), ``estimator`` as the config names it; ``main``'s pass@1 (or
    :data:`ALL`'s where the report has no such stratum), then ``rare``'s pass@``rare_k`` (default: the largest k)
    where it has one. Needs k = 1 among the report's Δ_F."""
    s = report.strata.get(main) or report.strata[ALL]
    learned = frontier_side(s.delta_f[1]) == "above"
    head = f"{estimator} learned" if learned else estimator
    gain = (f"{stratum_name(s.name)} pass@1 {_pct(s.base[1].value)} → {_pct(s.trained[1].value)} "
            f"({cell(s.change[1], signed=True)})")
    tail = ""
    if rare in report.strata and rare != s.name:
        tail = "; " + _rare_clause(report.strata[rare], rare_k or max(report.ks), rare_strategy)
    return f"{head}: {gain}, {_frontier_clause(s)}{tail}."


def _table(s: StratumReport) -> list[str]:
    """report.md's pass@k table of one stratum: base, base at its best temperature, trained, change, F."""
    lines = [f"| {stratum_name(s.name)} | base | base at T = {s.best.temperature:g} | trained | change | "
             "F at the trained pass@1 |", "|---|---:|---:|---:|---:|---:|"]
    for k in s.base:
        lines.append(f"| pass@{k} | {cell(s.base[k])} | {cell(s.at_best[k])} | {cell(s.trained[k])} | "
                     f"{cell(s.change[k], signed=True)} | {_pct(s.frontier[k])} |")
    lines += ["", "| Δ_F | " + " | ".join(f"k = {k}" for k in s.delta_f) + " |", "|---|" + "---:|" * len(s.delta_f),
              "| trained − F | " + " | ".join(interval_cell(iv) for iv in s.delta_f.values()) + " |"]
    if s.mass:
        lines += ["", "| strategy mass | before | after | change |", "|---|---:|---:|---:|"]
        lines += [f"| {label} | {cell(b)} | {cell(a)} | {cell(d, signed=True)} |" for label, (b, a, d) in s.mass.items()]
    return lines


def caption(report: ExactHeldout) -> str:
    """What the numbers and intervals are, in one line."""
    edge = [stratum_name(s.name) for s in report.strata.values() if s.best_at_edge]
    note = f"; the best temperature is the grid's lowest on {', '.join(edge)}: F may continue below it" if edge else ""
    return ("Exact pass@k (teacher-forced gold completions), % [95 % interval]: bootstrap over the stratum's problems, "
            "change paired by problem; base at T: the base at the temperature of its best pass@1; F: the base's "
            "temperature frontier at the trained model's pass@1; Δ_F's interval: t over the problems" + note)


def markdown(report: ExactHeldout, sentence: str) -> str:
    """report.md's section: the sentence first, then each stratum's tables and the caption."""
    lines = [f"**{sentence}**"]
    for s in report.strata.values():
        lines += ["", f"### Exact held-out: {stratum_name(s.name)} ({s.problems} problems)", "", *_table(s)]
    return "\n".join(lines) + f"\n\n{caption(report)}\n"


def _console_row(s: StratumReport, k: int) -> str:
    delta = f"  Δ_F {interval_cell(s.delta_f[k])}" if k in s.delta_f else ""
    at_best = f"T={s.best.temperature:g} {cell(s.at_best[k])}"
    return (f"  pass@{k:<4d} base {cell(s.base[k])}  {at_best}  trained {cell(s.trained[k])}  "
            f"change {cell(s.change[k], signed=True)}{delta}")


def _mass_line(mass: dict[str, tuple[Estimate, Estimate, Estimate]]) -> str:
    return "  mass " + "  ".join(f"{label} {_pct(b.value)} → {_pct(a.value)} ({cell(d, signed=True)})"
                                 for label, (b, a, d) in mass.items())


def console_lines(report: ExactHeldout, sentence: str) -> list[str]:
    """The console's lines: the sentence, then per stratum its rows at the Δ_F k (base, base at its best
    temperature, trained, change, Δ_F) and the strategy mass."""
    lines = [sentence]
    for s in report.strata.values():
        lines.append(f"{stratum_name(s.name)} ({s.problems} problems, exact, % [95 % interval]):")
        lines += [_console_row(s, k) for k in report.delta_ks if k in s.base]
        if s.mass:
            lines.append(_mass_line(s.mass))
    return lines
