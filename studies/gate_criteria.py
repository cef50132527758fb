"""The testbed gate's criteria (the rule is in the design file, e.g. studies/design/gate_r3.yaml).

Two steps, each writing JSON and a markdown table under ``--out``:

    python studies/gate_criteria.py base   studies/design/gate_r3.yaml --out studies/reports/gate_r3
    python studies/gate_criteria.py report studies/design/gate_r3.yaml --out studies/reports/gate_r3

``base`` (before any training; fixes the deciding k). On the design's held-out problems, with every candidate
answer teacher-forced (:class:`grae.eval.exact.CandidateScorer`, T = 1, top_p = 1):

- the base's exact pass@k and its **format-only oracle** (p / enumerated mass per problem) — criterion a;
- the **near-miss guesser** with ``w`` = the base's own error spread: the median of |a − gold| over the base's
  wrong-answer mass, pooled over problems; uniform on the set's answers within ± w of the gold answer;
- the **answer-prior guesser**: draws answers from the training problems' answer distribution, so
  p = frequency of the gold answer among the (first seed's) training answers — criterion b with the above;
- the **sharpening reference**: the base at its best temperature, picked by exact pass@1 on training problems;
- a **sampled check**: n = 256 samples on the first 100 held-out problems, beside the exact pass@k there;
- the **deciding k**: the largest k in (16, 64, 256) at which base pass@k ≤ 90 and both guessers are ≥ 15
  points below the base (none: criterion b fails).

``report`` (after ``grae compare`` of the design): GRPO − oracle at pass@1 and at the deciding k, paired per
problem with the crossed seeds × problems interval (:mod:`grae.compare.stats`), the train − held-out pass@1
gap (training reward over the last 10 % of steps, :func:`grae.eval.diagnostics.train_pass1`), and the verdict
on a, b and c by the design's rule.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
from gate_common import KS, answer_index, candidate_probs, load_model, passk_curve, policy_rows, study_setup

DECIDING_KS = (16, 64, 256)
TEMPERATURES = (0.5, 0.7, 1.0)
SAMPLED_PROBLEMS, SAMPLED_N = 100, 256
TEMPERATURE_PROBLEMS = 200


def error_spread(probs: np.ndarray, gold_index: np.ndarray, values: np.ndarray) -> dict[str, float]:
    """How far the base's mistakes lie from the gold answer: the mean and the median of |a − gold| over its
    wrong-answer mass, pooled over problems (each problem's wrong mass weighs 1)."""
    gold = values[gold_index]  # [P]
    dist = np.abs(values[None, :] - gold[:, None]).ravel()  # [P·C]
    wrong = probs.copy()  # [P, C]
    wrong[np.arange(len(gold)), gold_index] = 0.0
    weights = (wrong / np.maximum(wrong.sum(axis=1, keepdims=True), 1e-30)).ravel() / len(gold)
    order = np.argsort(dist, kind="stable")
    median = dist[order][np.searchsorted(np.cumsum(weights[order]), 0.5)]
    return {"mean": float((dist * weights).sum()), "median": float(median),
            "share_at_1": float(weights[dist == 1].sum())}


def near_miss(gold_index: np.ndarray, answers: list[str], w: int) -> np.ndarray:
    """p(correct) per problem of the guesser uniform on the set's answers within ± w of the gold answer."""
    from grae.eval.exact import near_miss_p

    return np.array([near_miss_p(answers[g], answers, w) for g in gold_index])


def base_step(design: Path, out: Path, limit: int | None = None) -> dict[str, Any]:
    from grae.eval.runner import evaluate

    study, cfg, task = study_setup(design)
    model, tok = load_model(cfg.model)
    heldout = task.heldout(study.eval["num_problems"] if study.eval else 600)[:limit]
    train = task.train(cfg.task.train_size, seed=study.seeds[0])
    answers, values, index, gold_index = answer_index(task, heldout)
    rows = np.arange(len(heldout))

    probs = candidate_probs(model, tok, task, heldout, 1.0)  # [P, C]
    p = probs[rows, gold_index]
    mass = probs.sum(axis=1)
    oracle = np.where(mass > 0, p / np.maximum(mass, 1e-30), 0.0)
    spread = error_spread(probs, gold_index, values)
    w, w_median = int(np.ceil(spread["mean"])), int(spread["median"])
    near = near_miss(gold_index, answers, w)
    train_answers = [str(e["answer"]).strip() for e in train]
    freq = {a: train_answers.count(a) / len(train_answers) for a in set(train_answers)}
    prior = np.array([freq.get(answers[g], 0.0) for g in gold_index])

    # the sharpening reference: best temperature by exact pass@1 on training problems, then on held-out
    sub = train[:min(TEMPERATURE_PROBLEMS, limit or TEMPERATURE_PROBLEMS)]
    sub_gold = np.array([index[str(e["answer"]).strip()] for e in sub])
    by_t = {t: float(100 * candidate_probs(model, tok, task, sub, t)[np.arange(len(sub)), sub_gold].mean())
            for t in TEMPERATURES}
    best_t = max(by_t, key=lambda t: by_t[t])
    p_best = p if best_t == 1.0 else candidate_probs(model, tok, task, heldout, best_t)[rows, gold_index]

    # sampled check on the first 100 held-out problems
    first = heldout[:min(SAMPLED_PROBLEMS, limit or SAMPLED_PROBLEMS)]
    sampled = evaluate(model, tok, first, task, n=SAMPLED_N, temperature=1.0, top_p=1.0,
                       max_tokens=cfg.eval.max_tokens, batch_size=512, seed=0)
    sampled_curve = {int(k): float(100 * v) for k, v in sampled.curve.items()}

    near_name, prior_name = f"near-miss guesser (w = {w}: the base's mean |error|)", "answer-prior guesser (training answers)"
    table = {"base (exact)": passk_curve(p), "format-only oracle": passk_curve(oracle),
             near_name: passk_curve(near), prior_name: passk_curve(prior),
             f"base at its best temperature (T = {best_t})": passk_curve(p_best),
             f"(not a criterion) near-miss guesser, w = {w_median} (the base's median |error|)":
                 passk_curve(near_miss(gold_index, answers, w_median))}
    base_curve, near_curve, prior_curve = table["base (exact)"], table[near_name], table[prior_name]
    deciding = [k for k in DECIDING_KS if base_curve[k] <= 90 and base_curve[k] - near_curve[k] >= 15
                and base_curve[k] - prior_curve[k] >= 15]
    result = {
        "design": str(design), "model": cfg.model, "problems": len(heldout), "candidates": len(answers),
        "mass_min": float(mass.min()), "mass_mean": float(mass.mean()), "error_spread": spread, "near_miss_w": w,
        "temperature_pass1_on_training": by_t, "best_temperature": best_t, "table": table,
        "sampled_check": {"problems": len(first), "n": SAMPLED_N, "sampled": sampled_curve,
                          "exact": passk_curve(p[:len(first)])},
        "deciding_k": max(deciding) if deciding else None,
        "criterion_a_base": {k: abs(table["format-only oracle"][k] - base_curve[k]) for k in KS},
    }
    out.mkdir(parents=True, exist_ok=True)
    (out / "base.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "base.md").write_text(base_markdown(result))
    return result


def base_markdown(r: dict[str, Any]) -> str:
    ks = (1, 16, 64, 256)
    lines = [f"## The base alone ({r['model']}; {r['problems']} held-out problems × {r['candidates']} candidate "
             "answers, exact, T = 1)", "", *policy_rows(r["table"], ks)]
    s = r["sampled_check"]
    sp = r["error_spread"]
    lines += ["", f"The base's wrong-answer mass lies at mean |a − gold| {sp['mean']:.2f}, median {sp['median']:.0f}; "
              f"{100 * sp['share_at_1']:.1f} % of it at ± 1.",
              f"Enumerated mass: mean {r['mass_mean']:.4f}, min {r['mass_min']:.4f} (1 − mass is outside the "
              "answer format).", f"Exact pass@1 on {TEMPERATURE_PROBLEMS} training problems by temperature: "
              + ", ".join(f"T = {t}: {v:.1f}" for t, v in r["temperature_pass1_on_training"].items()) + ".",
              f"Sampled check ({s['problems']} problems × n = {s['n']}): "
              + ", ".join(f"pass@{k} sampled {s['sampled'][k]:.1f} vs exact {s['exact'][k]:.1f}"
                          for k in (1, 16, 64, 256) if k in s["sampled"]) + ".",
              f"**Deciding k: {r['deciding_k']}** (largest k in {DECIDING_KS} with base ≤ 90 and both guessers "
              "≥ 15 points below the base).", ""]
    return "\n".join(lines)


def final_sampled_check(job, cfg, counts, question_ids, ks) -> dict[str, Any]:
    """The first seed's final model sampled n = 256 on the first 100 held-out problems, beside its exact
    pass@k on the same problems (the exact - sampled gap at the deciding k)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grae.data import get_task
    from grae.eval.runner import evaluate
    from grae.eval.stats import per_problem_passk

    torch.set_num_threads(1)
    task = get_task(cfg.task.name, **cfg.task.params)
    first = task.heldout(len(question_ids))[:SAMPLED_PROBLEMS]
    path = job.output_dir / "final"
    model, tok = AutoModelForCausalLM.from_pretrained(path).eval(), AutoTokenizer.from_pretrained(path)
    sampled = evaluate(model, tok, first, task, n=SAMPLED_N, temperature=1.0, top_p=1.0,
                       max_tokens=cfg.eval.max_tokens, batch_size=512, seed=0)
    exact = per_problem_passk(counts.subset([str(e["question_id"]) for e in first]), ks).mean(axis=0)
    return {"seed": job.seed, "problems": len(first), "n": SAMPLED_N,
            "sampled": {k: float(100 * sampled.curve[k]) for k in ks},
            "exact": {k: float(100 * v) for k, v in zip(ks, exact)}}


def report_step(design: Path, out: Path) -> dict[str, Any]:
    """GRPO against the base's format-only oracle, paired per problem, and the verdict by the design's rule."""
    from grae.compare.frontier import curve_path, rows_path
    from grae.compare.stats import crossed_interval
    from grae.eval.diagnostics import train_pass1
    from grae.eval.exact import reference_counts
    from grae.eval.records import read_rows
    from grae.eval.stats import count_problems, per_problem_passk
    from grae.train.rundir import read_metrics

    study, cfg, _ = study_setup(design)
    base = json.loads((out / "base.json").read_text())
    k = base["deciding_k"]
    ks = [1] + ([k] if k else [])
    base_counts = count_problems(read_rows(study.output_dir / "base" / "frontier.jsonl"))
    oracle = reference_counts(base_counts)["format-only oracle"]
    jobs = [j for j in study.jobs() if curve_path(rows_path(j.output_dir, cfg.max_steps)).exists()]
    per_seed = [count_problems(read_rows(rows_path(j.output_dir, cfg.max_steps))) for j in jobs]
    diffs = np.stack([per_problem_passk(c.subset(oracle.question_ids), ks) - per_problem_passk(oracle, ks)
                      for c in per_seed])  # [S, P, K]
    grpo = np.stack([per_problem_passk(c.subset(oracle.question_ids), ks) for c in per_seed])  # [S, P, K]
    vs_oracle = crossed_interval(100 * diffs) if len(per_seed) >= 2 else []
    gaps = [train_pass1(read_metrics(j.output_dir / "metrics.jsonl")) - float(c.p.mean())
            for j, c in zip(jobs, per_seed)]
    complete = len(per_seed) == len(study.seeds)
    sampled_check = final_sampled_check(jobs[0], cfg, per_seed[0], oracle.question_ids, ks) if jobs else None
    a_pass = all(v <= 1 for key, v in base["criterion_a_base"].items() if int(key) in ks)
    b_pass = k is not None
    c_pass = bool(vs_oracle) and vs_oracle[0].lo > 3 and float(np.mean(gaps)) < 0.05
    result = {
        "design": str(design), "seeds_done": [j.seed for j in jobs], "complete": complete, "deciding_k": k,
        "grpo": {kk: float(100 * grpo[:, :, i].mean()) for i, kk in enumerate(ks)},
        "grpo_per_seed_pass1": [float(100 * grpo[s, :, 0].mean()) for s in range(len(per_seed))],
        "grpo_minus_oracle": {kk: vars(iv) for kk, iv in zip(ks, vs_oracle)},
        "train_minus_heldout_pass1": [100 * g for g in gaps],
        "sampled_check_first_seed": sampled_check,
        "criteria": {"a": a_pass, "b": b_pass, "c": c_pass},
        "gate": "passes" if (a_pass and b_pass and c_pass and complete) else "fails",
    }
    (out / "report.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def attempt_row(name: str, design: str, out: Path, note: str, c_earlier: str = "") -> str:
    """One row of the attempts table from ``<out>/base.json`` (and ``<out>/report.json`` when it trained)."""
    base = json.loads((out / "base.json").read_text())
    k = base["deciding_k"]
    curve = base["table"]
    names = list(curve)
    b_cells = "; ".join(f"{n.split(' (')[0]} {curve[n][str(kk)]:.1f}" for n in names[:4] for kk in [k or 16])
    a_gap = max(base["criterion_a_base"][str(kk)] for kk in ([1, k] if k else [1]))
    sharp = next(n for n in names if n.startswith("base at its best temperature"))
    row = [name, f"`{design}`", f"{a_gap:.1f} ({'pass' if a_gap <= 1 else 'FAIL'})",
           f"k = {k if k else 'none'} ({'pass' if k else 'FAIL'}): {b_cells} at k = {k or 16}",
           f"{curve[names[0]]['1']:.1f} → {curve[sharp]['1']:.1f} ({sharp.split('(')[1].rstrip(')')})"]
    if (out / "report.json").exists():
        rep = json.loads((out / "report.json").read_text())
        iv = rep["grpo_minus_oracle"].get("1")
        c = (f"GRPO − oracle pass@1 {iv['mean']:+.1f} [{iv['lo']:+.1f}, {iv['hi']:+.1f}], gap "
             f"{np.mean(rep['train_minus_heldout_pass1']):+.1f}; {len(rep['seeds_done'])} seeds"
             f" ({'pass' if rep['criteria']['c'] else 'FAIL'})") if iv else "not trained"
        verdict = rep["gate"]
    else:
        c, verdict = c_earlier or "not trained (a or b failed)", "fails"
    return "| " + " | ".join(row + [c, f"**{verdict}**", note]) + " |"


#: every attempt at the gate, in order: (name, design, output folder, what it changed and why[, criterion c as
#: measured by an earlier study])
ATTEMPTS = [
    ("R1 (regime)", "studies/design/pkpo_candidate_r1.yaml", "studies/reports/gate_attempts/r1",
     "the v2 tiny (a `~` guess mode on half its SFT targets), 64 problems x 100 epochs; GRPO numbers from "
     "studies/reports/pkpo_candidate_r1 (5 seeds, 400 steps)",
     "GRPO 20.1 vs oracle 27.1 (below in 5 of 5 seeds); memorised: train 72.6 vs held-out 23.6 (FAIL)"),
    ("R2 (regime2)", "studies/design/gate_exact.yaml", "studies/reports/gate_attempts/r2",
     "tiny-ladder (clean stage 1 on 2-4 terms), 8,000 problems; GRPO ran 0.5 epoch x 2 seeds (a cut run: "
     "it can fail, never pass)",
     "GRPO − base +1.1 [−1.6, +3.8] at its best rate (lr 2e-5), oracle = base + 0.2: did not learn (FAIL)"),
    ("attempt 1 (R3)", "studies/design/gate_r3.yaml", "studies/reports/gate_r3",
     "ladder with constant-lr SFT (a base that tolerates lr 1e-4), 4,096 problems x 2 epochs"),
    ("attempt 2 (R4)", "studies/design/gate_r4.yaml", "studies/reports/gate_r4",
     "tiny-ladder + 600 steps whose targets were carry errors (+-10/+-20) on half the problems; the stage smeared the "
     "base's wrong answers over |offset| 8-24 (issue 45), so RL there repairs planted damage; GRPO lr 2e-5"),
]


TABLE_INTRO = """# The testbed gate: every attempt (issue 36)

Can a testbed pose "does estimator X keep pass@k while raising pass@1?" Each attempt's design, with its rule,
was committed before its runs (studies/design/gate_r3.yaml has the rule; attempt 2 reuses it). Criteria, all
exact pass@k by answer enumeration on the attempt's held-out problems (T = 1):
a. no removable format mode: the format-only oracle within 1 point of the base at pass@1 and the deciding k;
b. headroom guessing cannot reach: a deciding k in {16, 64, 256} with the base <= 90 and two guessers with no
   arithmetic >= 15 points below it (near-miss, uniform on gold +- w with w = the base's mean |error|;
   answer-prior, drawing from the training answers), fixed on the base alone before any training;
c. RL learns without memorising: GRPO - oracle at pass@1 with a 95 % lower bound > +3 (crossed seeds x
   problems interval, >= 4 seeds) and a train - held-out pass@1 gap < 5; "did not learn" fails the testbed.
An attempt whose base fails a or b ends there (no training spent). Regenerate this table with
`python studies/gate_criteria.py table`; each attempt's numbers are in its folder (base.md / base.json,
report.json). Machine: this project's 2-core CPU, one torch thread per job, shared with other jobs.

"""


def write_table(path: Path) -> str:
    header = ["| attempt | design | a: max |oracle − base| (points) | b: deciding k; base / near-miss / answer-prior "
              "at k | sharpening reference: base pass@1 → at its best T | c: GRPO − oracle at pass@1; "
              "train − held-out gap | gate | what it changed |",
              "|---|---|---|---|---|---|---|---|"]
    rows = [attempt_row(name, design, Path(out), *rest) for name, design, out, *rest in ATTEMPTS
            if (Path(out) / "base.json").exists()]
    text = TABLE_INTRO + "\n".join(header + rows) + "\n"
    path.write_text(text)
    return text


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("step", choices=("base", "report", "table"))
    ap.add_argument("design", type=Path, nargs="?")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--limit", type=int, default=None, help="first N problems of each set only (a quick check)")
    a = ap.parse_args(argv)
    if a.step == "table":
        print(write_table(a.out or Path("studies/reports/gate_attempts/README.md")))
    elif a.step == "base":
        r = base_step(a.design, a.out, a.limit)
        print((a.out / "base.md").read_text())
        print(f"deciding k: {r['deciding_k']}")
    else:
        print(json.dumps(report_step(a.design, a.out), indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
