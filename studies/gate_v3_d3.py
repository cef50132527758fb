"""Gate v3, design 3: the two-modes testbed whose rare mode has mass. Every step reads the design file committed before
its runs (studies/design/gate_v3_two_modes_d3.yaml, which states the rules; ``--design`` names another) and writes
under ``--reports`` (studies/reports/gate_v3), in the design's folder; runs, band files and configs go under
``--runs`` (runs/gate_v3):

    python studies/gate_v3_d3.py check-base     # each build: the base checks, the L/G mass per stratum
    python studies/gate_v3_d3.py ship           # the passing build copied into the package as tiny-two-modes
    python studies/gate_v3_d3.py instrument     # the shipped base: format-only oracle, guessers, k_L, frontier per stratum
    python studies/gate_v3_d3.py band           # grae data band on the in-range pool; the band hold-out drawn
    python studies/gate_v3_d3.py pregate-train  # the pre-gate's arms × seeds
    python studies/gate_v3_d3.py pregate        # the arms × seeds on the band hold-out only; the frozen arm
    python studies/gate_v3_d3.py gate-train     # GRPO at the frozen arm, every seed
    python studies/gate_v3_d3.py gate-report    # per stratum pass@k, N / N256 / L1 / LK with Holm, Δ_F, best T, mass
    python studies/gate_v3_d3.py sample-check   # sampled correct rate against the exact p on the GRPO finals

Every pass@k is exact: ``chain_trace`` with ``strategies="two"`` accepts one L and one G completion per problem, so a
sample is correct with probability p = π(L gold + EOS) + π(G gold + EOS) (:func:`grae.eval.gold.gold_prob_parts`
gives the two terms: the strategies' mass), and pass@k = 1 − (1 − p)^k per problem.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
from collections import Counter
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
    heldout_of,
    load_design,
    load_model,
    merged,
    passk,
    sample_rows,
    strata_masks,
    task_of,
    train_run,
    write,
    write_logs,
)

from grae.compare.stats import crossed_interval, holm, holm_levels
from grae.compare.temperature_frontier import temperature_frontier
from grae.eval.gold import gold_prob_parts
from grae.eval.identity import weights_fingerprint

DESIGN = Path("studies/design/gate_v3_two_modes_d3.yaml")
REPORTS = Path("studies/reports/gate_v3")
RUNS = Path("runs/gate_v3")
#: the shipped design-3 base (grae.presets)
PRESET = "tiny-two-modes"
ASSET = Path("src/grae/assets") / PRESET


def parts_of(model_path: str, examples, task, temperature: float = 1.0) -> np.ndarray:
    """``[P, 2]`` exact mass of the L and the G gold completion of each example."""
    model, tok = load_model(model_path)
    return gold_prob_parts(model, tok, examples, task, temperature=temperature)


# ---------------------------------------------------------------------------------------------------- check-base
def build_path(design: dict[str, Any], seed: int) -> Path:
    return Path(design["builds_dir"]) / f"g30_base_s{seed}"


def check_base(design: dict[str, Any], dirs: Dirs) -> dict[str, Any]:
    """The design's base checks on every finished build (exact p at T = 1 on the held-out problems)."""
    task, heldout = heldout_of(design)
    masks = strata_masks(design, heldout)
    rules = design["base_checks"]
    inn, exc = masks["totals=in_range"], masks["totals=excursion"]
    lo, hi = rules["excursion_rare_band"]
    out = dirs.out(design, mkdir=True)
    builds: dict[str, Any] = {}
    for seed in design["build_seeds"]:
        path = build_path(design, seed)
        if not (path / "model.safetensors").exists():
            continue
        parts = parts_of(str(path), heldout, task)
        np.save(out / f"base_check_parts_s{seed}.npy", parts)
        p = parts.sum(axis=1)
        row = {"path": str(path), "fingerprint": weights_fingerprint(path),
               "excursion_pass64": float(passk(p[exc], [64]).mean()),
               "excursion_rare": int(((p[exc] >= lo) & (p[exc] <= hi)).sum()),
               "in_range_pass1": float(100 * p[inn].mean()),
               "mass": {name: {"L": float(100 * parts[m, 0].mean()), "G": float(100 * parts[m, 1].mean())}
                        for name, m in masks.items()},
               "passk": {name: {str(k): float(v) for k, v in zip((1, 64, 256), passk(p[m], [1, 64, 256]).mean(0))}
                         for name, m in masks.items()}}
        row["checks"] = {
            "excursion pass@64 >= %g" % rules["excursion_pass64_min"]: row["excursion_pass64"] >= rules["excursion_pass64_min"],
            "excursion problems with p in [1/1024, 1/16] >= %d" % rules["excursion_rare_min"]:
                row["excursion_rare"] >= rules["excursion_rare_min"],
            "in-range pass@1 within %g of %g" % (rules["in_range_pass1_tolerance"], rules["in_range_pass1_ref"]):
                abs(row["in_range_pass1"] - rules["in_range_pass1_ref"]) <= rules["in_range_pass1_tolerance"],
            "L carries more in-range pass@1 than G": row["mass"]["totals=in_range"]["L"] > row["mass"]["totals=in_range"]["G"]}
        row["passes"] = all(row["checks"].values())
        cpu = path.parent / f"g30_build_s{seed}.cpu_seconds"
        row["build_cpu_seconds"] = float(cpu.read_text()) if cpu.exists() else None
        builds[str(seed)] = row
    labels = [",".join(f"{k}={v}" for k, v in zip(task.heldout_strata, task.stratum(e))) for e in heldout]
    (out / "heldout_strata.json").write_text(json.dumps({"question_ids": [str(e["question_id"]) for e in heldout],
                                                         "strata": labels}) + "\n")
    chosen = next((s for s in map(str, design["build_seeds"]) if s in builds and builds[s]["passes"]), None)
    deviation = design.get("shipped_by_deviation")
    if chosen is None and deviation is not None:
        chosen = str(deviation["seed"])
    result = {"design": design["name"], "recipe": design["recipe"], "builds": builds, "shipped_seed": chosen,
              "deviation": deviation}
    write(out, "base_checks", result, base_checks_markdown(result))
    return result


def base_checks_markdown(r: dict[str, Any]) -> str:
    """``base_checks.md``: a row a build, the shipped seed."""
    chosen, deviation = r["shipped_seed"], r["deviation"]
    lines = [f"## Design 3 base checks ({r['recipe']})", "",
             "Exact p at T = 1 on the 600 held-out problems (300 in range, 300 excursion).", "",
             "| build seed | excursion pass@64 | excursion p in [1/1024, 1/16] | in-range pass@1 | in-range L / G | "
             "excursion L / G | passes |", "|---|---|---|---|---|---|---|"]
    for seed, row in r["builds"].items():
        m = row["mass"]
        lines.append(f"| {seed} | {row['excursion_pass64']:.2f} | {row['excursion_rare']} | {row['in_range_pass1']:.2f} | "
                     f"{m['totals=in_range']['L']:.2f} / {m['totals=in_range']['G']:.2f} | "
                     f"{m['totals=excursion']['L']:.3f} / {m['totals=excursion']['G']:.3f} | "
                     f"{'yes' if row['passes'] else 'no: ' + '; '.join(k for k, v in row['checks'].items() if not v)} |")
    lines += ["", f"Shipped: build seed {chosen}" + (f" — a deviation: {deviation['why']}" if deviation else "")
              if chosen is not None else "No build passes."]
    return "\n".join(lines) + "\n"


def ship(design: dict[str, Any], dirs: Dirs) -> None:
    """Copy the chosen build into the package as the ``tiny-two-modes`` asset (weights, tokenizer, build_info)."""
    checks = json.loads((dirs.out(design) / "base_checks.json").read_text())
    seed = checks["shipped_seed"]
    if seed is None:
        raise SystemExit("no build passes its checks: nothing to ship")
    src = Path(checks["builds"][seed]["path"])
    ASSET.mkdir(parents=True, exist_ok=True)
    for f in src.iterdir():
        if f.is_file():
            shutil.copyfile(f, ASSET / f.name)
    print(f"shipped {src} as {ASSET} ({weights_fingerprint(ASSET)})")


def with_base(design: dict[str, Any]) -> dict[str, Any]:
    """The design, after checking that the shipped base its ``train.model`` names is in the package."""
    if design["train"]["model"] != PRESET or not (ASSET / "model.safetensors").exists():
        raise SystemExit(f"{ASSET} is missing or the design trains another model: run check-base, then ship")
    return design


# ---------------------------------------------------------------------------------------------------- instrument
_INT = re.compile(r"^-?\d+$")


def parse_line(text: str) -> tuple[str, list[int]] | None:
    """``("L" | "G", numbers)`` of a completion's first line when it is marked and all numbers, else None."""
    words = str(text).strip().split("\n", 1)[0].split()
    if len(words) < 2 or words[0] not in ("L", "G") or not all(_INT.match(w) for w in words[1:]):
        return None
    return words[0], [int(w) for w in words[1:]]


def near_miss(gold: list[int], w: list[int]) -> float:
    return float(np.prod([1 / (2 * wj + 1) for wj in w[:len(gold)]]))


def instrument(design: dict[str, Any], dirs: Dirs) -> dict[str, Any]:
    """The design's instrument (its step 2) on the shipped base."""
    design = with_base(design)
    spec = design["instrument"]
    ks = spec["ks"]
    task, heldout = heldout_of(design)
    masks = strata_masks(design, heldout)
    model_path = design["train"]["model"]
    parts = parts_of(model_path, heldout, task)
    p = parts.sum(axis=1)
    model, tok = load_model(model_path)
    rows = sample_rows(model, tok, heldout, task, spec["samples"], int(design["train"]["trl"]["max_completion_length"]))
    by_q: dict[str, list[Any]] = {}
    for r in rows:
        by_q.setdefault(str(r["question_id"]), []).append(parse_line(r["response"]))
    golds = {str(e["question_id"]): [parse_line(a) for a in task.accepted_answers(e)] for e in heldout}
    # the format-only oracle: p over the share of well-formed L or G lines
    def well_formed(line, q) -> bool:
        if line is None:
            return False
        want = {g[0]: len(g[1]) for g in golds[q]}
        return len(line[1]) == want[line[0]]
    m = np.array([np.mean([well_formed(x, q) for x in by_q[q]]) for q in golds])
    oracle = np.where(m > 0, p / np.maximum(m, 1 / spec["samples"]), p)
    # the base's mean |error| per position over its wrong well-formed lines, per strategy
    errors: dict[str, list[list[int]]] = {"L": [[] for _ in range(4)], "G": [[] for _ in range(3)]}
    wrong: Counter[str] = Counter()
    for q, lines in by_q.items():
        gold = {g[0]: g[1] for g in golds[q]}
        for x in lines:
            if x is None or x[1] == gold[x[0]]:
                continue
            wrong[x[0] + " " + " ".join(map(str, x[1]))] += 1
            if well_formed(x, q):
                for j, (a, g) in enumerate(zip(x[1], gold[x[0]])):
                    if a != g:
                        errors[x[0]][j].append(abs(a - g))
    w = {s: [int(math.ceil(np.mean(e))) if e else 1 for e in errs] for s, errs in errors.items()}
    gl = {q: {g[0]: g[1] for g in gs} for q, gs in golds.items()}
    qs = list(golds)
    guessers = {
        f"L near-miss (w = {w['L']})": np.array([near_miss(gl[q]["L"], w["L"]) for q in qs]),
        f"G near-miss (w = {w['G']})": np.array([near_miss(gl[q]["G"], w["G"]) for q in qs]),
        f"G consistent near-miss (w = {w['G'][:2]}, result computed)": np.array(
            [near_miss(gl[q]["G"][:2], w["G"][:2]) for q in qs]),
    }
    train = task_of(design).train(spec["train_size"], seed=design["pregate"]["seeds"][0])
    prior = Counter(a for e in train for a in task.accepted_answers(e))
    n_lines = sum(prior.values())
    guessers["answer prior (training lines)"] = np.array([sum(prior[a] for a in task.accepted_answers(e)) / n_lines
                                                          for e in heldout])
    n_wrong = max(1, sum(wrong.values()))
    guessers["the base's own wrong lines (pooled)"] = np.array(
        [sum(wrong[a] for a in task.accepted_answers(e)) / n_wrong for e in heldout])
    temps = [float(t) for t in design["temperatures"]]
    by_t = {t: parts_of(model_path, heldout, task, t).sum(axis=1) for t in temps}
    strata: dict[str, Any] = {}
    for name, mask in masks.items():
        base_c = passk(p[mask], ks).mean(0)
        table = {"base (exact)": base_c, "format-only oracle": passk(oracle[mask], ks).mean(0),
                 **{g: passk(v[mask], ks).mean(0) for g, v in guessers.items()}}
        ok = [k for i, k in enumerate(ks) if all(base_c[i] - passk(v[mask], ks).mean(0)[i] >= spec["guesser_margin"]
                                                 for v in guessers.values())]
        frontier, _ = temperature_frontier({t: v[mask] for t, v in by_t.items()}, {}, ok[-1] if ok else 64)
        strata[name] = {"table": {n: [float(x) for x in c] for n, c in table.items()},
                        "k_L": ok[-1] if ok else None,
                        "oracle_minus_base": {str(k): float(table["format-only oracle"][i] - base_c[i])
                                              for i, k in enumerate(ks)},
                        "frontier": [{"T": pt.temperature, "pass1": 100 * pt.pass1, "passk": 100 * pt.passk,
                                      "on_F": pt.on_frontier} for pt in frontier.points],
                        "mass": {"L": float(100 * parts[mask, 0].mean()), "G": float(100 * parts[mask, 1].mean())}}
    out = dirs.out(design, mkdir=True)
    np.save(out / "instrument_p.npy", np.stack([p, oracle, *guessers.values()]))
    np.save(out / "base_temperature_p.npy", np.stack([by_t[t] for t in temps]))
    result = {"model": model_path, "fingerprint": weights_fingerprint(ASSET), "ks": ks, "samples": spec["samples"],
              "in_format_mean": float(m.mean()), "near_miss_w": w, "strata": strata}
    write(out, "instrument", result, instrument_markdown(design, result))
    return result


def instrument_markdown(design: dict[str, Any], r: dict[str, Any]) -> str:
    """``instrument.md``: per stratum, every reference's pass@k and the base's temperature frontier."""
    ks = r["ks"]
    lines = [f"## Instrument on `{PRESET}` ({r['fingerprint']})", "",
             f"Exact pass@k; {r['samples']} samples per problem for the format share and the error widths. "
             f"k_L per stratum = the largest k at which every guesser stays ≥ {design['instrument']['guesser_margin']:g} "
             "points below the base.", ""]
    for name, st in r["strata"].items():
        lines += [f"### {name}: k_L = {st['k_L']}; mass L {st['mass']['L']:.2f} / G {st['mass']['G']:.2f}", "",
                  "| reference | " + " | ".join(f"@{k}" for k in ks) + " |", "|---|" + "---|" * len(ks)]
        lines += [f"| {n} | " + " | ".join(f"{x:.2f}" for x in c) + " |" for n, c in st["table"].items()]
        lines += ["", "The base's temperature frontier (exact):", "", f"| T | pass@1 | pass@{st['k_L'] or 64} | |",
                  "|---|---|---|---|"]
        lines += [f"| {pt['T']:g} | {pt['pass1']:.2f} | {pt['passk']:.2f} | {'on F' if pt['on_F'] else ''} |"
                  for pt in st["frontier"]]
        lines.append("")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------- pregate
def pregate_config(design: dict[str, Any], arm: str, seed: int, dirs: Dirs) -> dict[str, Any]:
    spec = design["pregate"]
    cfg = merged(with_base(design)["train"], spec["arms"][arm] or {})
    cfg["task"] = {**cfg["task"], "train_subset": str(band_paths(design, dirs)[1])}
    cfg["max_steps"] = spec["max_steps"]
    cfg["save_steps"] = spec["max_steps"]
    cfg["keep_steps"] = [s for s in spec["checkpoints"] if s < spec["max_steps"]]
    cfg["seed"] = seed
    return cfg


def pregate_train(design: dict[str, Any], dirs: Dirs, arms: list[str] | None = None,
                  seeds: list[int] | None = None) -> None:
    spec = design["pregate"]
    for seed in seeds or spec["seeds"]:
        for arm in arms or list(spec["arms"]):
            train_run(pregate_config(design, arm, seed, dirs), dirs.run_root(design) / "pregate" / f"{arm}_s{seed}")


def pregate_report(design: dict[str, Any], dirs: Dirs) -> dict[str, Any]:
    """The design's pre-gate rule on the band hold-out only (never the held-out test problems)."""
    design = with_base(design)
    spec = design["pregate"]
    task = task_of(design)
    held = band_holdout_examples(design, dirs)
    out = dirs.out(design, mkdir=True)
    cache_path = out / "pregate_band_p.json"
    cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    if "base" not in cache:
        cache["base"] = parts_of(design["train"]["model"], held, task).sum(axis=1).tolist()
    base = np.array(cache["base"])
    table: dict[str, Any] = {}
    for arm in spec["arms"]:
        runs = {s: dirs.run_root(design) / "pregate" / f"{arm}_s{s}" for s in spec["seeds"]}
        if not all((r / "final").exists() for r in runs.values()):
            continue
        row: dict[str, Any] = {"core_minutes": [float((r / "cpu_seconds").read_text()) / 60 for r in runs.values()]}
        for s, r in runs.items():
            write_logs(out / "logs" / "pregate", f"{arm}_s{s}", r)
        for step in spec["checkpoints"]:
            d = []
            for s, r in runs.items():
                key = f"{arm}_s{s}@{step}"
                if key not in cache:
                    cache[key] = parts_of(str(checkpoint_path(r, step, spec["max_steps"])), held, task).sum(axis=1).tolist()
                    cache_path.write_text(json.dumps(cache))
                d.append(100 * (np.array(cache[key]) - base))
            (iv,) = crossed_interval(np.stack(d)[:, :, None])
            row[str(step)] = {"mean": iv.mean, "lo": iv.lo, "hi": iv.hi,
                              "per_seed": [float(x.mean()) for x in d]}
        last = str(spec["checkpoints"][-1])
        row["certified"] = bool(row[last]["lo"] > spec["lower_bound_min"])
        table[arm] = row
    cache_path.write_text(json.dumps(cache))
    complete = len(table) == len(spec["arms"])
    last = str(spec["checkpoints"][-1])
    certified = [a for a, r in table.items() if r["certified"]]
    pool = certified or list(table)
    frozen = max(pool, key=lambda a: table[a][last]["lo"]) if (complete and pool) else None
    result = {"base_band_holdout_pass1": float(100 * base.mean()), "problems": len(held), "arms": table,
              "certified": certified, "frozen": frozen, "frozen_certified": bool(frozen in certified),
              "complete": complete}
    write(out, "pregate_band", result, pregate_band_markdown(design, result))
    return result


def pregate_band_markdown(design: dict[str, Any], result: dict[str, Any]) -> str:
    """``pregate_band.md``: each arm's Δ at each checkpoint, per seed at the last, certified or not; the frozen arm."""
    spec = design["pregate"]
    last = str(spec["checkpoints"][-1])
    frozen = result["frozen"]
    lines = [f"## Pre-gate on the band hold-out ({result['problems']} in-range band problems never trained on)", "",
             f"Base exact pass@1 at T = 1: {result['base_band_holdout_pass1']:.2f}. Δ in points, paired per problem, "
             f"crossed seeds × problems 95 % interval, seeds {spec['seeds']}.", "",
             "| arm | " + " | ".join(f"Δ pass@1 @{s}" for s in spec["checkpoints"]) + " | per seed @" + last +
             " | certified (lower bound > +%g) | core-min |" % spec["lower_bound_min"], "|---|" + "---|" * (len(spec["checkpoints"]) + 3)]
    for arm, row in result["arms"].items():
        lines.append(f"| {arm} | " + " | ".join(fmt(row[str(s)]) for s in spec["checkpoints"]) + " | " +
                     ", ".join(f"{x:+.2f}" for x in row[last]["per_seed"]) + f" | {'**yes**' if row['certified'] else 'no'} | "
                     + ", ".join(f"{m:.1f}" for m in row["core_minutes"]) + " |")
    lines += ["", f"Frozen arm: {frozen or '— (arms still running)'}"
              + ("" if frozen is None else (" (certified)" if result["frozen_certified"] else " (uncertified: no arm "
                                                                                               "passed the rule)"))]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------- gate
def gate_config(design: dict[str, Any], seed: int, dirs: Dirs) -> dict[str, Any]:
    pre = json.loads((dirs.out(design) / "pregate_band.json").read_text())
    if not pre.get("frozen"):
        raise SystemExit("the pre-gate has frozen no arm yet: run pregate to completion")
    gate = design["gate"]
    cfg = merged(with_base(design)["train"], design["pregate"]["arms"][pre["frozen"]] or {})
    cfg["task"] = {**cfg["task"], "train_subset": str(band_paths(design, dirs)[1])}
    cfg["max_steps"] = gate["max_steps"]
    cfg["save_steps"] = gate["max_steps"]
    cfg["keep_steps"] = list(gate["checkpoints"])
    cfg["seed"] = seed
    return cfg


def gate_runs(design: dict[str, Any], dirs: Dirs) -> dict[int, Path]:
    return {s: dirs.run_root(design) / "gate" / f"grpo_s{s}" for s in design["gate"]["seeds"]}


def gate_train(design: dict[str, Any], dirs: Dirs, seeds: list[int] | None = None) -> None:
    runs = gate_runs(design, dirs)
    for seed in seeds or design["gate"]["seeds"]:
        train_run(gate_config(design, seed, dirs), runs[seed])


def gate_report(design: dict[str, Any], dirs: Dirs) -> dict[str, Any]:
    """The design's step 4 on every finished GRPO seed."""
    design = with_base(design)
    gate = design["gate"]
    ks = gate["ks"]
    task, heldout = heldout_of(design)
    train_task = task_of(design)
    masks = strata_masks(design, heldout)
    inst = json.loads((dirs.out(design) / "instrument.json").read_text())
    k_l = {name: inst["strata"][name]["k_L"] or gate["k_fallback"] for name in design["strata"]}
    guess_proof = {name: inst["strata"][name]["k_L"] is not None for name in design["strata"]}
    temps = [float(t) for t in design["temperatures"]]
    t_probs = band_train_examples(design, design["temperature_problems"], dirs)
    band_held = band_holdout_examples(design, dirs)
    out = dirs.out(design) / "gate"
    out.mkdir(parents=True, exist_ok=True)
    cache_path = out / "p.json"
    cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}

    def measured(key: str, path: str, frontier: bool = False) -> dict[str, Any]:
        if key not in cache:
            best_t, by_t = best_temperature(lambda t: 100 * parts_of(path, t_probs, train_task, t).sum(axis=1).mean(), temps)
            row = {"parts": parts_of(path, heldout, task).tolist(), "best_t": best_t,
                   "band_train_by_t": {str(t): v for t, v in by_t.items()},
                   "best": parts_of(path, heldout, task, best_t).sum(axis=1).tolist(),
                   "band_holdout": float(100 * parts_of(path, band_held, train_task).sum(axis=1).mean())}
            if frontier:
                row["by_t"] = {str(t): parts_of(path, heldout, task, t).sum(axis=1).tolist() for t in temps}
            cache[key] = row
            cache_path.write_text(json.dumps(cache))
        return cache[key]

    base = measured("base", design["train"]["model"], frontier=True)
    runs = gate_runs(design, dirs)
    done = [s for s in gate["seeds"] if (runs[s] / "final").exists()]
    for s in done:
        write_logs(out / "logs", f"grpo_s{s}", runs[s])
    finals = {s: measured(f"seed{s}", str(runs[s] / "final")) for s in done}
    mids = {(s, c): measured(f"seed{s}@{c}", str(runs[s] / "snapshots" / f"step-{c}"))
            for s in done for c in gate["checkpoints"]}
    base_parts = np.array(base["parts"])
    base_p = base_parts.sum(axis=1)
    grpo_p = np.stack([np.array(finals[s]["parts"]).sum(axis=1) for s in done]) if done else np.zeros((0, len(heldout)))
    complete = len(done) == len(gate["seeds"])

    def delta(mask: np.ndarray, k: int, ref: np.ndarray | None = None) -> dict[str, float] | None:
        if len(done) < 2:
            return None
        ref = base_p if ref is None else ref
        d = passk(grpo_p[:, mask], [k]) - passk(ref[mask], [k])[None]
        (iv,) = crossed_interval(d)
        return {"mean": iv.mean, "lo": iv.lo, "hi": iv.hi, "p_two": min(1.0, 2 * iv.p_opposite)}

    rare, inn = design["rare_stratum"], "totals=in_range"
    family = {"N": (rare, k_l[rare]), "N256": (rare, 256), "L1": (inn, 1), "LK": (inn, k_l[inn])}
    deltas = {c: delta(masks[s], k) for c, (s, k) in family.items()}
    if all(deltas.values()):
        adjusted = holm([deltas[c]["p_two"] for c in family])
        levels = dict(zip(family, adjusted))
        for c, (s, k) in family.items():
            # the interval at the Holm step's level for this criterion (grae.compare.stats.holm_intervals' rule)
            step_alpha = dict(zip(family, holm_levels([deltas[x]["p_two"] for x in family])))[c]
            d = passk(grpo_p[:, masks[s]], [k]) - passk(base_p[masks[s]], [k])[None]
            (iv,) = crossed_interval(d, 1 - step_alpha)
            deltas[c].update({"holm_lo": iv.lo, "holm_hi": iv.hi, "p_holm": levels[c], "level": 1 - step_alpha})

    def rare_verdict(c: str) -> str | None:
        d = deltas[c]
        if d is None or "holm_hi" not in d:
            return None
        base_k = float(passk(base_p[masks[rare]], [family[c][1]]).mean())
        relative = -d["mean"] / base_k if base_k > 0 else float("nan")
        d["relative_loss"] = relative
        d["base"] = base_k
        if relative >= gate["relative_loss_min"] and d["holm_hi"] < -gate["absolute_floor"]:
            return "narrows"
        if d["holm_lo"] > gate["absolute_floor"]:
            return "widens"
        return "keeps"

    verdicts = {c: rare_verdict(c) for c in ("N", "N256")}
    curves = {name: {"base": passk(base_p[m], ks).mean(0).tolist(),
                     "grpo": passk(grpo_p[:, m], ks).mean(axis=(0, 1)).tolist() if done else None,
                     "grpo_minus_base": [vars(iv) for iv in crossed_interval(
                         passk(grpo_p[:, m], ks) - passk(base_p[m], ks)[None])] if len(done) >= 2 else None}
              for name, m in masks.items()}
    frontier_d: dict[str, Any] = {}
    for name in design["strata"]:
        m = masks[name]
        frontier_d[name] = {}
        for k in sorted({1, k_l[name], 256}):
            if len(done) < 2:
                continue
            _, dist = temperature_frontier({float(t): np.array(v)[m] for t, v in base["by_t"].items()},
                                           {"grpo": grpo_p[:, m]}, k)
            fd = dist["grpo"]
            frontier_d[name][str(k)] = {"mean": 100 * fd.interval.mean, "lo": 100 * fd.interval.lo,
                                        "hi": 100 * fd.interval.hi}
    best_p = np.stack([np.array(finals[s]["best"]) for s in done]) if done else None
    best_vs_best = {name: vars(crossed_interval(passk(best_p[:, masks[name]], [1])
                                                - passk(np.array(base["best"])[masks[name]], [1])[None])[0])
                    if len(done) >= 2 else None for name in design["strata"]}
    mass = {"base (step 0)": {name: {"L": float(100 * base_parts[m, 0].mean()), "G": float(100 * base_parts[m, 1].mean())}
                              for name, m in masks.items()}}
    for label, rows in ((f"GRPO step {c}", {s: mids[(s, c)] for s in done}) for c in gate["checkpoints"]):
        mass[label] = mass_rows(rows, masks)
    mass[f"GRPO step {gate['max_steps']}"] = mass_rows(finals, masks)
    minutes = [float((runs[s] / "cpu_seconds").read_text()) / 60 for s in done]
    per_seed = {str(s): {c: float(passk(grpo_p[i, masks[st]], [k]).mean()) for c, (st, k) in family.items()}
                for i, s in enumerate(done)}
    result = {"per_seed": per_seed, "seeds_done": done, "complete": complete, "k_L": k_l, "guess_proof": guess_proof,
              "frozen_arm": gate_config(design, 0, dirs)["trl"],
              "base_fingerprint": weights_fingerprint(ASSET), "criteria": deltas, "rare_verdicts": verdicts,
              "curves": curves, "delta_F": frontier_d, "best_T_vs_best_T_pass1": best_vs_best,
              "best_t": {"base": base["best_t"], **{str(s): finals[s]["best_t"] for s in done}},
              "band_holdout_pass1": {"base": base["band_holdout"], **{str(s): finals[s]["band_holdout"] for s in done}},
              "mass": mass, "core_minutes": minutes}
    write(out, "report", result, gate_markdown(design, result, ks))
    return result


def mass_rows(rows: dict[int, dict[str, Any]], masks: dict[str, np.ndarray]) -> dict[str, Any]:
    """Per stratum, the L and G mass (points) with a crossed seeds × problems interval."""
    out: dict[str, Any] = {}
    if not rows:
        return out
    parts = np.stack([np.array(r["parts"]) for r in rows.values()])  # [S, P, 2]
    for name, m in masks.items():
        ivs = crossed_interval(100 * parts[:, m, :]) if len(rows) >= 2 else None
        out[name] = {lab: ({"mean": ivs[j].mean, "lo": ivs[j].lo, "hi": ivs[j].hi} if ivs else
                           {"mean": float(100 * parts[:, m, j].mean())}) for j, lab in enumerate(("L", "G"))}
    return out


def gate_markdown(design: dict[str, Any], r: dict[str, Any], ks) -> str:
    rare = design["rare_stratum"]
    seeds = r["seeds_done"]
    pilot = "" if r["complete"] else f" (pilot: {len(seeds)} of {len(design['gate']['seeds'])} seeds; no verdict)"
    n, n256 = r["criteria"]["N"], r["criteria"]["N256"]

    def crit(c: str) -> str:
        d = r["criteria"][c]
        if not d:
            return "— (fewer than 2 seeds)"
        extra = f"; Holm {d['level'] * 100:.1f} % [{d['holm_lo']:+.2f}, {d['holm_hi']:+.2f}], p_holm {d['p_holm']:.3g}" \
            if "holm_lo" in d else ""
        return fmt(d) + extra

    lines = [f"## GRPO on the design-3 base{pilot}", ""]
    if n and "relative_loss" in n:
        lines += [f"**On the rare mode (the {rare} stratum) GRPO {r['rare_verdicts']['N']} pass@{r['k_L'][rare]}**: "
                  f"{n['base']:.2f} → {n['base'] + n['mean']:.2f}, Δ {crit('N')}, relative change "
                  f"{-100 * n['relative_loss']:+.1f} %; at pass@256 it {r['rare_verdicts']['N256']} "
                  f"({n256['base']:.2f} → {n256['base'] + n256['mean']:.2f}, Δ {crit('N256')}). "
                  f"In range, pass@1 Δ {crit('L1')}, pass@{r['k_L']['totals=in_range']} Δ {crit('LK')}. "
                  f"Cost: {sum(r['core_minutes']):.1f} core-minutes for {len(seeds)} runs.", "",
                  f"Per seed, {rare} pass@{r['k_L'][rare]} (base {n['base']:.2f}): "
                  + ", ".join(f"{s} {v['N']:.2f}" for s, v in r["per_seed"].items())
                  + f"; pass@256 (base {n256['base']:.2f}): "
                  + ", ".join(f"{s} {v['N256']:.2f}" for s, v in r["per_seed"].items())
                  + ". The verdicts are the design's: \"narrows\" needs the Holm-adjusted upper bound below "
                  f"−{design['gate']['absolute_floor']:g}, and anything short of that (or of \"widens\") reads "
                  "\"keeps\", i.e. narrowing not shown at the family level.", ""]
    lines += [f"Base `{PRESET}` ({r['base_fingerprint']}); seeds {', '.join(map(str, seeds))}; "
              f"{design['gate']['max_steps']} steps at the frozen arm; exact pass@k on the 600 held-out problems; "
              "crossed seeds × problems 95 % intervals; k per stratum: "
              + ", ".join(f"{s} {k}" + ("" if r["guess_proof"][s] else " (no k_L: not guess-proof, the design's "
                                         "fallback k)") for s, k in r["k_L"].items()) + ".", "",
              "| criterion (pre-registered) | Δ GRPO − base | verdict |", "|---|---|---|",
              f"| N: {rare} pass@{r['k_L'][rare]} | {crit('N')} | {r['rare_verdicts']['N'] or '—'} |",
              f"| N256: {rare} pass@256 | {crit('N256')} | {r['rare_verdicts']['N256'] or '—'} |",
              f"| L1: in-range pass@1 | {crit('L1')} | |",
              f"| LK: in-range pass@{r['k_L']['totals=in_range']} | {crit('LK')} | |", "",
              "Pass@k per stratum (base → GRPO, Δ with its interval):", ""]
    lines += ["| stratum | " + " | ".join(f"@{k}" for k in ks) + " |", "|---|" + "---|" * len(ks)]
    for name, c in r["curves"].items():
        if c["grpo"] is None:
            continue
        lines.append(f"| {name} | " + " | ".join(f"{b:.1f} → {g:.1f}" for b, g in zip(c["base"], c["grpo"])) + " |")
        if c["grpo_minus_base"]:
            lines.append(f"| Δ {name} | " + " | ".join(fmt(iv) for iv in c["grpo_minus_base"]) + " |")
    lines += ["", "Δ_F: GRPO at T = 1 above the base's temperature frontier of the same stratum (T = 0.1 … 1.2):", ""]
    for name, rows in r["delta_F"].items():
        lines.append(f"- {name}: " + "; ".join(f"k = {k}: {fmt(iv)}" for k, iv in rows.items()))
    lines += ["", "GRPO at its best T − the base at its best T (each chosen on band training problems), pass@1:", ""]
    lines += [f"- {name}: {fmt(iv) if iv else '—'}" for name, iv in r["best_T_vs_best_T_pass1"].items()]
    lines += [f"- best T: base {r['best_t']['base']}; " + ", ".join(f"seed {s} {t}" for s, t in r["best_t"].items()
                                                                  if s != "base")]
    lines += ["", "Strategy mass (exact pass@1 carried by each strategy, points):", "",
              "| model | " + " | ".join(f"{s}: L / G" for s in design["strata"]) + " |",
              "|---|" + "---|" * len(design["strata"])]
    for label, per in r["mass"].items():
        if per:
            lines.append(f"| {label} | " + " | ".join(
                f"{per[s]['L']['mean'] if isinstance(per[s]['L'], dict) else per[s]['L']:.3f} / "
                f"{per[s]['G']['mean'] if isinstance(per[s]['G'], dict) else per[s]['G']:.3f}" for s in design["strata"]) + " |")
    lines += ["", "Band hold-out pass@1: " + ", ".join(f"{k} {v:.2f}" for k, v in r["band_holdout_pass1"].items()),
              "", f"Core-minutes per run: {', '.join(f'{m:.1f}' for m in r['core_minutes'])}"]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------------- sample check
def sample_check(design: dict[str, Any], dirs: Dirs) -> dict[str, Any]:
    """Each GRPO final's sampled correct rate on a seeded draw of held-out problems (half from each stratum) beside
    its exact p, with the binomial z of each problem."""
    design = with_base(design)
    spec = design["sample_check"]
    task, heldout = heldout_of(design)
    masks = strata_masks(design, heldout)
    rng = np.random.default_rng(spec["seed"])
    pick = sorted(int(i) for name in design["strata"]
                  for i in rng.choice(np.flatnonzero(masks[name]), spec["problems"] // 2, replace=False))
    examples = [heldout[i] for i in pick]
    rows_out: dict[str, Any] = {}
    for s, run in gate_runs(design, dirs).items():
        if not (run / "final").exists():
            continue
        path = str(run / "final")
        p = parts_of(path, examples, task).sum(axis=1)
        model, tok = load_model(path)
        rows = sample_rows(model, tok, examples, task, spec["samples"], int(design["train"]["trl"]["max_completion_length"]))
        hits = Counter(str(r["question_id"]) for r in rows if r["label"])
        rate = np.array([hits[str(e["question_id"])] / spec["samples"] for e in examples])
        z = (rate - p) / np.sqrt(np.maximum(p * (1 - p), 1e-12) / spec["samples"])
        rows_out[str(s)] = {"exact": p.tolist(), "sampled": rate.tolist(), "z": z.tolist(),
                            "mean_exact": float(100 * p.mean()), "mean_sampled": float(100 * rate.mean()),
                            "max_abs_z": float(np.abs(z).max())}
    result = {"problems": [str(heldout[i]["question_id"]) for i in pick], "samples": spec["samples"], "seeds": rows_out}
    write(dirs.out(design, mkdir=True), "sample_check", result, sample_check_markdown(result))
    return result


def sample_check_markdown(r: dict[str, Any]) -> str:
    """``sample_check.md``: a row a GRPO seed."""
    lines = [f"## Sample check: {len(r['problems'])} held-out problems × {r['samples']} samples at T = 1", "",
             "| GRPO seed | exact mean p | sampled correct rate | max |z| |", "|---|---|---|---|"]
    lines += [f"| {s} | {x['mean_exact']:.2f} | {x['mean_sampled']:.2f} | {x['max_abs_z']:.2f} |"
              for s, x in r["seeds"].items()]
    return "\n".join(lines) + "\n"


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("step", choices=["check-base", "ship", "instrument", "band", "pregate-train", "pregate",
                                         "gate-train", "gate-report", "sample-check"])
    parser.add_argument("--design", type=Path, default=DESIGN)
    parser.add_argument("--arms", nargs="*")
    parser.add_argument("--seeds", nargs="*", type=int)
    Dirs.arguments(parser, REPORTS, RUNS)
    args = parser.parse_args(argv)
    design = load_design(args.design)
    dirs = Dirs(args.reports, args.runs)
    if args.step == "check-base":
        check_base(design, dirs)
    elif args.step == "ship":
        ship(design, dirs)
    elif args.step == "instrument":
        instrument(design, dirs)
    elif args.step == "band":
        band_design = dirs.run_root(design) / "band_design.yaml"
        band_design.parent.mkdir(parents=True, exist_ok=True)
        band_design.write_text(yaml.safe_dump(with_base(design), sort_keys=False))
        band(band_design, dirs)
    elif args.step == "pregate-train":
        pregate_train(design, dirs, args.arms, args.seeds)
    elif args.step == "pregate":
        pregate_report(design, dirs)
    elif args.step == "gate-train":
        gate_train(design, dirs, args.seeds)
    elif args.step == "gate-report":
        gate_report(design, dirs)
    else:
        sample_check(design, dirs)


if __name__ == "__main__":
    main()
