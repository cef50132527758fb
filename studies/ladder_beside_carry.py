"""tiny-ladder beside tiny-carry on R4's held-out problems: what R4's carry stage did to the base.

R4's base ``tiny-carry`` is ``tiny-ladder`` plus a stage of planted carry errors; the R4 reports compare GRPO with
tiny-carry only. This script evaluates both models exactly (every candidate answer teacher-forced, T = 1: the
gate's :func:`gate_common.candidate_probs`) on the 600 held-out problems of ``studies/design/decisive_r4.yaml``
and writes, per model and per operand-digit stratum (the largest operand's digits), exact pass@k, and where the
wrong-answer mass lies: the share at |answer − gold| in [8, 24] and exactly at 10 or 20 (the errors the stage
was meant to plant)::

    python studies/ladder_beside_carry.py --out studies/reports/decisive_r4
    python studies/ladder_beside_carry.py --design studies/design/agrae_fair_r4.yaml --temperature 0.5 \
        --out studies/reports/agrae_fair_r4

writes ``ladder_beside_carry.json`` and ``ladder_beside_carry.md`` there (one torch thread; ~8 min each on this
project's 2-core CPU). ``--design``: another R4 study's held-out problems; ``--temperature``: its evaluation's.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np
from gate_common import answer_index, candidate_probs, load_model, passk_curve, study_setup

DESIGN = Path("studies/design/decisive_r4.yaml")
MODELS = ("tiny-ladder", "tiny-carry")
SMEAR = (8, 24)  # |offset| range of the carry stage's smeared errors
PLANTED = (10, 20)  # the offsets the stage meant to plant


def digits(question: str) -> int:
    """The largest operand's digit count of a chain_sum question."""
    return max(len(n) for n in re.findall(r"\d+", question.split(":")[-1]))


def wrong_mass_shares(probs: np.ndarray, gold_index: np.ndarray, values: np.ndarray) -> dict[str, float]:
    """Shares (%) of the wrong-answer mass, each problem's wrong mass weighing 1: at |offset| in SMEAR, at exactly
    PLANTED."""
    offset = np.abs(values[None, :] - values[gold_index][:, None])
    wrong = probs.copy()
    wrong[np.arange(len(gold_index)), gold_index] = 0.0
    weights = wrong / np.maximum(wrong.sum(axis=1, keepdims=True), 1e-30) / len(gold_index)
    return {"smeared_8_24": float(100 * weights[(offset >= SMEAR[0]) & (offset <= SMEAR[1])].sum()),
            "exactly_10_20": float(100 * weights[np.isin(offset, PLANTED)].sum())}


def measure(out: Path, design: Path = DESIGN, temperature: float = 1.0) -> dict:
    study, _, task = study_setup(design)
    heldout = task.heldout(study.eval["num_problems"])
    answers, values, _, gold_index = answer_index(task, heldout)
    strata = np.array([digits(e["question"]) for e in heldout])
    result: dict = {"design": str(design), "temperature": temperature, "problems": len(heldout),
                    "candidates": len(answers), "models": {}}
    for name in MODELS:
        model, tok = load_model(name)
        probs = candidate_probs(model, tok, task, heldout, temperature)
        p = probs[np.arange(len(heldout)), gold_index]
        by = {"all": np.ones(len(heldout), bool)} | {f"{d}-digit": strata == d for d in sorted(set(strata))}
        result["models"][name] = {s: {"problems": int(m.sum()), "passk": passk_curve(p[m]),
                                      "wrong_mass": wrong_mass_shares(probs[m], gold_index[m], values)}
                                  for s, m in by.items()}
    (out / "ladder_beside_carry.json").write_text(json.dumps(result, indent=2) + "\n")
    (out / "ladder_beside_carry.md").write_text("\n".join(table(result)) + "\n")
    return result


def table(result: dict) -> list[str]:
    ks = list(next(iter(next(iter(result["models"].values())).values()))["passk"])
    lines = [f"## tiny-ladder beside tiny-carry ({result['design']}: its {result['problems']} held-out problems, exact, "
             f"T = {result['temperature']:g})", "",
             "| model | stratum | problems | " + " | ".join(f"pass@{k}" for k in ks)
             + f" | wrong mass at |offset| {SMEAR[0]}-{SMEAR[1]} (%) | at exactly ±10/±20 (%) |",
             "|---|---|---|" + "---|" * (len(ks) + 2)]
    for name, by in result["models"].items():
        for stratum, row in by.items():
            lines.append(f"| {name} | {stratum} | {row['problems']} | "
                         + " | ".join(f"{row['passk'][k]:.1f}" for k in ks)
                         + f" | {row['wrong_mass']['smeared_8_24']:.1f} | {row['wrong_mass']['exactly_10_20']:.1f} |")
    return lines + ["", f"`python studies/ladder_beside_carry.py --design {result['design']} --temperature "
                        f"{result['temperature']:g}` (this project's 2-core CPU, one thread)."]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path("studies/reports/decisive_r4"))
    ap.add_argument("--design", type=Path, default=DESIGN)
    ap.add_argument("--temperature", type=float, default=1.0)
    args = ap.parse_args(argv)
    result = measure(args.out, args.design, args.temperature)
    print("\n".join(table(result)))


if __name__ == "__main__":
    main()
