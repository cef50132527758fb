"""The held-out sections of a compare report: the pass@k table with the base and the reference policies, where
pass@k cannot show narrowing or sits at its ceiling, the paired-difference tables (vs the baseline, the base and
the format-only oracle, each with its Holm-adjusted table), and exact − sampled pass@k."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from grae.compare.results import StudyResults
from grae.compare.stats import (
    Interval,
    difference_interval,
    holm_intervals,
    interval_text,
    n_note,
    p_text,
    paired_differences,
    proportion_interval,
    two_level_bootstrap,
)
from grae.eval.stats import passk_estimates, per_problem_passk


def base_passk(results: StudyResults, ks) -> dict[int, Interval] | None:
    """The base model's held-out pass@k with its interval over problems; None when the study has no base rows."""
    if results.base is None:
        return None
    return dict(zip(ks, proportion_interval(per_problem_passk(results.base, ks)[None])))


def heldout_table(results: StudyResults, per_method: dict[str, dict[int, Interval]], base: dict[int, Interval] | None,
                  ks) -> list[str]:
    """The held-out pass@k table: the base and the reference policies (when there is a base), every method,
    and below it the k at which pass@k cannot show narrowing or is at its ceiling."""
    lines = [
        "## Held-out pass@k after training (%; mean [95% CI])",
        "",
        "| method | " + " | ".join(f"pass@{k}" for k in ks) + " |",
        "|---|" + "---|" * len(ks),
    ]
    if base:
        lines.append("| base model | " + " | ".join(interval_text(base[k]) for k in ks) + " |")
        lines += reference_rows(results, ks)
    for m, r in per_method.items():
        lines.append(f"| {m} | " + " | ".join(interval_text(r[k]) for k in ks) + " |")
    if base:
        lines += large_k_lines(results, base, ks)
    return lines


@dataclass
class Paired:
    """A held-out report's paired-difference sections and what summary.json records of them."""

    vs_baseline: dict[str, dict[int, Interval]] = field(default_factory=dict)
    vs_base: dict[str, dict[int, Interval]] = field(default_factory=dict)
    vs_oracle: dict[str, dict[int, Interval]] = field(default_factory=dict)
    #: the Holm-adjusted tables, by section key (``vs_baseline``, ``vs_base``, ``vs_oracle``)
    holm: dict[str, dict] = field(default_factory=dict)
    lines: list[str] = field(default_factory=list)


def paired_sections(results: StudyResults, finals: dict, ks) -> Paired:
    """Every trained arm paired per problem against the baseline, and, as the study's ``paired_against`` asks
    and its base rows allow, against the base model and the format-only oracle."""
    study = results.study
    paired = Paired()
    values = {m: paired_differences(c, finals[study.baseline], ks) for m, c in finals.items() if m != study.baseline}
    paired.vs_baseline = intervals_of(values, ks)
    if paired.vs_baseline:
        paired.lines += paired_section(f"Paired difference vs {study.baseline}", [], values, ks, paired.holm,
                                       "vs_baseline")
    if results.base is None:
        return paired
    if "base" in study.paired_against:
        values = {m: paired_differences(c, dict.fromkeys(c, results.base), ks) for m, c in finals.items()}
        paired.vs_base = intervals_of(values, ks)
        paired.lines += paired_section("Paired difference vs the base model", [
            "Each seed's per-problem pass@k minus the base model's on the same problem (the base is evaluated "
            "once: its samples are shared by every seed)."], values, ks, paired.holm, "vs_base")
    if "oracle" in study.paired_against:
        paired.vs_oracle, oracle_lines = oracle_section(results, ks, paired.holm)
        paired.lines += oracle_lines
    return paired


def intervals_of(values: dict[str, np.ndarray], ks) -> dict[str, dict[int, Interval]]:
    """``{arm: [seeds, problems, ks] differences}`` → ``{arm: {k: crossed interval}}`` (at n where the cells agree
    exactly: :func:`grae.compare.stats.difference_interval`)."""
    return {m: dict(zip((int(k) for k in ks), difference_interval(v))) for m, v in values.items()}


def paired_section(title: str, explanation: list[str], values: dict[str, np.ndarray], ks, holm: dict[str, dict],
                   key: str, fixed: dict[str, np.ndarray] | None = None) -> list[str]:
    """A paired-difference table (``values``: trained arms; ``fixed``: fixed references, one "seed"), and
    when it compares several trained arms their Holm-adjusted table (recorded in ``holm[key]``)."""
    header = ["| method | " + " | ".join(f"pass@{k}" for k in ks) + " |", "|---|" + "---|" * len(ks)]
    lines = ["", f"## {title} (points; mean [95% CI], p = one-sided t probability of the other sign)", "",
             *([" ".join(explanation), ""] if explanation else []), *header]
    lines += [difference_row(m, d, ks) for m, d in intervals_of({**values, **(fixed or {})}, ks).items()]
    if len(values) >= 2:
        adjusted = holm_intervals(values, ks)
        holm[key] = {m: {str(k): vars(iv) for k, iv in d.items()} for m, d in adjusted.items()}
        lines += ["", f"Holm-adjusted over the {len(values)} trained arms (one family per k): each interval is at its "
                  "Holm step's level, so it excludes 0 exactly where the adjusted two-sided p is below 0.05 "
                  "(grae.compare.stats.holm_intervals).", "", *header]
        lines += [f"| {m} | " + " | ".join(f"{difference(d[k])} "
                                           f"{p_text(d[k].p_holm, 'p_holm')}" for k in ks) + " |" for m, d in adjusted.items()]
    return lines


def oracle_section(results: StudyResults, ks, holm: dict[str, dict]) -> tuple[dict[str, dict[int, Interval]], list[str]]:
    """Every trained arm, the base and the other reference policies paired per problem against the base's
    format-only oracle (``paired_against: oracle``; grae.eval.exact.reference_counts)."""
    references = dict(results.references)
    oracle = references.pop("format-only oracle")
    values = {m: paired_differences(c, dict.fromkeys(c, oracle), ks) for m, c in ((m, results.finals(m)) for m in results.jobs)}
    fixed = {name: paired_differences({0: c}, {0: oracle}, ks)
             for name, c in {"base model": results.base, **{f"reference: {n}": c for n, c in references.items()}}.items()}
    lines = paired_section("Paired difference vs the format-only oracle", [
        "Each seed's per-problem pass@k minus the format-only oracle's on the same problem: the base with every "
        "answer outside the enumerated format deleted and the rest renormalised (p / mass; grae.eval.exact). An arm "
        "below it learned less than deleting the format would give. The base and the references are single fixed "
        "policies: their intervals are over problems only."], values, ks, holm, "vs_oracle", fixed)
    return intervals_of({**values, **fixed}, ks), lines


def exact_sampled_lines(results: StudyResults, ks) -> list[str]:
    """With exact rows: exact − sampled pass@k where the same model was also sampled (the base's shared
    evaluation, the jobs' own ``eval/after.jsonl``), and the bound the enumerated mass puts on the gap."""
    if not (results.study.eval or {}).get("exact"):
        return []
    lines = ["", "## Exact − sampled pass@k (points)", "",
             "Exact pass@k teacher-forces the canonical answer string only; a sample the verifier accepts in another "
             "form (other tokenisation, spacing) counts in sampled pass@k and not here, so exact is a lower bound. "
             "Upper bound of the gap: pass@k with the whole mass outside the enumerated set counted correct.", ""]
    header = ["| model | " + " | ".join(f"pass@{k}" for k in ks) + " |", "|---|" + "---|" * len(ks)]
    rows: list[str] = []
    exact = results.base_files.get("frontier.jsonl")
    if exact is not None:
        sampled = results.base_files.get("before.jsonl")
        if sampled is not None:
            rows.append(gap_row("base model: exact − sampled", {0: exact}, {0: sampled}, ks))
        rows.append(bound_row("base model: bound from the mass outside the set", exact, ks))
    for method, by_seed in results.jobs.items():
        sampled_by_seed = {seed: job.sampled for seed, job in by_seed.items() if job.sampled is not None}
        if sampled_by_seed:
            rows.append(gap_row(f"{method}: exact − sampled", results.finals(method), sampled_by_seed, ks))
    if not any(": exact − sampled" in r for r in rows):
        lines += ["Not measured in this study: no model here was also sampled (the jobs ran with `eval.enabled: false` "
                  "and the base has no sampled evaluation); the bound below is all the rows give.", ""]
    return lines + header + rows + [""]


def gap_row(label: str, exact: dict, sampled: dict, ks) -> str:
    usable = [k for k in ks if all(int(c.n.min()) >= k for c in sampled.values())]
    gaps = dict(zip(usable, two_level_bootstrap(paired_differences(exact, sampled, usable)))) if usable else {}
    return f"| {label} | " + " | ".join(difference(gaps[k])
                                        if k in gaps else "–" for k in ks) + " |"


def bound_row(label: str, exact, ks) -> str:
    if exact.mass is None:
        return f"| {label} | " + " | ".join("–" for _ in ks) + " |"
    upper = np.clip(exact.p + (1 - exact.mass), 0.0, 1.0)
    bound = [float(np.mean((1 - (1 - upper) ** k) - (1 - (1 - exact.p) ** k))) for k in ks]
    return f"| {label} | " + " | ".join(f"≤ {100 * b:.1f}" for b in bound) + " |"


def reference_rows(results: StudyResults, ks) -> list[str]:
    """Table rows of the reference policies (exact, no reasoning; grae.eval.exact) when the base model's
    rows are exact: the format-only oracle and the near-miss guesser. Empty for sampled rows."""
    out = []
    for name, ref in results.references.items():
        values = passk_estimates(ref, ks, bootstrap=0)
        out.append(f"| reference: {name} (exact) | " + " | ".join(f"{100 * values[k].value:.1f}" for k in ks) + " |")
    return out


#: points within which a guesser's pass@k lies of the base's where no arm can show narrowing
GUESSER_WITHIN = 15.0
#: the base's pass@k (points) from which a k is at its ceiling: no arm can rise above it there
CEILING = 99.0


def large_k_lines(results: StudyResults, base: dict[int, Interval], ks) -> list[str]:
    """Below the held-out table: the k > 1 at which a reference with no computation (every reference policy but the
    format-only oracle, which is the base renormalised) lies within GUESSER_WITHIN points of the base's pass@k.
    There pass@k cannot show narrowing: a method would have to fall below what guessing reaches. Before it, the k
    at which the base's pass@k is at least CEILING: no method can rise above it there. Empty when neither holds."""
    close: dict[int, list[str]] = {}
    for name, ref in results.references.items():
        if name == "format-only oracle":
            continue
        values = passk_estimates(ref, ks, bootstrap=0)
        for k in ks[1:] if ks[0] == 1 else ks:  # narrowing is a loss at k > 1 (pass@1 is what RL raises)
            if 100 * (base[k].mean - values[k].value) <= GUESSER_WITHIN:
                close.setdefault(k, []).append(f"{name} {100 * values[k].value:.1f}")
    ceiling = [k for k in ks if 100 * base[k].mean >= CEILING]
    lines = ["", f"**pass@k is at its ceiling at k = {', '.join(map(str, ceiling))}**: the base reaches "
             + ", ".join(f"{100 * base[k].mean:.1f}" for k in ceiling) + f" there (≥ {CEILING:.0f}), so no method can "
             "rise above it and an interval that holds a margin there says little."] if ceiling else []
    if not close:
        return lines
    return lines + ["", f"**pass@k cannot show narrowing at k = {', '.join(map(str, sorted(close)))}**: there a reference with "
            f"no computation lies within {GUESSER_WITHIN:.0f} points of the base ("
            + "; ".join(f"k = {k}: base {100 * base[k].mean:.1f}, {', '.join(close[k])}" for k in sorted(close))
            + "), so a method's pass@k − base there says \"cannot show narrowing\", not \"did not narrow\"."]


def difference(iv: Interval) -> str:
    """``+3.0 [-35.1, +41.1]``: a difference of two proportions in points, its interval shown inside [−100, +100]
    (the range of such a difference; at 2 seeds t_1 = 12.7 can reach past it). Only the display: p, Holm and the
    decision rules read the interval as computed."""
    return f"{100 * iv.mean:+.1f} [{100 * max(iv.lo, -1.0):+.1f}, {100 * min(iv.hi, 1.0):+.1f}]" + n_note(iv.n_eff)


def difference_row(method: str, d: dict[int, Interval], ks) -> str:
    return f"| {method} | " + " | ".join(f"{difference(d[k])} {p_text(d[k].p_opposite)}" for k in ks) + " |"
