"""What the gate study scripts share (``gate_criteria.py``, ``gate_v2.py``, ``gate_v3.py``, ``gate_v3_d3.py``,
``ladder_beside_carry.py``): designs and tasks, model loading and exact probabilities, pass@k, counted training runs
and their committed logs, the band files and their hold-out, verdicts and formatting, and the trace instrument
(exact pass@k of a one-answer trace task beside references with no computation). A script imports it by name: run
as ``python studies/<script>.py`` from the repository root, this folder is its ``sys.path[0]``.

Nothing here keeps a path of its own: every function that reads or writes a report or a run takes its folder (a
:class:`Dirs`, or the folder itself) as an argument.
"""

from __future__ import annotations

import json
import math
import os
import resource
import shutil
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from grae.yaml_io import load_yaml

KS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
#: per-step keys of metrics.jsonl kept in the committed training logs
LOG_KEYS = ("step", "reward", "reward_std", "frac_reward_zero_std", "entropy", "grad_norm", "learning_rate",
            "completions/mean_length", "completions/clipped_ratio", "grae/omega", "grae/acr", "grae/frac_all_correct",
            "grae/frac_all_wrong", "grae/frac_dropped", "grae/gen_batches", "step_time")


@dataclass(frozen=True)
class Dirs:
    """Where a gate script writes: its committed reports and its (uncommitted) runs, a folder a design under each."""

    reports: Path
    runs: Path

    @staticmethod
    def arguments(parser, reports: Path, runs: Path) -> None:
        """``--reports`` and ``--runs`` on a script's parser, with the script's defaults."""
        parser.add_argument("--reports", type=Path, default=reports, help="the reports' folder (a folder a design)")
        parser.add_argument("--runs", type=Path, default=runs, help="the runs' folder (a folder a design)")

    def out(self, design: dict[str, Any], mkdir: bool = False) -> Path:
        """The design's report folder (created when ``mkdir``)."""
        path = self.reports / design["name"]
        if mkdir:
            path.mkdir(parents=True, exist_ok=True)
        return path

    def run_root(self, design: dict[str, Any]) -> Path:
        """The design's run folder."""
        return self.runs / design["name"]


# ------------------------------------------------------------------------------------------------ designs, tasks
def load_design(path: Path, required: tuple[str, ...] = ()) -> dict[str, Any]:
    """The design file at ``path``; a key of ``required`` it lacks stops the script naming it."""
    design = load_yaml(Path(path).read_text())
    for key in required:
        if key not in design:
            raise SystemExit(f"{path}: missing key {key!r}")
    return design


def task_of(design: dict[str, Any], heldout: bool = False):
    """The design's training task; ``heldout``: with the design's ``heldout_params`` over its parameters (the
    two-mode designs train on in-range chains and hold out both kinds)."""
    from grae.data import get_task

    spec = design["train"]["task"]
    params = {**spec.get("params", {}), **(design.get("heldout_params", {}) if heldout else {})}
    return get_task(spec["name"], **params)


def heldout_of(design: dict[str, Any]):
    """``(held-out task, its first heldout_problems problems)``."""
    task = task_of(design, heldout=True)
    return task, task.heldout(design["heldout_problems"])


def strata_masks(design: dict[str, Any], heldout) -> dict[str, np.ndarray]:
    """``"all"`` and, when the held-out split is stratified, one mask per stratum (``"totals=in_range"``)."""
    task = task_of(design, heldout=True)
    keys = task.heldout_strata
    masks = {"all": np.ones(len(heldout), dtype=bool)}
    if keys:
        labels = [",".join(f"{k}={v}" for k, v in zip(keys, task.stratum(e))) for e in heldout]
        for label in sorted(set(labels)):
            masks[label] = np.array([lab == label for lab in labels])
    return masks


def merged(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``over``'s leaves written over it, nested mappings merged; neither argument is changed."""
    out = dict(base)
    for key, value in over.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def study_setup(design: Path):
    """A ``grae compare`` design's study, its base train config (with its overrides) and its task."""
    from grae.compare.grid import load_compare_config
    from grae.data import get_task

    study = load_compare_config(design)
    job = study.jobs()[0]
    cfg = study.train_config(job)
    task = get_task(cfg.task.name, **cfg.task.params)
    return study, cfg, task


# ------------------------------------------------------------------------------------- models, exact probabilities
def load_model(path: str):
    """``(model, tokenizer)`` of a preset name or a model folder, float32, in eval mode; torch on one thread."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grae.presets import resolve_model

    torch.set_num_threads(1)
    resolved = resolve_model(path)
    return AutoModelForCausalLM.from_pretrained(resolved, dtype=torch.float32).eval(), AutoTokenizer.from_pretrained(resolved)


def gold_probs(model, tok, examples, task, temperature: float = 1.0, batch: int | None = None) -> np.ndarray:
    """``[P]`` exact probability that one sample at ``temperature`` (top_p = 1) is accepted: every gold completion
    the task accepts, teacher-forced and summed (:func:`grae.eval.gold.gold_probs`; ``batch`` completions a forward,
    its default when None)."""
    from grae.eval.gold import gold_probs as teacher_forced

    return teacher_forced(model, tok, examples, task, temperature=temperature, **({} if batch is None else {"batch": batch}))


def answer_index(task, examples) -> tuple[list[str], np.ndarray, dict[str, int], np.ndarray]:
    """The task's answer set, the answers' integer values, each answer's index, and each example's gold index."""
    answers = task.answer_set()
    index = {a: i for i, a in enumerate(answers)}
    gold_index = np.array([index[str(e["answer"]).strip()] for e in examples])
    return answers, np.array([int(a) for a in answers]), index, gold_index


def candidate_probs(model, tok, task, examples, temperature: float) -> np.ndarray:
    """``[problems, candidates]`` probabilities of every answer of the task's set (exact enumeration)."""
    from grae.eval.exact import CandidateScorer

    answers = task.answer_set()
    scorer = CandidateScorer(model, tok, [task.answer_completion(a) for a in answers], temperature=temperature,
                             top_p=1.0, max_tokens=None)
    return np.stack([np.exp(scorer.logprobs(e["prompt"])) for e in examples])


def sample_rows(model, tok, examples, task, n: int, max_tokens: int) -> list[dict[str, Any]]:
    """``n`` samples a problem at T = 1 (top_p = 1, seed 0), one row a sample with its label."""
    from grae.eval.runner import evaluate

    result = evaluate(model, tok, examples, task, n=n, temperature=1.0, top_p=1.0, max_tokens=max_tokens,
                      batch_size=512, seed=0)
    return result.rows or []


def best_temperature(pass1: Callable[[float], float], temperatures) -> tuple[float, dict[float, float]]:
    """The temperature of the highest ``pass1(T)`` (points, on training problems) and every T's value."""
    by_t = {float(t): float(pass1(float(t))) for t in temperatures}
    return max(by_t, key=lambda t: by_t[t]), by_t


# -------------------------------------------------------------------------------------------------------- pass@k
def passk_curve(p: np.ndarray, ks=KS) -> dict[int, float]:
    """Exact pass@k = mean over problems of 1 − (1 − p)^k, in points."""
    return {k: float(100 * np.mean(1 - (1 - np.clip(p, 0, 1)) ** k)) for k in ks}


def passk(p: np.ndarray, ks) -> np.ndarray:
    """``[..., K]`` exact pass@k in points for p of any shape."""
    p = np.clip(np.asarray(p, dtype=np.float64), 0.0, 1.0)[..., None]
    return 100 * (1 - (1 - p) ** np.asarray(ks, dtype=np.float64))


# ---------------------------------------------------------------------------------------------------------- runs
def run_counting_cpu(cmd: list[str], seconds: Path) -> None:
    """Run ``cmd`` (one torch thread) and write the CPU seconds it used (user + system) to the file ``seconds``: a
    resumed run (``--resume`` in ``cmd``) adds them to its earlier processes'."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    subprocess.run(cmd, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    earlier = float(seconds.read_text()) if "--resume" in cmd and seconds.exists() else 0.0
    seconds.write_text(f"{earlier + used:.1f}\n")


def grae_train(cfg_path: Path, out: Path, *args: str) -> None:
    """``grae train cfg_path [args]`` into ``out``, resumed where a run stopped (``out/run.json``), its CPU seconds
    counted in ``out/cpu_seconds``."""
    cmd = [sys.executable, "-m", "grae.cli", "train", str(cfg_path), *args, "--output-dir", str(out), "--no-progress",
           *(["--resume"] if (out / "run.json").exists() else [])]
    print(" ".join(cmd), flush=True)
    run_counting_cpu(cmd, out / "cpu_seconds")


def train_run(cfg: dict[str, Any], out: Path) -> Path:
    """``grae train`` of ``cfg`` (written beside ``out`` as ``<out>.yaml``) into ``out``; a finished run is kept."""
    if (out / "final").exists():
        return out
    cfg_path = out.parent / f"{out.name}.yaml"
    cfg_path.parent.mkdir(parents=True, exist_ok=True)
    cfg_path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    grae_train(cfg_path, out)
    return out


def checkpoint_path(out: Path, step: int, max_steps: int) -> Path:
    """A run's model at ``step``: its final model at ``max_steps``, else the kept snapshot."""
    return out / "final" if step == max_steps else out / "snapshots" / f"step-{step}"


def write_logs(logs: Path, name: str, out: Path) -> None:
    """The run's committed training log under ``logs``: per-step :data:`LOG_KEYS`, its run.json and CPU seconds."""
    from grae.train.rundir import read_metrics

    logs.mkdir(parents=True, exist_ok=True)
    rows = [{k: r[k] for k in LOG_KEYS if k in r} for r in read_metrics(out / "metrics.jsonl")]
    (logs / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    shutil.copyfile(out / "run.json", logs / f"{name}.run.json")
    shutil.copyfile(out / "cpu_seconds", logs / f"{name}.cpu_seconds")


# ---------------------------------------------------------------------------------------------------------- band
def band_paths(design: dict[str, Any], dirs: Dirs) -> tuple[Path, Path, Path]:
    """``(pool band file, training file, band hold-out file)``; a design with ``band_design`` uses that design's."""
    owner = load_design(Path(design["band_design"])) if "band_design" in design else design
    root = dirs.run_root(owner)
    return root / "band.jsonl", root / "band_train.jsonl", root / "band_holdout.jsonl"


def band(design_path: Path, dirs: Dirs) -> None:
    """``grae data band`` on the design's pool, then ``holdout`` band problems (a seeded draw) kept out of training;
    the band file's header and counts go to ``band.json`` in the design's report folder."""
    from grae.data.band import read_band, write_band

    design = load_design(design_path)
    spec, cfg = design["band"], design["train"]
    whole, train_file, holdout_file = band_paths(design, dirs)
    whole.parent.mkdir(parents=True, exist_ok=True)
    params = [f"--param={k}={v}" for k, v in cfg["task"].get("params", {}).items()]
    cmd = [sys.executable, "-m", "grae.cli", "data", "band", "--model", cfg["model"], "--task", cfg["task"]["name"],
           *params, "--pool", str(spec["pool"]), "--seed", str(spec["pool_seed"]), "--lo", str(spec["lo"]),
           "--hi", str(spec["hi"]), "--temperature", str(spec["temperature"]), "--exact",
           "--max-tokens", str(cfg["trl"]["max_completion_length"]), "--batch-size", "128", "-o", str(whole)]
    cpu = whole.parent / "band.cpu_seconds"
    if not whole.exists():
        print(" ".join(cmd), flush=True)
        run_counting_cpu(cmd, cpu)
    header, rows = read_band(whole)
    rng = np.random.default_rng(spec["pool_seed"])
    held = set(rng.choice(len(rows), size=min(spec["holdout"], len(rows) // 4), replace=False).tolist())
    write_band(train_file, header, [r for i, r in enumerate(rows) if i not in held])
    write_band(holdout_file, header, [r for i, r in enumerate(rows) if i in held])
    out = dirs.out(design, mkdir=True)
    rates = np.array([r["pass_rate"] for r in rows])
    summary = {"header": header, "kept": len(rows), "train": len(rows) - len(held), "holdout": len(held),
               "mean_pass_rate": float(rates.mean()),
               "expected_informative_groups_G8": float(np.mean(1 - rates ** 8 - (1 - rates) ** 8)),
               "cpu_seconds": float(cpu.read_text()) if cpu.exists() else None}
    (out / "band.json").write_text(json.dumps(summary, indent=1) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "header"}))


def pool_examples(design: dict[str, Any], question_ids: set[str]) -> list[dict[str, Any]]:
    """The band pool's problems (the design's task, its ``band`` pool and seed) whose question id is listed."""
    pool = task_of(design).train(design["band"]["pool"], seed=design["band"]["pool_seed"])
    return [e for e in pool if str(e["question_id"]) in question_ids]


def band_holdout_examples(design: dict[str, Any], dirs: Dirs) -> list[dict[str, Any]]:
    """The band hold-out problems as task examples (same prompts and golds as training would see)."""
    from grae.data.band import read_band

    _, rows = read_band(band_paths(design, dirs)[2])
    wanted = {r["question_id"] for r in rows}
    found = pool_examples(design, wanted)
    if len(found) != len(wanted):
        raise SystemExit(f"band hold-out: {len(wanted) - len(found)} problems not found in the task's pool again")
    return found


def band_train_examples(design: dict[str, Any], n: int, dirs: Dirs) -> list[dict[str, Any]]:
    """The first ``n`` problems of the band's training file as task examples."""
    from grae.data.band import read_band

    _, rows = read_band(band_paths(design, dirs)[1])
    return pool_examples(design, {r["question_id"] for r in rows[:n]})


# -------------------------------------------------------------------------------------------- verdicts, writing
def policy_rows(table: dict[str, dict[int, float]], ks) -> list[str]:
    """A markdown table: a policy a row, its pass@k at each of ``ks`` (points, one decimal)."""
    lines = ["| policy | " + " | ".join(f"pass@{k}" for k in ks) + " |", "|---|" + "---|" * len(ks)]
    return lines + [f"| {name} | " + " | ".join(f"{curve[k]:.1f}" for k in ks) + " |" for name, curve in table.items()]


def verdict(passes: bool, fails: bool, complete: bool) -> str:
    """A criterion's verdict: it passes only with every seed the design names; with fewer (a pilot) it can only
    fail, and anything else reads "undecided (pilot)"."""
    return "pass" if (passes and complete) else ("FAIL" if fails else "undecided (pilot)")


def fmt(iv: dict[str, float] | None, places: int = 2) -> str:
    """``mean [lo, hi]`` of an interval, signed, ``places`` decimals; "—" for none."""
    return "—" if not iv else f"{iv['mean']:+.{places}f} [{iv['lo']:+.{places}f}, {iv['hi']:+.{places}f}]"


def write(out: Path, name: str, result: dict[str, Any], markdown: str) -> None:
    """``<name>.json`` and ``<name>.md`` under ``out``; the markdown printed."""
    (out / f"{name}.json").write_text(json.dumps(result, indent=1, default=float) + "\n")
    (out / f"{name}.md").write_text(markdown)
    print(markdown)


# ------------------------------------------------------------------------------------------- the trace instrument
TRACE_DECIDING_KS = (64, 128, 256)
TRACE_TEMPERATURES = (0.3, 0.5, 0.7, 1.0)
TRACE_TEMPERATURE_PROBLEMS = 200
TRACE_SAMPLED_N = 64
S_BAND = (1 / 1024, 1 / 16)
S_MIN = 150


def parse_trace(text: str) -> list[int] | None:
    """The integers of a completion's first line, or None when it holds anything else."""
    line = text.strip().split("\n", 1)[0].split()
    try:
        return [int(v) for v in line]
    except ValueError:
        return None


def trace_instrument(design: dict[str, Any], design_path: Path, out: Path) -> dict[str, Any]:
    """The base alone on a one-answer trace task (``chain_trace``), before any training; writes ``base.json``,
    ``base.md`` and ``base_p.npy`` (p, the oracle's, the best-T base's, each derived-from model's) under ``out``.

    Every pass@k is exact: p = π(" " + gold + EOS | prompt) at T = 1 (top_p = 1), teacher-forced.

    - the base's exact pass@k; the **format-only oracle** ``p / m`` with ``m`` the share of the problem's samples
      (n = 64) whose first line is a well-formed trace (the right number of integers) — criterion a;
    - references with no computation — criterion b: the **near-miss guesser**, each running total uniform on
      gold ± w_j (w_j = the base's mean |error| of total j over its wrong totals, rounded up), ``p = Π_j 1/(2 w_j + 1)``;
      the **answer-prior guesser** (the gold trace's frequency among the first seed's training traces); the **base's
      own wrong answers** (the gold trace's frequency among all the base's wrong sampled traces, pooled over problems:
      a guesser replaying the base's most likely mistakes with no look at the problem);
    - the **sharpening reference**: the base at its best temperature (exact pass@1 on 200 training problems over
      T in 0.3 … 1.0), its held-out curve; the **models the base was derived from** (the design's ``derived_from``);
    - the deciding ``k_L``: the largest k in (64, 128, 256) with base pass@k ≤ 90 and every reference ≤ 10;
    - the declared subset ``S``: held-out problems whose base p lies in [1/1024, 1/16] (rarely solved, where large-k
      coverage lives), used for d only when it has ≥ 150 problems;
    - a sampled check (the same samples): sampled pass@k beside exact on those problems.
    """
    from grae.data import get_task
    from grae.metrics import pass_at_k_many

    task = task_of(design)
    chain_trace = get_task("chain_trace")
    train_cfg = design["train"]
    heldout = task.heldout(design.get("heldout_problems", 600))
    model, tok = load_model(train_cfg["model"])
    max_tokens = int(train_cfg["eval"]["max_tokens"])
    t0 = time.time()

    def exact(m, t, examples, temperature: float = 1.0) -> np.ndarray:
        return gold_probs(m, t, examples, chain_trace, temperature, batch=128)

    p = exact(model, tok, heldout)
    rows = sample_rows(model, tok, heldout, task, TRACE_SAMPLED_N, max_tokens)
    by_q: dict[str, list[dict]] = {}
    for r in rows:
        by_q.setdefault(str(r["question_id"]), []).append(r)
    gold_traces = {str(e["question_id"]): [int(v) for v in str(e["answer"]).split()] for e in heldout}
    sampled = {q: [parse_trace(str(r["response"])) for r in rs] for q, rs in by_q.items()}  # each response once
    in_format = np.array([np.mean([t is not None and len(t) == len(gold_traces[q]) for t in sampled[q]])
                          for q in gold_traces])
    oracle = np.where(in_format > 0, p / np.maximum(in_format, 1 / TRACE_SAMPLED_N), p)
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

    sub = train[:TRACE_TEMPERATURE_PROBLEMS]
    by_t = {t: float(100 * exact(model, tok, sub, t).mean()) for t in TRACE_TEMPERATURES}
    best_t = max(by_t, key=lambda t: by_t[t])
    p_best = p if best_t == 1.0 else exact(model, tok, heldout, best_t)

    derived = {}
    for name in design.get("derived_from", []):
        m2, t2 = load_model(name)
        derived[name] = exact(m2, t2, heldout)

    sampled_c = np.array([sum(bool(r["label"]) for r in by_q[str(e["question_id"])]) for e in heldout])
    sampled_curve = {k: float(100 * pass_at_k_many(np.full(len(sampled_c), TRACE_SAMPLED_N), sampled_c, k).mean())
                     for k in KS if k <= TRACE_SAMPLED_N}
    table = {"base (exact)": passk_curve(p), "format-only oracle": passk_curve(oracle),
             f"near-miss guesser (w = {w}: the base's mean |error| per running total)": passk_curve(near),
             "answer-prior guesser (training traces)": passk_curve(prior),
             "the base's own wrong answers (pooled)": passk_curve(base_wrong),
             f"base at its best temperature (T = {best_t})": passk_curve(p_best),
             **{f"derived from: {name}": passk_curve(q) for name, q in derived.items()}}
    references = [n for n in table if n.startswith(("near-miss", "answer-prior", "the base's own"))]
    base_curve = table["base (exact)"]
    ok = [k for k in TRACE_DECIDING_KS if base_curve[k] <= 90 and all(table[n][k] <= 10 for n in references)]
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
        "sampled_check": {"n": TRACE_SAMPLED_N, "sampled": sampled_curve,
                          "exact": {k: base_curve[k] for k in sampled_curve}},
        "seconds": round(time.time() - t0, 1),
        **({"heldout_in_base_sft_stream": overlap} if overlap is not None else {}),
    }
    out.mkdir(parents=True, exist_ok=True)
    write(out, "base", result, trace_instrument_markdown(result))
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


def trace_instrument_markdown(r: dict[str, Any]) -> str:
    """``base.md`` of :func:`trace_instrument`'s result."""
    ks = (1, 16, 64, 128, 256)
    lines = [f"## The base alone ({r['model']}; {r['problems']} held-out problems, exact, T = 1)", "",
             *policy_rows(r["table"], ks)]
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
              f"**Deciding k_L: {r['deciding_k']}** (largest k in {TRACE_DECIDING_KS} with base ≤ 90 and every "
              "reference with no computation ≤ 10).", ""]
    return "\n".join(lines)
