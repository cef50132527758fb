"""Gate v2: can a testbed show GRPO narrowing pass@k at a large k, with nothing a guesser, a temperature change or a
repaired base could explain? Each attempt is a design file (studies/design/gate_v2_*.yaml) committed before its runs;
this script measures it by that file's rule.

    python studies/gate_v2.py base   studies/design/gate_v2_t1.yaml    # before training: references, k_L, S
    python studies/gate_v2.py train  studies/design/gate_v2_t1.yaml --seeds 500 501
    python studies/gate_v2.py report studies/design/gate_v2_t1.yaml    # after training: criteria c, d, e
    python studies/gate_v2.py table                                    # studies/reports/gate_v2/README.md

Reports go under ``--reports`` (studies/reports/gate_v2), one folder a design; runs under ``--runs`` (runs/gate_v2).

Every pass@k is exact: the task has one correct completion per problem (``chain_trace``: every running total,
process-verified), so a sample is correct with probability ``p = π(" " + gold + EOS | prompt)`` under the sampling
distribution (T, top_p = 1), teacher-forced, and pass@k = mean over problems of 1 − (1 − p)^k. Other tokenizations of
the gold line and text after it are outside ``p``; the sampled check prints how much that is.

``base`` (on the base alone, before any training) writes ``base.json``/``base.md``: the trace instrument
(:func:`gate_common.trace_instrument`): the base's exact pass@k and its format-only oracle (criterion a); the
near-miss guesser, the answer-prior guesser and the base's own wrong answers, references with no computation
(criterion b); the base at its best temperature and the models the base was derived from; the deciding ``k_L``
(the largest k in (64, 128, 256) with base pass@k ≤ 90 and every reference ≤ 10); the declared subset ``S`` of
rarely solved held-out problems; a sampled check.

``report`` reads each seed's final model, computes exact p per problem, and decides by the design's rule
(crossed seeds × problems intervals, :func:`grae.compare.stats.crossed_interval`):
c: GRPO − (oracle, best-T base, every derived-from model) at pass@1, lower bound > +3 for each, and a train −
held-out pass@1 gap < 5; d: GRPO − base at k_L upper bound < −2 (held-out, or S); e: ≤ 25 core-minutes per run
(the training process's CPU time, user + system: the core-minutes it used, whatever else shared its core). With
fewer seeds than the design's (a pilot), a criterion can only fail: when its interval lies wholly on the failing
side; anything else reads "undecided (pilot)".
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from gate_common import Dirs, fmt, gold_probs, grae_train, load_model, passk_curve, task_of, trace_instrument, verdict
from gate_common import load_design as read_design

REPORTS = Path("studies/reports/gate_v2")
RUNS = Path("runs/gate_v2")
#: the keys every gate v2 design names
DESIGN_KEYS = ("name", "train", "seeds", "rule")


def load_design(path: Path) -> dict[str, Any]:
    return read_design(path, DESIGN_KEYS)


def per_problem_passk(p: np.ndarray, ks) -> np.ndarray:
    """``[P, K]`` exact pass@k per problem."""
    return 1 - (1 - np.clip(p, 0, 1))[:, None] ** np.asarray(ks)[None, :]


def exact_p(model, tok, examples) -> np.ndarray:
    """``[P]`` exact probability of the one gold completion at T = 1 (``chain_trace``'s)."""
    from grae.data import get_task

    return gold_probs(model, tok, examples, get_task("chain_trace"), batch=128)


def base_step(design_path: Path, dirs: Dirs) -> dict[str, Any]:
    """The trace instrument on the design's base, under the design's report folder."""
    design = load_design(design_path)
    return trace_instrument(design, design_path, dirs.out(design))


def run_dir(design: dict[str, Any], seed: int, dirs: Dirs) -> Path:
    return dirs.run_root(design) / f"grpo_s{seed}"


def train_step(design_path: Path, seeds: list[int], dirs: Dirs) -> None:
    """``grae train`` of the design's config, one seed after another, one torch thread each."""
    design = load_design(design_path)
    cfg_path = dirs.run_root(design) / "train.yaml"
    cfg_path.parent.mkdir(parents=True, exist_ok=True)
    cfg_path.write_text(yaml.safe_dump(design["train"], sort_keys=False))
    for seed in seeds:
        grae_train(cfg_path, run_dir(design, seed, dirs), "--seed", str(seed))


def core_seconds(out: Path) -> float:
    """CPU seconds the run's process used (user + system, all threads: ``cpu_seconds``, written by
    :func:`gate_common.run_counting_cpu` from the child's resource usage), so a run sharing its core with other work is
    not charged for the wait; the training wall time (``eval/summary.json``) when it was not recorded."""
    recorded = out / "cpu_seconds"
    if recorded.exists():
        return float(recorded.read_text())
    summary = out / "eval" / "summary.json"
    return float(json.loads(summary.read_text())["train_seconds"]) if summary.exists() else float("nan")


def report_step(design_path: Path, dirs: Dirs) -> dict[str, Any]:
    """Criteria c, d and e on every finished seed (each final model's exact p cached in ``final_p.json``)."""
    from grae.compare.stats import crossed_interval
    from grae.eval.diagnostics import train_pass1
    from grae.train.rundir import read_metrics

    design = load_design(design_path)
    out = dirs.out(design)
    base = json.loads((out / "base.json").read_text())
    k_l = base["deciding_k"]
    task = task_of(design)
    heldout = task.heldout(base["problems"])
    stacked = np.load(out / "base_p.npy")
    p_base, p_oracle, p_best = stacked[0], stacked[1], stacked[2]
    derived = list(stacked[3:])
    done = [s for s in design["seeds"] if (run_dir(design, s, dirs) / "final").exists()]
    finals, gaps, minutes = [], [], []
    cache = out / "final_p.json"
    known = json.loads(cache.read_text()) if cache.exists() else {}
    for s in done:
        if str(s) not in known:
            model, tok = load_model(str(run_dir(design, s, dirs) / "final"))
            known[str(s)] = exact_p(model, tok, heldout).tolist()
            cache.write_text(json.dumps(known))
        finals.append(np.array(known[str(s)]))
        metrics = read_metrics(run_dir(design, s, dirs) / "metrics.jsonl")
        gaps.append(100 * (train_pass1(metrics) - float(np.mean(known[str(s)]))))
        minutes.append(core_seconds(run_dir(design, s, dirs)) / 60)
    complete = len(done) >= len(design["seeds"])
    ks = [1] + ([k_l] if k_l else [])
    grpo = np.stack([per_problem_passk(f, ks) for f in finals]) if finals else np.zeros((0, len(heldout), len(ks)))

    def diff(ref: np.ndarray, mask: np.ndarray | None = None):
        d = 100 * (grpo - per_problem_passk(ref, ks)[None])
        if mask is not None:
            d = d[:, mask]
        return crossed_interval(d) if len(finals) >= 2 else []

    refs = {"format-only oracle": p_oracle, f"base at T = {base['best_temperature']}": p_best,
            **{f"derived: {n}": q for n, q in zip(design.get("derived_from", []), derived)}}
    c_ivs = {n: diff(q)[0] for n, q in refs.items()} if len(finals) >= 2 else {}
    d_iv = diff(p_base)[1] if (k_l and len(finals) >= 2) else None
    s_ids = set(base["subset_S"]["question_ids"])
    mask = np.array([str(e["question_id"]) in s_ids for e in heldout])
    d_iv_s = diff(p_base, mask)[1] if (k_l and base["subset_S"]["used"] and len(finals) >= 2) else None

    c_pass = bool(c_ivs) and all(iv.lo > 3 for iv in c_ivs.values()) and np.mean(gaps) < 5
    c_fail = bool(c_ivs) and (any(iv.hi <= 3 for iv in c_ivs.values()) or (complete and not c_pass))
    d_ivs = [iv for iv in (d_iv, d_iv_s) if iv is not None]
    d_pass = any(iv.hi < -2 for iv in d_ivs)
    d_fail = bool(d_ivs) and (all(iv.lo >= -2 for iv in d_ivs) or (complete and not d_pass))
    e_pass = bool(minutes) and max(minutes) <= 25
    result = {
        "design": str(design_path), "seeds_done": done, "complete": complete, "deciding_k": k_l,
        "grpo": {k: float(100 * grpo[:, :, i].mean()) for i, k in enumerate(ks)} if finals else {},
        "grpo_per_seed": {str(s): passk_curve(f) for s, f in zip(done, finals)},
        "base": {k: base["table"]["base (exact)"][str(k)] for k in ks},
        "c_grpo_minus_reference_pass1": {n: vars(iv) for n, iv in c_ivs.items()},
        "d_grpo_minus_base_at_kL": vars(d_iv) if d_iv else None,
        "d_grpo_minus_base_at_kL_on_S": vars(d_iv_s) if d_iv_s else None,
        "train_minus_heldout_pass1": gaps, "training_minutes": minutes,
        "criteria": {"a": all(base["criterion_a"][str(k)] <= 1 for k in ks), "b": k_l is not None,
                     "c": verdict(c_pass, c_fail, complete), "d": verdict(d_pass, d_fail, complete),
                     "e": "pass" if e_pass else ("FAIL" if minutes else "not run")},
    }
    crit = result["criteria"]
    result["gate"] = "passes" if (crit["a"] and crit["b"] and crit["c"] == crit["d"] == crit["e"] == "pass") else (
        "fails" if (not crit["a"] or not crit["b"] or "FAIL" in (crit["c"], crit["d"], crit["e"])) else "undecided")
    (out / "report.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def attempt_row(design_path: Path, reports: Path) -> str:
    """The design's row of the attempts table, from its ``base.json`` (and ``report.json`` once trained)."""
    design = load_design(design_path)
    out = reports / design["name"]
    base = json.loads((out / "base.json").read_text())
    table, k_l = base["table"], base["deciding_k"]
    k_show = k_l or 64
    a = max(base["criterion_a"][str(k)] for k in (1, k_show))
    refs = "; ".join(f"{n.split(' (')[0]} {table[n][str(k_show)]:.1f}" for n in base["references"])
    sharp = next(n for n in table if n.startswith("base at its best"))
    derived = [n for n in table if n.startswith("derived from")]
    row = [design["name"], f"`{design_path}`", f"{a:.1f} ({'pass' if a <= 1 else 'FAIL'})",
           f"k_L = {k_l} ({'pass' if k_l else 'FAIL'}): base {table['base (exact)'][str(k_show)]:.1f}; {refs} at "
           f"k = {k_show}",
           f"{table['base (exact)']['1']:.1f} → {table[sharp]['1']:.1f} ({sharp.split('(')[1].rstrip(')')})",
           ", ".join(f"{n.split(': ')[1]} {table[n]['1']:.1f} / {table[n][str(k_show)]:.1f}" for n in derived)
           or "none (built from scratch)"]
    if (out / "report.json").exists():
        rep = json.loads((out / "report.json").read_text())
        cr = rep["criteria"]
        c_cells = "; ".join(f"− {n.split(' (')[0]} {fmt(iv, 1)}" for n, iv in rep["c_grpo_minus_reference_pass1"].items())
        gap = np.mean(rep["train_minus_heldout_pass1"]) if rep["train_minus_heldout_pass1"] else float("nan")
        if len(rep["seeds_done"]) < 2:  # no interval: say what finished
            per_seed = "; ".join(f"seed {s}: pass@1 {c['1']:.1f}, pass@{k_show} {c[str(k_show)]:.1f}"
                                 for s, c in rep["grpo_per_seed"].items()) or "no seed finished (the pilot was cut)"
            c_cells = f"{per_seed}; no interval with {len(rep['seeds_done'])} seed(s)"
        head = f"GRPO pass@1 {rep['grpo']['1']:.1f}: " if rep["grpo"] else ""
        gap_cell = f"; gap {gap:+.1f}" if np.isfinite(gap) else ""
        row += [f"{head}{c_cells}{gap_cell} ({cr['c']})",
                f"GRPO − base at k_L {fmt(rep['d_grpo_minus_base_at_kL'], 1)}; on S {fmt(rep['d_grpo_minus_base_at_kL_on_S'], 1)}"
                f" ({cr['d']})",
                f"{max(rep['training_minutes']):.1f} core-min ({cr['e']})" if rep["training_minutes"] else "—",
                f"{len(rep['seeds_done'])} of {len(design['seeds'])}", f"**{rep['gate']}**"]
    else:
        row += ["not trained", "—", "—", "0", "**fails**" if not (k_l and a <= 1) else "**undecided**"]
    row.append(design.get("changed", ""))
    return "| " + " | ".join(row) + " |"


def write_table(reports: Path) -> str:
    """``README.md`` under ``reports``: the introduction, a row per measured design, the analysis."""
    header = ["| attempt | design | a: max |oracle − base| | b: k_L; base and references at k_L | sharpening: base "
              "pass@1 → best T | derived-from models pass@1 / pass@k_L | c: GRPO pass@1 − references (lower bound "
              "> +3); train − held-out gap | d: GRPO − base at k_L (upper bound < −2) | e: cost per run | seeds | "
              "gate | what it changed |", "|" + "---|" * 12]
    rows = [attempt_row(p, reports) for p in sorted(Path("studies/design").glob("gate_v2_*.yaml"))
            if (reports / load_design(p)["name"] / "base.json").exists()]
    here = Path(__file__).parent
    text = ((here / "gate_v2_intro.md").read_text() + "\n".join(header + rows) + "\n"
            + (here / "gate_v2_analysis.md").read_text())
    (reports / "README.md").write_text(text)
    return text


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("step", choices=("base", "train", "report", "table"))
    ap.add_argument("design", type=Path, nargs="?")
    ap.add_argument("--seeds", type=int, nargs="*")
    Dirs.arguments(ap, REPORTS, RUNS)
    a = ap.parse_args(argv)
    dirs = Dirs(a.reports, a.runs)
    if a.step == "table":
        print(write_table(dirs.reports))
    elif a.step == "base":
        base_step(a.design, dirs)
    elif a.step == "train":
        train_step(a.design, a.seeds or load_design(a.design)["seeds"], dirs)
    else:
        print(json.dumps(report_step(a.design, dirs), indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
