"""Gate v3: certify an RL step that learns, train in the base's competence band, and measure every arm against the
base's temperature frontier. Each step reads a design file committed before its runs (studies/design/gate_v3_*.yaml).

    python studies/gate_v3.py check-base  studies/design/gate_v3_pregate.yaml    # the rebuilt base is the measured one
    python studies/gate_v3.py instrument  studies/design/gate_v3_pregate.yaml    # a, b, k_L, S on the (rebuilt) base
    python studies/gate_v3.py band        studies/design/gate_v3_pregate.yaml    # grae data band: the training problems
    python studies/gate_v3.py pregate     studies/design/gate_v3_pregate.yaml    # the arms; table + training logs
    python studies/gate_v3.py modes       studies/design/gate_v3_two_modes_pregate.yaml  # pass@1 each strategy carries
    python studies/gate_v3.py gate-train  studies/design/gate_v3_two_modes.yaml  # GRPO at the certified arm, every seed
    python studies/gate_v3.py gate-report studies/design/gate_v3_two_modes.yaml  # criteria a, b, c', d, e; Δ_F

Every pass@1 is exact (``chain_trace`` accepts one completion per strategy: p = Σ π(" " + gold + EOS | prompt),
teacher-forced over every gold completion the task accepts, :func:`grae.eval.gold.gold_probs`). The pre-gate's Δ is
paired per problem against the base (one seed: its interval is over problems only, a t interval on the per-problem
differences).

Outputs (committed) go under ``--reports`` (studies/reports/gate_v3), a folder a design: ``pregate.md`` /
``pregate.json`` (the table), ``logs/<arm>.jsonl`` (per step: reward, frac_reward_zero_std, entropy, grad_norm,
learning_rate, completion length), ``logs/<arm>.run.json`` and ``logs/<arm>.cpu_seconds``; the band file's header and
counts (``band.json``); a gate's ``report.md`` / ``report.json`` in the folder of its pre-gate's design. Runs, band
files and configs go under ``--runs`` (runs/gate_v3).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from gate_common import (
    Dirs,
    band,
    band_holdout_examples,
    band_paths,
    band_train_examples,
    best_temperature,
    checkpoint_path,
    fmt,
    gold_probs,
    heldout_of,
    load_design,
    load_model,
    merged,
    passk,
    strata_masks,
    task_of,
    trace_instrument,
    train_run,
    verdict,
    write,
    write_logs,
)

REPORTS = Path("studies/reports/gate_v3")
RUNS = Path("runs/gate_v3")


def paired(diff: np.ndarray) -> dict[str, float]:
    """Mean of per-problem differences (points) with a 95 % t interval over problems."""
    from scipy.stats import t as student_t

    n = len(diff)
    mean = float(diff.mean())
    se = float(diff.std(ddof=1) / math.sqrt(n)) if n > 1 else float("nan")
    half = float(student_t.ppf(0.975, n - 1)) * se
    return {"mean": mean, "lo": mean - half, "hi": mean + half, "n": n}


# ---------------------------------------------------------------------------------------------------- check-base
def check_base(design_path: Path, dirs: Dirs) -> dict[str, Any]:
    """The rebuilt base's exact held-out p at T = 1 against the committed one (gate v2's measured base)."""
    design = load_design(design_path)
    held_task, heldout = heldout_of(design)
    model, tok = load_model(design["train"]["model"])
    p = gold_probs(model, tok, heldout, held_task)
    committed = np.load(design["base_check"])[0]
    result = {"model": design["train"]["model"], "problems": len(heldout), "pass1": float(100 * p.mean()),
              "committed_pass1": float(100 * committed.mean()), "max_abs_diff_p": float(np.abs(p - committed).max())}
    out = dirs.out(design, mkdir=True)
    (out / "base_check.json").write_text(json.dumps(result, indent=1) + "\n")
    np.save(out / "base_heldout_p.npy", p)
    print(json.dumps(result))
    return result


# ---------------------------------------------------------------------------------------------------- instrument
def instrument(design_path: Path, dirs: Dirs) -> dict[str, Any]:
    """Gate v2's instrument (:func:`gate_common.trace_instrument`: exact pass@k, the format-only oracle, the
    references with no computation, k_L, the subset S, the best temperature) on this design's base and held-out
    problems, written under ``instrument/`` in the design's report folder: the rebuilt base is another model, so its
    instrument is measured again rather than taken from gate v2's t4."""
    design = load_design(design_path)
    v2_design = {"name": "instrument", "rule": "issue-45-gate-v2", "seeds": [design["seed"]],
                 "heldout_problems": design["heldout_problems"],
                 "derived_from": [], "sft_overlap_recipe": design.get("sft_overlap_recipe"),
                 "train": {**design["train"], "task": {**design["train"]["task"], "train_size": 2048}}}
    path = dirs.run_root(design) / "instrument.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(v2_design, sort_keys=False))
    return trace_instrument(load_design(path), path, dirs.out(design) / v2_design["name"])


# ------------------------------------------------------------------------------------------------------- pregate
def arm_config(design: dict[str, Any], arm: str, dirs: Dirs) -> dict[str, Any]:
    cfg = merged(design["train"], design["arms"][arm] or {})
    cfg["task"] = {**cfg["task"], "train_subset": str(band_paths(design, dirs)[1])}
    cfg["keep_steps"] = [s for s in design["checkpoints"] if s < cfg["max_steps"]]
    cfg["seed"] = design["seed"]
    return cfg


def pregate(design_path: Path, dirs: Dirs, arms: list[str] | None = None) -> dict[str, Any]:
    """Each arm trained (one seed) and measured at each checkpoint against the base, paired per problem, on the
    held-out problems (by stratum) and the band hold-out; each arm's Δ_F at k_L; the training logs."""
    design = load_design(design_path)
    task = task_of(design)
    held_task, heldout = heldout_of(design)
    band_held = band_holdout_examples(design, dirs)
    masks = strata_masks(design, heldout)
    certify_on = design.get("certify_on", "all")
    out = dirs.out(design, mkdir=True)
    cache_path = out / "pregate_p.json"
    cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    if "base" not in cache:
        model, tok = load_model(design["train"]["model"])
        cache["base"] = {"heldout": gold_probs(model, tok, heldout, held_task).tolist(),
                         "band": gold_probs(model, tok, band_held, task).tolist()}
        cache_path.write_text(json.dumps(cache))
    base_h, base_b = np.array(cache["base"]["heldout"]), np.array(cache["base"]["band"])
    max_steps = design["train"]["max_steps"]
    table: dict[str, Any] = {}
    for arm in arms or list(design["arms"]):
        run = train_run(arm_config(design, arm, dirs), dirs.run_root(design) / arm)
        write_logs(out / "logs", arm, run)
        row: dict[str, Any] = {"cpu_minutes": float((run / "cpu_seconds").read_text()) / 60}
        for step in design["checkpoints"]:
            key = f"{arm}@{step}"
            if key not in cache:
                model, tok = load_model(str(checkpoint_path(run, step, max_steps)))
                cache[key] = {"heldout": gold_probs(model, tok, heldout, held_task).tolist(),
                              "band": gold_probs(model, tok, band_held, task).tolist()}
                cache_path.write_text(json.dumps(cache))
            d_held = 100 * (np.array(cache[key]["heldout"]) - base_h)
            row[str(step)] = {"heldout": paired(d_held[masks[certify_on]]),
                              "band": paired(100 * (np.array(cache[key]["band"]) - base_b)),
                              "strata": {name: paired(d_held[m]) for name, m in masks.items()}}
        first, last = (str(s) for s in (design["checkpoints"][0], design["checkpoints"][-1]))
        d_first, d_last = row[first]["heldout"]["mean"], row[last]["heldout"]["mean"]
        row["certified"] = bool(d_last > 1 and d_last > d_first)
        row["per_100_steps"] = d_last * 100 / int(last)
        table[arm] = row
    k_l, frontier_rows = frontier_distances(design, heldout, cache, table, dirs)
    cache_path.write_text(json.dumps(cache))
    result = {"design": str(design_path), "base_heldout_pass1": float(100 * base_h[masks[certify_on]].mean()),
              "certify_on": certify_on, "strata_base_pass1": {n: float(100 * base_h[m].mean()) for n, m in masks.items()},
              "deciding_k": k_l,
              "base_temperature_frontier": frontier_rows,
              "base_band_pass1": float(100 * base_b.mean()), "band_holdout_problems": len(band_held), "arms": table,
              "certified": [a for a, r in table.items() if r["certified"]]}
    write(out, "pregate", result, pregate_markdown(design, result))
    return result


# ---------------------------------------------------------------------------------------------------------- gate
# A gate design (studies/design/gate_v3_<name>.yaml) names its pre-gate design (the base, the instrument and the band
# files), the certified arm's settings frozen in ``train``, its ``seeds`` and ``checkpoints`` (steps kept for GRPO's
# checkpoint frontier). Criteria (the design's RULE): a, b as gate v2 (on the instrument); c': GRPO's
# pass@1 at T = 1 − the base's at T = 1, lower bound > +2, and GRPO at its own best T − the base at its best T (both
# chosen on training problems), lower bound > −1; d: GRPO − base at k_L upper bound < −2 (held-out or S), both
# outcomes reported; e: each run ≤ 30 core-minutes. Secondary: GRPO at T = 1 − the best-T base; Δ_F (distance above
# the base's temperature frontier at k_L) and the band hold-out gap.
def gate_runs(design: dict[str, Any], pre: dict[str, Any], dirs: Dirs) -> dict[int, Path]:
    return {s: dirs.run_root(pre) / design["name"] / f"grpo_s{s}" for s in design["seeds"]}


def gate_config(design: dict[str, Any], pre: dict[str, Any], seed: int, dirs: Dirs) -> dict[str, Any]:
    """The gate's frozen train config on the pre-gate's band training file, with its kept checkpoints and ``seed``."""
    cfg = dict(design["train"])
    cfg["task"] = {**cfg["task"], "train_subset": str(band_paths(pre, dirs)[1])}
    cfg["keep_steps"] = [s for s in design["checkpoints"] if s < cfg["max_steps"]]
    cfg["seed"] = seed
    return cfg


def gate_train(design_path: Path, dirs: Dirs, seeds: list[int] | None = None) -> None:
    design = load_design(design_path)
    pre = load_design(Path(design["pregate"]))
    runs = gate_runs(design, pre, dirs)
    for seed in seeds or design["seeds"]:
        train_run(gate_config(design, pre, seed, dirs), runs[seed])


def gate_report(design_path: Path, dirs: Dirs) -> dict[str, Any]:
    """The gate's criteria on every finished seed, written in the gate's folder under its pre-gate's report folder."""
    from grae.compare.stats import crossed_interval
    from grae.compare.temperature_frontier import base_temperature_p, frontier_table, temperature_frontier

    design = load_design(design_path)
    pre = load_design(Path(design["pregate"]))
    task = task_of(pre)
    held_task, heldout = heldout_of(pre)
    inst_path = dirs.out(pre) / "instrument" / "base.json"
    inst = json.loads(inst_path.read_text()) if inst_path.exists() else None  # design 2: a and b not measured
    k_l = design.get("k_L") or inst["deciding_k"]
    temps = [float(t) for t in design["temperatures"]]
    train_probs = band_train_examples(pre, design["temperature_problems"], dirs)
    band_held = band_holdout_examples(pre, dirs)
    out = dirs.out(pre) / design["name"]
    out.mkdir(parents=True, exist_ok=True)
    cache_path = out / "p.json"
    cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}

    def measured(key: str, model_path: str) -> dict[str, Any]:
        if key not in cache:
            model, tok = load_model(model_path)
            best_t, by_t = best_temperature(lambda t: 100 * gold_probs(model, tok, train_probs, task, t).mean(), temps)
            cache[key] = {"T1": gold_probs(model, tok, heldout, held_task).tolist(), "best_t": best_t, "train_by_t": by_t,
                          "best": gold_probs(model, tok, heldout, held_task, best_t).tolist(),
                          "band_train": float(100 * gold_probs(model, tok, train_probs, task).mean()),
                          "band_holdout": float(100 * gold_probs(model, tok, band_held, task).mean())}
            if key == "base":
                model_t = base_temperature_p(model, tok, heldout, held_task)
                cache[key]["frontier"] = {str(t): v.tolist() for t, v in model_t.items()}
            cache_path.write_text(json.dumps(cache))
        return cache[key]

    base = measured("base", pre["train"]["model"])
    runs = gate_runs(design, pre, dirs)
    done = [s for s in design["seeds"] if (runs[s] / "final").exists()]
    for s in done:
        write_logs(out / "logs", f"grpo_s{s}", runs[s])
    finals = {s: measured(f"seed{s}", str(runs[s] / "final")) for s in done}
    ckpts = {s: {c: measured(f"seed{s}@{c}", str(runs[s] / "snapshots" / f"step-{c}"))["T1"]
                 for c in design["checkpoints"] if c < design["train"]["max_steps"]} for s in done}
    ks = [1, k_l]

    def curve(p) -> np.ndarray:  # [P, len(ks)] per-problem pass@k, in points
        return passk(p, ks)

    def diff(key: str, ref: np.ndarray, mask: np.ndarray | None = None) -> list[dict[str, float]] | None:
        if len(done) < 2:
            return None
        d = np.stack([curve(finals[s][key]) - curve(ref) for s in done])
        d = d[:, mask] if mask is not None else d
        return [vars(iv) for iv in crossed_interval(d)]

    p_base_t1, p_base_best = np.array(base["T1"]), np.array(base["best"])
    if "S_stratum" in design:
        s_mask, s_used = strata_masks(pre, heldout)[design["S_stratum"]], True
    else:
        s_ids = set(inst["subset_S"]["question_ids"])
        s_mask, s_used = np.array([str(e["question_id"]) in s_ids for e in heldout]), inst["subset_S"]["used"]
    c1 = diff("T1", p_base_t1)
    c2 = diff("best", p_base_best)
    secondary = diff("T1", p_base_best)
    d_all = c1[1] if c1 else None
    d_s = diff("T1", p_base_t1, s_mask)[1] if (c1 and s_used) else None
    frontier, dist = temperature_frontier({float(t): np.array(v) for t, v in base["frontier"].items()},
                                          {"GRPO (T = 1)": np.stack([finals[s]["T1"] for s in done])} if done else {},
                                          k_l)
    minutes = [float((runs[s] / "cpu_seconds").read_text()) / 60 for s in done]
    complete = len(done) >= len(design["seeds"])

    c_pass = bool(c1) and c1[0]["lo"] > 2 and c2[0]["lo"] > -1
    c_fail = bool(c1) and (c1[0]["hi"] <= 2 or c2[0]["hi"] <= -1 or (complete and not c_pass))
    d_ivs = [iv for iv in (d_all, d_s) if iv]
    d_pass = any(iv["hi"] < -2 for iv in d_ivs)
    d_fail = bool(d_ivs) and (all(iv["lo"] >= -2 for iv in d_ivs) or (complete and not d_pass))
    crit = {"a": all(inst["criterion_a"][str(k)] <= 1 for k in ks) if inst else "not measured",
            "b": (k_l is not None) if inst else "not measured",
            "c'": verdict(c_pass, c_fail, complete), "d": verdict(d_pass, d_fail, complete),
            "e": "pass" if minutes and max(minutes) <= design["max_core_minutes"] else ("FAIL" if minutes else "not run")}
    gate = "passes" if (crit["a"] is True and crit["b"] is True and crit["c'"] == crit["d"] == crit["e"] == "pass") else (
        "fails" if (crit["a"] is False or crit["b"] is False or "FAIL" in (crit["c'"], crit["d"], crit["e"]))
        else "undecided")
    fd = dist.get("GRPO (T = 1)")
    result = {"design": str(design_path), "seeds_done": done, "complete": complete, "deciding_k": k_l,
              "base": {"T1": {k: float(curve(p_base_t1)[:, i].mean()) for i, k in enumerate(ks)},
                       "best_t": base["best_t"], "best": {k: float(curve(p_base_best)[:, i].mean()) for i, k in enumerate(ks)},
                       "band_train": base["band_train"], "band_holdout": base["band_holdout"]},
              "grpo_per_seed": {str(s): {"T1": {k: float(curve(f["T1"])[:, i].mean()) for i, k in enumerate(ks)},
                                         "best_t": f["best_t"],
                                         "best": {k: float(curve(f["best"])[:, i].mean()) for i, k in enumerate(ks)},
                                         "band_train": f["band_train"], "band_holdout": f["band_holdout"],
                                         "checkpoints_pass1": {str(c): float(100 * np.mean(v)) for c, v in ckpts[s].items()}}
                                for s, f in finals.items()},
              "c1_grpo_T1_minus_base_T1": c1, "c2_grpo_best_minus_base_best": c2,
              "secondary_grpo_T1_minus_best_T_base": secondary, "d_at_kL": d_all, "d_at_kL_on_S": d_s,
              "delta_F": {"mean": fd.interval.mean, "lo": fd.interval.lo, "hi": fd.interval.hi,
                          "loso": fd.leave_one_out} if fd else None,
              "frontier_rows": frontier_table(frontier),
              "strata": {name: {"base_passk": {k: float(curve(p_base_t1)[m, i].mean()) for i, k in enumerate(ks)},
                                "grpo_minus_base": [vars(iv) for iv in crossed_interval(np.stack(
                                    [curve(finals[s]["T1"]) - curve(p_base_t1) for s in done])[:, m])]
                                if len(done) >= 2 else None}
                         for name, m in strata_masks(pre, heldout).items()},
              "training_minutes": minutes, "criteria": crit, "gate": gate}
    write(out, "report", result, gate_markdown(design, result))
    return result


def gate_markdown(design: dict[str, Any], r: dict[str, Any]) -> str:
    k = r["deciding_k"]

    def iv(x: list[dict[str, float]] | None, i: int) -> str:
        return fmt(x[i]) if x else "— (fewer than 2 seeds)"

    seeds = r["seeds_done"]
    c_verdict = r["criteria"]["c'"]
    lines = [f"## Gate: {design['name']} — {r['gate']}" + ("" if r["complete"] else f" (pilot: {len(seeds)} of "
                                                                                       f"{len(design['seeds'])} seeds)"),
             "", f"Seeds {', '.join(map(str, seeds))}; {design['train']['max_steps']} steps; exact pass@k on the "
             f"held-out problems; crossed seeds × problems 95 % intervals; k_L = {k}.", "",
             "| criterion | measured | verdict |", "|---|---|---|",
             f"| a (format-only oracle) | — | {r['criteria']['a']} |",
             f"| b (k_L guess-proof) | k_L = {k} | {r['criteria']['b']} |",
             f"| c′ GRPO − base, pass@1 at T = 1 (lower bound > +2) | {iv(r['c1_grpo_T1_minus_base_T1'], 0)} | "
             f"{c_verdict} |",
             f"| c′ GRPO at its best T − base at its best T (T = {r['base']['best_t']}), pass@1 (lower bound > −1) | "
             f"{iv(r['c2_grpo_best_minus_base_best'], 0)} | |",
             f"| d GRPO − base at pass@{k} (upper bound < −2), all held-out | {iv(r['c1_grpo_T1_minus_base_T1'], 1)} | "
             f"{r['criteria']['d']} |",
             f"| d on S | {fmt(r['d_at_kL_on_S']) if r['d_at_kL_on_S'] else '—'} | |",
             f"| e core-minutes a run (≤ {design['max_core_minutes']}) | "
             f"{', '.join(f'{m:.1f}' for m in r['training_minutes'])} | {r['criteria']['e']} |",
             f"| secondary: GRPO at T = 1 − the best-T base, pass@1 | {iv(r['secondary_grpo_T1_minus_best_T_base'], 0)} | |",
             f"| Δ_F at k = {k} (above the base's temperature frontier) | "
             f"{fmt({key: 100 * v for key, v in r['delta_F'].items() if key != 'loso'}) if r['delta_F'] else '—'} | |",
             "", "Per seed (pass@1 / pass@k_L at T = 1; best T; band train / band hold-out pass@1; checkpoints' pass@1):",
             "", f"- base: {r['base']['T1'][1]:.2f} / {r['base']['T1'][k]:.2f}; best T {r['base']['best_t']}; "
             f"{r['base']['band_train']:.2f} / {r['base']['band_holdout']:.2f}"]
    for s, row in r["grpo_per_seed"].items():
        lines.append(f"- seed {s}: {row['T1'][1]:.2f} / {row['T1'][k]:.2f}; best T {row['best_t']}; "
                     f"{row['band_train']:.2f} / {row['band_holdout']:.2f}; {row['checkpoints_pass1']}")
    lines += ["", "By stratum (base pass@1 / pass@k_L; GRPO − base pass@1, pass@k_L):", ""]
    for name, st in r["strata"].items():
        d = st["grpo_minus_base"]
        lines.append(f"- {name}: base {st['base_passk'][1]:.2f} / {st['base_passk'][k]:.2f}; "
                     f"{iv(d, 0)}, {iv(d, 1)}")
    lines += ["", "The base's temperature frontier (held-out, exact):", "", *r["frontier_rows"]]
    return "\n".join(lines) + "\n"


def instrument_of(design: dict[str, Any], dirs: Dirs) -> dict[str, Any]:
    """The instrument measured on the band design's base (``gate_v3.py instrument``)."""
    root = dirs.out(load_design(Path(design["band_design"])) if "band_design" in design else design)
    return json.loads((root / "instrument" / "base.json").read_text())


def frontier_distances(design: dict[str, Any], heldout, cache: dict[str, Any], table: dict[str, Any], dirs: Dirs):
    """Each arm's Δ_F at k_L (its last checkpoint against the base's temperature frontier on the held-out problems,
    1 seed: an interval over problems), added to ``table``; returns k_L and F's rows."""
    from grae.compare.temperature_frontier import TEMPERATURES, base_temperature_p, frontier_table, temperature_frontier

    k_l = design["k_frontier"] if "k_frontier" in design else instrument_of(design, dirs)["deciding_k"]
    if "base_T" not in cache:
        model, tok = load_model(design["train"]["model"])
        cache["base_T"] = {str(t): v.tolist() for t, v in
                           base_temperature_p(model, tok, heldout, task_of(design, heldout=True), TEMPERATURES).items()}
    base_t = {float(t): np.array(v) for t, v in cache["base_T"].items()}
    last = design["checkpoints"][-1]
    arms = {arm: np.array(cache[f"{arm}@{last}"]["heldout"])[None] for arm in table}
    frontier, dist = temperature_frontier(base_t, arms, k_l)
    for arm, fd in dist.items():
        table[arm]["delta_F"] = {"mean": 100 * fd.interval.mean, "lo": 100 * fd.interval.lo,
                                 "hi": 100 * fd.interval.hi, "k": k_l}
        table[arm]["pass_kL"] = float(100 * np.mean(1 - (1 - arms[arm][0]) ** k_l))
    return k_l, frontier_table(frontier)


def modes(design_path: Path, dirs: Dirs) -> dict[str, Any]:
    """Exact held-out pass@1 carried by each strategy (L, G), per stratum, for the base and every arm's last
    checkpoint: does L solve excursion chains anyway, and does GRPO move mass from G to L?"""
    design = load_design(design_path)
    held_task, heldout = heldout_of(design)
    masks = strata_masks(design, heldout)
    last = design["checkpoints"][-1]
    models = {"base": design["train"]["model"],
              **{arm: str(checkpoint_path(dirs.run_root(design) / arm, last, design["train"]["max_steps"]))
                 for arm in design["arms"] if (dirs.run_root(design) / arm / "final").exists()}}
    from grae.eval.gold import gold_prob_parts

    result: dict[str, Any] = {}
    for name, path in models.items():
        model, tok = load_model(path)
        parts = gold_prob_parts(model, tok, heldout, held_task)  # [P, 2]: the L and the G trace
        per = {"L": parts[:, 0], "G": parts[:, 1]}
        result[name] = {stratum: {label: float(100 * p[m].mean()) for label, p in per.items()}
                        for stratum, m in masks.items()}
    write(dirs.out(design), "modes", result, modes_markdown(result))
    return result


def modes_markdown(result: dict[str, Any]) -> str:
    """``modes.md``: a row a model, each stratum's L / G pass@1."""
    strata = list(next(iter(result.values())))
    lines = ["| model | " + " | ".join(f"{s}: L / G" for s in strata) + " |", "|" + "---|" * (len(strata) + 1)]
    lines += [f"| {name} | " + " | ".join(f"{r[s]['L']:.2f} / {r[s]['G']:.2f}" for s in strata) + " |"
              for name, r in result.items()]
    return "Exact held-out pass@1 (T = 1) carried by each strategy, by stratum:\n\n" + "\n".join(lines) + "\n"


def pregate_markdown(design: dict[str, Any], r: dict[str, Any]) -> str:
    steps = [str(s) for s in design["checkpoints"]]
    where = "" if r["certify_on"] == "all" else f" ({r['certify_on']})"
    head = ["arm"] + [f"Δ held-out{where} pass@1 @{s}" for s in steps] + [f"Δ band hold-out pass@1 @{s}" for s in steps] + [
        "certified", "core-min", "pass@k_L", "Δ_F at k_L"]
    lines = [f"## Pre-gate: {design['name']}", "",
             f"Base exact pass@1 at T = 1: held-out{where} {r['base_heldout_pass1']:.2f} (of {design['heldout_problems']} "
             "held-out problems), "
             f"band hold-out {r['base_band_pass1']:.2f} ({r['band_holdout_problems']} problems never trained on). "
             "Δ in points, exact, paired per problem against the base, 95 % t interval over problems (1 seed).", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for arm, row in r["arms"].items():
        cells = [arm] + [fmt(row[s]["heldout"]) for s in steps] + [fmt(row[s]["band"]) for s in steps] + [
            "**yes**" if row["certified"] else "no", f"{row['cpu_minutes']:.1f}", f"{row['pass_kL']:.1f}",
            fmt(row["delta_F"])]
        lines.append("| " + " | ".join(cells) + " |")
    strata = list(r["strata_base_pass1"])
    if len(strata) > 1:
        last = steps[-1]
        lines += ["", f"Δ held-out pass@1 at step {last} by stratum (base pass@1 in brackets):", "",
                  "| arm | " + " | ".join(f"{n} ({r['strata_base_pass1'][n]:.2f})" for n in strata) + " |",
                  "|" + "---|" * (len(strata) + 1)]
        lines += ["| " + arm + " | " + " | ".join(fmt(row[last]["strata"][n]) for n in strata) + " |"
                  for arm, row in r["arms"].items()]
    lines += ["", f"The base's temperature frontier on the held-out problems (k_L = {r['deciding_k']}, exact):", "",
              *r["base_temperature_frontier"]]
    lines += ["", "Rule (committed in the design): certified = Δ held-out pass@1 at the last step > +1 and above its "
              f"value at the first. Certified: {', '.join(r['certified']) or 'none'}."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=["check-base", "instrument", "band", "pregate", "modes", "gate-train",
                                         "gate-report"])
    parser.add_argument("design", type=Path)
    parser.add_argument("--arms", nargs="*")
    parser.add_argument("--seeds", nargs="*", type=int)
    Dirs.arguments(parser, REPORTS, RUNS)
    args = parser.parse_args(argv)
    dirs = Dirs(args.reports, args.runs)
    if args.step == "check-base":
        check_base(args.design, dirs)
    elif args.step == "instrument":
        instrument(args.design, dirs)
    elif args.step == "band":
        band(args.design, dirs)
    elif args.step == "pregate":
        pregate(args.design, dirs, args.arms)
    elif args.step == "modes":
        modes(args.design, dirs)
    elif args.step == "gate-train":
        gate_train(args.design, dirs, args.seeds)
    else:
        gate_report(args.design, dirs)


if __name__ == "__main__":
    main()
