"""Gate v2 (issue 45 §1): can a testbed show GRPO narrowing pass@k at a large k, with nothing a guesser, a
temperature change or a repaired base could explain? Each attempt is a design file (studies/design/gate_v2_*.yaml)
committed before its runs; this script measures it by that file's rule.

    python studies/gate_v2.py base   studies/design/gate_v2_t1.yaml    # before training: references, k_L, S
    python studies/gate_v2.py train  studies/design/gate_v2_t1.yaml --seeds 500 501
    python studies/gate_v2.py report studies/design/gate_v2_t1.yaml    # after training: criteria c, d, e
    python studies/gate_v2.py table                                    # studies/reports/gate_v2/README.md

Every pass@k is exact: the task has one correct completion per problem (``chain_trace``: every running total,
process-verified), so a sample is correct with probability ``p = π(" " + gold + EOS | prompt)`` under the sampling
distribution (T, top_p = 1), teacher-forced, and pass@k = mean over problems of 1 − (1 − p)^k. Other tokenizations of
the gold line and text after it are outside ``p``; the sampled check prints how much that is.

``base`` (on the base alone, before any training) writes ``base.json``/``base.md``:

- the base's exact pass@k; the **format-only oracle** ``p / m`` with ``m`` the share of the problem's samples
  (n = 64) whose first line is a well-formed trace (the right number of integers) — criterion a;
- references with no computation — criterion b: the **near-miss guesser**, each running total uniform on
  gold ± w_j (w_j = the base's mean |error| of total j over its wrong totals, rounded up), ``p = Π_j 1/(2 w_j + 1)``;
  the **answer-prior guesser** (the gold trace's frequency among the first seed's training traces); the **base's
  own wrong answers** (the gold trace's frequency among all the base's wrong sampled traces, pooled over problems: a
  guesser replaying the base's most likely mistakes with no look at the problem);
- the **sharpening reference**: the base at its best temperature (exact pass@1 on 200 training problems over
  T in 0.3 … 1.0), its held-out curve; the **models the base was derived from** (the design's ``derived_from``);
- the deciding ``k_L``: the largest k in (64, 128, 256) with base pass@k ≤ 90 and every reference ≤ 10;
- the declared subset ``S``: held-out problems whose base p lies in [1/1024, 1/16] (rarely solved, where large-k
  coverage lives), used for d only when it has ≥ 150 problems;
- a sampled check (the same samples): sampled pass@k beside exact on those problems.

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
import math
import os
import resource
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from gate_criteria import KS, passk_curve  # gate v1's exact pass@k curve (this folder is the script's sys.path[0])

from grae.yaml_io import load_yaml

DECIDING_KS = (64, 128, 256)
TEMPERATURES = (0.3, 0.5, 0.7, 1.0)
TEMPERATURE_PROBLEMS = 200
SAMPLED_N = 64
S_BAND = (1 / 1024, 1 / 16)
S_MIN = 150
REPORTS = Path("studies/reports/gate_v2")


def per_problem_passk(p: np.ndarray, ks) -> np.ndarray:
    """``[P, K]`` exact pass@k per problem."""
    return 1 - (1 - np.clip(p, 0, 1))[:, None] ** np.asarray(ks)[None, :]


def load_design(path: Path) -> dict[str, Any]:
    design = load_yaml(Path(path).read_text())
    for key in ("name", "train", "seeds", "rule"):
        if key not in design:
            raise SystemExit(f"{path}: missing key {key!r}")
    return design


def task_of(design: dict[str, Any]):
    from grae.data import get_task

    t = design["train"]["task"]
    return get_task(t["name"], **t.get("params", {}))


def load_model(path: str):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grae.presets import resolve_model

    torch.set_num_threads(1)
    resolved = resolve_model(path)
    return AutoModelForCausalLM.from_pretrained(resolved, dtype=torch.float32).eval(), AutoTokenizer.from_pretrained(resolved)


def gold_probs(model, tok, examples, temperature: float = 1.0, batch: int = 128) -> np.ndarray:
    """``[P]`` probability that one sample at ``temperature`` (top_p = 1) is the gold completion
    ``" " + answer + EOS``, teacher-forced (:func:`grae.eval.gold.gold_probs`, chain_trace's completions)."""
    from grae.data import get_task
    from grae.eval.gold import gold_probs as teacher_forced

    return teacher_forced(model, tok, examples, get_task("chain_trace"), temperature=temperature, batch=batch)


def parse_trace(text: str) -> list[int] | None:
    line = text.strip().split("\n", 1)[0].split()
    try:
        return [int(v) for v in line]
    except ValueError:
        return None


def sample_rows(model, tok, examples, task, n: int, max_tokens: int) -> list[dict[str, Any]]:
    from grae.eval.runner import evaluate

    result = evaluate(model, tok, examples, task, n=n, temperature=1.0, top_p=1.0, max_tokens=max_tokens,
                      batch_size=512, seed=0)
    return result.rows or []


def base_step(design_path: Path) -> dict[str, Any]:
    design = load_design(design_path)
    task = task_of(design)
    train_cfg = design["train"]
    heldout = task.heldout(design.get("heldout_problems", 600))
    model, tok = load_model(train_cfg["model"])
    max_tokens = int(train_cfg["eval"]["max_tokens"])
    t0 = time.time()
    p = gold_probs(model, tok, heldout)

    rows = sample_rows(model, tok, heldout, task, SAMPLED_N, max_tokens)
    by_q: dict[str, list[dict]] = {}
    for r in rows:
        by_q.setdefault(str(r["question_id"]), []).append(r)
    gold_traces = {str(e["question_id"]): [int(v) for v in str(e["answer"]).split()] for e in heldout}
    sampled = {q: [parse_trace(str(r["response"])) for r in rs] for q, rs in by_q.items()}  # each response once
    in_format = np.array([np.mean([t is not None and len(t) == len(gold_traces[q]) for t in sampled[q]])
                          for q in gold_traces])
    oracle = np.where(in_format > 0, p / np.maximum(in_format, 1 / SAMPLED_N), p)
    # the base's errors per running total, over its wrong well-formed traces
    width = max(len(g) for g in gold_traces.values())
    errors: list[list[int]] = [[] for _ in range(width)]
    wrong_traces: Counter[str] = Counter()
    for q, traces in sampled.items():
        gold = gold_traces[q]
        for t in traces:
            if t is None or t == gold:
                continue
            wrong_traces[" ".join(map(str, t))] += 1
            if len(t) == len(gold):
                for j, (a, g) in enumerate(zip(t, gold)):
                    if a != g:
                        errors[j].append(abs(a - g))
    w = [int(math.ceil(np.mean(e))) if e else 1 for e in errors]
    near = np.array([np.prod([1 / (2 * w[j] + 1) for j in range(len(g))]) for g in gold_traces.values()])
    train = task.train(train_cfg["task"]["train_size"], seed=design["seeds"][0])
    train_freq = Counter(str(e["answer"]) for e in train)  # gold traces are single-spaced (trace_answer)
    golds = [str(e["answer"]) for e in heldout]
    prior = np.array([train_freq[g] / len(train) for g in golds])
    n_wrong = max(1, sum(wrong_traces.values()))
    base_wrong = np.array([wrong_traces[g] / n_wrong for g in golds])

    sub = train[:TEMPERATURE_PROBLEMS]
    by_t = {t: float(100 * gold_probs(model, tok, sub, t).mean()) for t in TEMPERATURES}
    best_t = max(by_t, key=lambda t: by_t[t])
    p_best = p if best_t == 1.0 else gold_probs(model, tok, heldout, best_t)

    derived = {}
    for name in design.get("derived_from", []):
        m2, t2 = load_model(name)
        derived[name] = gold_probs(m2, t2, heldout)

    sampled_c = np.array([sum(bool(r["label"]) for r in by_q[str(e["question_id"])]) for e in heldout])
    from grae.metrics import pass_at_k_many

    sampled_curve = {k: float(100 * pass_at_k_many(np.full(len(sampled_c), SAMPLED_N), sampled_c, k).mean())
                     for k in KS if k <= SAMPLED_N}
    table = {"base (exact)": passk_curve(p), "format-only oracle": passk_curve(oracle),
             f"near-miss guesser (w = {w}: the base's mean |error| per running total)": passk_curve(near),
             "answer-prior guesser (training traces)": passk_curve(prior),
             "the base's own wrong answers (pooled)": passk_curve(base_wrong),
             f"base at its best temperature (T = {best_t})": passk_curve(p_best),
             **{f"derived from: {name}": passk_curve(q) for name, q in derived.items()}}
    references = [n for n in table if n.startswith(("near-miss", "answer-prior", "the base's own"))]
    base_curve = table["base (exact)"]
    ok = [k for k in DECIDING_KS if base_curve[k] <= 90 and all(table[n][k] <= 10 for n in references)]
    k_l = max(ok) if ok else None
    in_s = (p >= S_BAND[0]) & (p <= S_BAND[1])
    overlap = sft_overlap(design, heldout) if design.get("sft_overlap_recipe") else None
    strata = {}
    for e, pe in zip(heldout, p):
        strata.setdefault(repr(task.stratum(e)), []).append(pe)
    result = {
        "design": str(design_path), "model": train_cfg["model"], "problems": len(heldout),
        "table": table, "references": references, "deciding_k": k_l,
        "criterion_a": {k: abs(table["format-only oracle"][k] - base_curve[k]) for k in KS},
        "in_format_mean": float(in_format.mean()), "near_miss_w": w,
        "temperature_pass1_on_training": by_t, "best_temperature": best_t,
        "subset_S": {"band": S_BAND, "size": int(in_s.sum()), "used": bool(in_s.sum() >= S_MIN),
                     "question_ids": [str(e["question_id"]) for e, s in zip(heldout, in_s) if s]},
        "strata_pass1": {s: float(100 * np.mean(v)) for s, v in sorted(strata.items())},
        "sampled_check": {"n": SAMPLED_N, "sampled": sampled_curve, "exact": {k: base_curve[k] for k in sampled_curve}},
        "seconds": round(time.time() - t0, 1),
        **({"heldout_in_base_sft_stream": overlap} if overlap is not None else {}),
    }
    out = REPORTS / design["name"]
    out.mkdir(parents=True, exist_ok=True)
    (out / "base.json").write_text(json.dumps(result, indent=1) + "\n")
    (out / "base.md").write_text(base_markdown(result))
    np.save(out / "base_p.npy", np.stack([p, oracle, p_best, *derived.values()]))
    return result


def sft_overlap(design: dict[str, Any], heldout) -> int:
    """How many held-out questions the base's SFT stream (recipe ``sft_overlap_recipe``, seed 0, stage 1) held."""
    from grae.data.base import question_key
    from grae.tiny.build import RECIPES, TinyRecipe
    from grae.tiny.tasks import SFT_DATA_SEED, TinyTask

    recipe = TinyRecipe(**RECIPES[design["sft_overlap_recipe"]])
    stream = TinyTask(recipe.task, dict(recipe.task_kwargs)).dataset(1_000_000, SFT_DATA_SEED + recipe.seed)
    seen = {question_key(stream[i]["question"]) for i in range(recipe.sft_steps * recipe.batch_size * 11 // 10)}
    return sum(question_key(e["question"]) in seen for e in heldout)


def base_markdown(r: dict[str, Any]) -> str:
    ks = (1, 16, 64, 128, 256)
    lines = [f"## The base alone ({r['model']}; {r['problems']} held-out problems, exact, T = 1)", "",
             "| policy | " + " | ".join(f"pass@{k}" for k in ks) + " |", "|---|" + "---|" * len(ks)]
    for name, curve in r["table"].items():
        lines.append(f"| {name} | " + " | ".join(f"{curve[k]:.1f}" for k in ks) + " |")
    s = r["sampled_check"]
    lines += ["", f"Well-formed traces: {100 * r['in_format_mean']:.2f} % of the base's samples (n = {s['n']} per "
              "problem).", "Exact pass@1 on 200 training problems by temperature: "
              + ", ".join(f"T = {t}: {v:.1f}" for t, v in r["temperature_pass1_on_training"].items()) + ".",
              "Sampled check (all held-out problems, n = 64): " + ", ".join(
                  f"pass@{k} sampled {s['sampled'][k]:.1f} vs exact {s['exact'][k]:.1f}" for k in (1, 16, 64)
                  if k in s["sampled"]) + ".",
              "Held-out pass@1 by stratum (terms, digits): " + ", ".join(
                  f"{k} {v:.1f}" for k, v in r["strata_pass1"].items()) + ".",
              f"Subset S (base p in [1/1024, 1/16], declared now): {r['subset_S']['size']} problems "
              f"({'used for d' if r['subset_S']['used'] else 'fewer than 150: not used'}).",
              *([f"Held-out questions the base's SFT stream contained: {r['heldout_in_base_sft_stream']}."]
                if "heldout_in_base_sft_stream" in r else []),
              f"**Deciding k_L: {r['deciding_k']}** (largest k in {DECIDING_KS} with base ≤ 90 and every reference "
              "with no computation ≤ 10).", ""]
    return "\n".join(lines)


def run_dir(design: dict[str, Any], seed: int) -> Path:
    return Path("runs/gate_v2") / design["name"] / f"grpo_s{seed}"


def train_step(design_path: Path, seeds: list[int]) -> None:
    """``grae train`` of the design's config, one seed after another, one torch thread each."""
    design = load_design(design_path)
    cfg_path = Path("runs/gate_v2") / design["name"] / "train.yaml"
    cfg_path.parent.mkdir(parents=True, exist_ok=True)
    cfg_path.write_text(yaml.safe_dump(design["train"], sort_keys=False))
    for seed in seeds:
        out = run_dir(design, seed)
        cmd = [sys.executable, "-m", "grae.cli", "train", str(cfg_path), "--seed", str(seed), "--output-dir", str(out),
               "--no-progress", *(["--resume"] if (out / "run.json").exists() else [])]
        print(" ".join(cmd), flush=True)
        run_counting_cpu(cmd, out)


def run_counting_cpu(cmd: list[str], out: Path) -> None:
    """Run ``cmd`` (one torch thread) and add the CPU seconds it used (user + system) to ``out/cpu_seconds``: a
    resumed run (``--resume`` in ``cmd``) counts its earlier processes."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    earlier = float((out / "cpu_seconds").read_text()) if "--resume" in cmd and (out / "cpu_seconds").exists() else 0.0
    (out / "cpu_seconds").write_text(f"{earlier + used:.1f}\n")


def core_seconds(out: Path) -> float:
    """CPU seconds the run's process used (user + system, all threads: ``cpu_seconds``, written by
    :func:`run_counting_cpu` from the child's resource usage), so a run sharing its core with other work is not charged
    for the wait; the training wall time (``eval/summary.json``) when it was not recorded."""
    recorded = out / "cpu_seconds"
    if recorded.exists():
        return float(recorded.read_text())
    summary = out / "eval" / "summary.json"
    return float(json.loads(summary.read_text())["train_seconds"]) if summary.exists() else float("nan")


def report_step(design_path: Path) -> dict[str, Any]:
    from grae.compare.stats import crossed_interval
    from grae.eval.diagnostics import train_pass1
    from grae.train.rundir import read_metrics

    design = load_design(design_path)
    out = REPORTS / design["name"]
    base = json.loads((out / "base.json").read_text())
    k_l = base["deciding_k"]
    task = task_of(design)
    heldout = task.heldout(base["problems"])
    stacked = np.load(out / "base_p.npy")
    p_base, p_oracle, p_best = stacked[0], stacked[1], stacked[2]
    derived = list(stacked[3:])
    done = [s for s in design["seeds"] if (run_dir(design, s) / "final").exists()]
    finals, gaps, minutes = [], [], []
    cache = out / "final_p.json"
    known = json.loads(cache.read_text()) if cache.exists() else {}
    for s in done:
        if str(s) not in known:
            model, tok = load_model(str(run_dir(design, s) / "final"))
            known[str(s)] = gold_probs(model, tok, heldout).tolist()
            cache.write_text(json.dumps(known))
        finals.append(np.array(known[str(s)]))
        metrics = read_metrics(run_dir(design, s) / "metrics.jsonl")
        gaps.append(100 * (train_pass1(metrics) - float(np.mean(known[str(s)]))))
        minutes.append(core_seconds(run_dir(design, s)) / 60)
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

    def verdict(passes: bool, fails: bool) -> str:
        return "pass" if (passes and complete) else ("FAIL" if fails else "undecided (pilot)")

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
                     "c": verdict(c_pass, c_fail), "d": verdict(d_pass, d_fail),
                     "e": "pass" if e_pass else ("FAIL" if minutes else "not run")},
    }
    crit = result["criteria"]
    result["gate"] = "passes" if (crit["a"] and crit["b"] and crit["c"] == crit["d"] == crit["e"] == "pass") else (
        "fails" if (not crit["a"] or not crit["b"] or "FAIL" in (crit["c"], crit["d"], crit["e"])) else "undecided")
    (out / "report.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


def fmt(iv: dict[str, float] | None) -> str:
    return "—" if not iv else f"{iv['mean']:+.1f} [{iv['lo']:+.1f}, {iv['hi']:+.1f}]"


def attempt_row(design_path: Path) -> str:
    design = load_design(design_path)
    out = REPORTS / design["name"]
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
        c_cells = "; ".join(f"− {n.split(' (')[0]} {fmt(iv)}" for n, iv in rep["c_grpo_minus_reference_pass1"].items())
        gap = np.mean(rep["train_minus_heldout_pass1"]) if rep["train_minus_heldout_pass1"] else float("nan")
        if len(rep["seeds_done"]) < 2:  # no interval: say what finished
            per_seed = "; ".join(f"seed {s}: pass@1 {c['1']:.1f}, pass@{k_show} {c[str(k_show)]:.1f}"
                                 for s, c in rep["grpo_per_seed"].items()) or "no seed finished (the pilot was cut)"
            c_cells = f"{per_seed}; no interval with {len(rep['seeds_done'])} seed(s)"
        head = f"GRPO pass@1 {rep['grpo']['1']:.1f}: " if rep["grpo"] else ""
        gap_cell = f"; gap {gap:+.1f}" if np.isfinite(gap) else ""
        row += [f"{head}{c_cells}{gap_cell} ({cr['c']})",
                f"GRPO − base at k_L {fmt(rep['d_grpo_minus_base_at_kL'])}; on S {fmt(rep['d_grpo_minus_base_at_kL_on_S'])}"
                f" ({cr['d']})",
                f"{max(rep['training_minutes']):.1f} core-min ({cr['e']})" if rep["training_minutes"] else "—",
                f"{len(rep['seeds_done'])} of {len(design['seeds'])}", f"**{rep['gate']}**"]
    else:
        row += ["not trained", "—", "—", "0", "**fails**" if not (k_l and a <= 1) else "**undecided**"]
    row.append(design.get("changed", ""))
    return "| " + " | ".join(row) + " |"


def write_table() -> str:
    header = ["| attempt | design | a: max |oracle − base| | b: k_L; base and references at k_L | sharpening: base "
              "pass@1 → best T | derived-from models pass@1 / pass@k_L | c: GRPO pass@1 − references (lower bound "
              "> +3); train − held-out gap | d: GRPO − base at k_L (upper bound < −2) | e: cost per run | seeds | "
              "gate | what it changed |", "|" + "---|" * 12]
    rows = [attempt_row(p) for p in sorted(Path("studies/design").glob("gate_v2_*.yaml"))
            if (REPORTS / load_design(p)["name"] / "base.json").exists()]
    here = Path(__file__).parent
    text = ((here / "gate_v2_intro.md").read_text() + "\n".join(header + rows) + "\n"
            + (here / "gate_v2_analysis.md").read_text())
    (REPORTS / "README.md").write_text(text)
    return text


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("step", choices=("base", "train", "report", "table"))
    ap.add_argument("design", type=Path, nargs="?")
    ap.add_argument("--seeds", type=int, nargs="*")
    a = ap.parse_args(argv)
    if a.step == "table":
        print(write_table())
    elif a.step == "base":
        base_step(a.design)
        print((REPORTS / load_design(a.design)["name"] / "base.md").read_text())
    elif a.step == "train":
        train_step(a.design, a.seeds or load_design(a.design)["seeds"])
    else:
        print(json.dumps(report_step(a.design), indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
