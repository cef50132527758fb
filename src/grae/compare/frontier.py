"""Checkpoint frontiers: every method's (pass@1, pass@k_max) path over training.

A method that ends with a higher pass@k_max than GRPO but a lower pass@1 may only have trained less:
GRPO stopped early could have had the same point. So compare evaluates every job at chosen fractions
of training (``frontier:`` in the study, default 10/25/50/75/100 %) and draws each method's path in
the (pass@1, pass@k_max) plane. The **baseline's path is the early-stopping frontier** every method
is judged against: a method is better than its baseline only where its point lies above that path
at equal pass@1 (:func:`grae.compare.frontier_report.above_frontier`). This module evaluates and
collects the checkpoints; :mod:`grae.compare.frontier_report` draws and reads the paths from a study's
table (:class:`grae.compare.results.StudyResults`).

Mechanics. The study's ``frontier`` fractions become each job's ``keep_steps`` (the train run keeps
the model at those steps under ``snapshots/step-N``, :class:`grae.train.callbacks.Snapshots`; TRL's
rotating checkpoints would delete them). After a job trains, :func:`evaluate_frontier` evaluates each
snapshot (and ``final/`` for 100 %) on the job's held-out problems into ``eval/frontier/step-N.jsonl``
— rows of the same format as ``eval/after.jsonl``, so ``grae passk`` reads them. ``frontier_eval:``
(``{num_problems, n, exact}``) makes these evaluations cheaper than the job's own, or exact (answer
enumeration, or a one-gold task's teacher-forced gold completion: :func:`grae.eval.runner.evaluate_exact`; ``n`` is
then the largest k). The study key
``eval:`` (:class:`grae.compare.grid.CompareConfig`) evaluates 100 % the same way and makes the whole
report read these rows. Each step's ``step-N.curve.json`` records the settings it was evaluated with
(a step evaluated with other settings is evaluated again) and its per-problem counts (for exact
rows, ``p`` and ``mass``). The base model is the path's 0 % point (``<output_dir>/base/frontier.jsonl``,
or the shared base evaluation).
``python -m grae.compare.frontier JOB_YAML FRACTION…`` runs :func:`evaluate_frontier` for one job
(the compare runner does, in the job's own process slot).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grae.io import atomic_write_json

if TYPE_CHECKING:
    from grae.train.config import TrainConfig

#: default training fractions of a frontier (0 % is the base model)
DEFAULT_FRACTIONS = (0.1, 0.25, 0.5, 0.75, 1.0)
FRONTIER_DIR = "frontier"
#: held-out settings a study may give its own evaluations (frontier_eval / eval); ``heldout_params``: task parameters
#: merged over the jobs' ``task.params`` for every held-out evaluation compare makes (the held-out problems of another
#: filter or with strata, e.g. ``{totals: any, heldout_strata: [totals]}`` for a study that trains on in-range chains)
EVAL_KEYS = ("num_problems", "n", "exact", "heldout_params")


def check_fractions(fractions: Any, where: str = "frontier") -> list[float]:
    """A sorted list of distinct fractions in (0, 1]; ValueError naming ``where`` otherwise."""
    if not isinstance(fractions, (list, tuple)) or not all(
            isinstance(f, (int, float)) and not isinstance(f, bool) and 0 < f <= 1 for f in fractions):
        raise ValueError(f"{where}: expected a list of training fractions in (0, 1], e.g. [0.25, 0.5, 1.0]; "
                         f"got {fractions!r} ([] turns the frontier off)")
    return sorted({float(f) for f in fractions})


def frontier_steps(max_steps: int, fractions: Sequence[float]) -> dict[float, int]:
    """``{fraction: training step}``: step = round(f · max_steps), at least 1."""
    return {f: max(1, min(max_steps, round(f * max_steps))) for f in fractions}


def keep_steps(max_steps: int, fractions: Sequence[float]) -> list[int]:
    """The snapshot steps a job must keep: every frontier step except the last (that one is ``final/``)."""
    return sorted({s for s in frontier_steps(max_steps, fractions).values() if s < max_steps})


def frontier_eval_config(cfg: TrainConfig, frontier_eval: dict[str, Any] | None) -> TrainConfig:
    """``cfg`` with ``frontier_eval``'s held-out settings (num_problems, n) in place of its own (``exact``
    is not a train setting: see :func:`is_exact`); with ``heldout_params`` its task's parameters merged over the
    job's, and no ``train_subset`` (an evaluation reads the held-out split and the verifier only)."""
    import dataclasses

    sizes = {k: v for k, v in (frontier_eval or {}).items() if k not in ("exact", "heldout_params")}
    heldout_params = (frontier_eval or {}).get("heldout_params")
    if heldout_params:
        cfg = dataclasses.replace(cfg, task=dataclasses.replace(cfg.task, params={**cfg.task.params, **heldout_params},
                                                                train_subset=None))
    if not sizes:
        return cfg
    return dataclasses.replace(cfg, eval=dataclasses.replace(cfg.eval, **sizes))


def is_exact(frontier_eval: dict[str, Any] | None) -> bool:
    """Whether the study's own evaluations are exact (answer enumeration) rather than sampled."""
    return bool((frontier_eval or {}).get("exact"))


def step_settings(cfg: TrainConfig, frontier_eval: dict[str, Any] | None) -> dict[str, Any]:
    """What a frontier step's evaluation is done with (recorded in ``step-N.curve.json``)."""
    e = frontier_eval_config(cfg, frontier_eval).eval
    heldout_params = (frontier_eval or {}).get("heldout_params")
    return {"num_problems": e.num_problems, "n": e.n, "exact": is_exact(frontier_eval),
            **({"heldout_params": heldout_params} if heldout_params else {})}


def step_done(rows: Path, settings: dict[str, Any]) -> bool:
    """``rows``' step is evaluated with ``settings`` (its curve file exists and records them; a curve
    file from before settings were recorded holds sampled rows)."""
    import json

    path = curve_path(rows)
    if not path.exists():
        return False
    recorded = json.loads(path.read_text()).get("settings")
    return recorded == settings if recorded is not None else not settings.get("exact")


def counts_record(counts) -> dict[str, Any]:
    """The per-problem counts of a curve file: ``{"counts": {q: [n, c]}}`` and, for exact counts,
    ``"exact": {q: [p, mass]}`` (c = p·n is not an integer)."""
    record: dict[str, Any] = {"counts": {q: [int(n), int(round(float(c)))] for q, n, c in
                                         zip(counts.question_ids, counts.n, counts.c)}}
    if counts.p is not None:
        record["exact"] = {q: [float(p), float(m)] for q, p, m in zip(counts.question_ids, counts.p, counts.mass)}
    return record


def counts_from_record(record: dict[str, Any], where: str = "curve"):
    """:class:`grae.eval.stats.ProblemCounts` of a curve file (:func:`counts_record`), checked as a summary's counts
    are (:func:`grae.compare.counts_json.counts_from_json`: integers, ``n >= 1``, ``0 <= c <= n``, probabilities in
    [0, 1]); anything else raises ``ValueError`` naming ``where`` (the file) and the entry."""
    from grae.compare.counts_json import counts_from_json

    counts = record.get("counts") if isinstance(record, dict) else None
    if not isinstance(counts, dict) or not counts or not all(isinstance(v, list) and len(v) == 2 for v in counts.values()):
        raise ValueError(f"{where}: expected {{\"counts\": {{question id: [n, c]}}}}, the file grae compare writes; "
                         "delete it to evaluate that step again")
    exact = record.get("exact")
    if exact is not None and not (isinstance(exact, dict) and all(isinstance(exact.get(q), list) and len(exact[q]) == 2
                                                                  for q in counts)):
        raise ValueError(f"{where}.exact: expected {{question id: [p, mass]}} for every question of counts")
    ids = list(counts)
    table: dict[str, Any] = {"q": ids, "n": [counts[q][0] for q in ids]}
    if exact is None:
        table["c"] = [counts[q][1] for q in ids]
    else:
        table |= {"p": [exact[q][0] for q in ids], "mass": [exact[q][1] for q in ids]}
    return counts_from_json(table, ids, where)


def rows_path(job_dir: Path, step: int) -> Path:
    return Path(job_dir) / "eval" / FRONTIER_DIR / f"step-{step}.jsonl"


def curve_path(rows: Path) -> Path:
    """``step-N.curve.json``: the pass@k of finished frontier rows (written last: the step is done)."""
    return rows.with_name(rows.stem + ".curve.json")


def evaluate_frontier(job_yaml: Path, fractions: Sequence[float], frontier_eval: dict[str, Any] | None = None,
                      log=print) -> dict[int, Path]:
    """Evaluate one finished job at each frontier step (resumable: a step already evaluated with these
    settings is kept); returns ``{step: rows path}``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grae.data import get_task
    from grae.eval.records import read_rows
    from grae.eval.stats import count_problems
    from grae.train.callbacks import snapshot_path
    from grae.train.config import TrainConfig as _TrainConfig
    from grae.train.config import from_dict, validate
    from grae.train.run import evaluate_heldout
    from grae.yaml_io import load_yaml

    job_dir = Path(job_yaml).parent
    cfg = from_dict(_TrainConfig, load_yaml(Path(job_yaml).read_text()), "")
    validate(cfg)
    settings = step_settings(cfg, frontier_eval)
    exact = is_exact(frontier_eval)
    cfg = frontier_eval_config(cfg, frontier_eval)
    task = get_task(cfg.task.name, **cfg.task.params)
    heldout = task.heldout(cfg.eval.num_problems)
    out: dict[int, Path] = {}
    for step in sorted(set(frontier_steps(cfg.max_steps, fractions).values())):
        weights = job_dir / "final" if step == cfg.max_steps else snapshot_path(job_dir, step)
        if not (weights / "config.json").exists():
            log(f"frontier: no model at step {step} ({weights}); skipped")
            continue
        path = rows_path(job_dir, step)
        after = job_dir / "eval" / "after.jsonl"
        if step == cfg.max_steps and not frontier_eval and cfg.eval.enabled and (job_dir / "eval" / "summary.json").exists():
            counts = count_problems(read_rows(after))  # 100 % with the job's own settings: its after rows
            atomic_write_json(curve_path(path), {"step": step, "rows": str(after), "settings": settings,
                                                 **counts_record(counts)})
            out[step] = after
            continue
        if step_done(path, settings):
            log(f"frontier: step {step} already evaluated with {settings}")
            out[step] = path
            continue
        # fp32 wherever it runs: on CUDA (a lent GPU) the exact log-probs agree with the CPU's to float rounding
        device = "cuda" if torch.cuda.is_available() else "cpu"
        model = AutoModelForCausalLM.from_pretrained(weights, dtype=torch.float32).to(device)
        tokenizer = AutoTokenizer.from_pretrained(weights)
        curve = evaluate_heldout(cfg, model, tokenizer, heldout, task, path,
                                 lambda line, s=step: log(f"step {s} {line}"), identity=f"{cfg.output_dir}@step-{step}",
                                 exact=exact)
        counts = count_problems(read_rows(path))
        atomic_write_json(curve_path(path), {"step": step, "settings": settings,
                                             "passk": {str(k): v for k, v in curve.items()}, **counts_record(counts)})
        out[step] = path
    return out


def collect_frontier(jobs, fractions: Sequence[float], max_steps: int) -> dict[str, dict[float, dict[int, Any]]]:
    """``{method: {fraction: {seed: ProblemCounts}}}`` from the jobs' finished frontier evaluations: the
    per-problem counts in ``step-N.curve.json`` (what bench/gpu_compare.sh brings back; the rows stay
    behind)."""
    import json

    steps = frontier_steps(max_steps, fractions)
    data: dict[str, dict[float, dict[int, Any]]] = {}
    for job in jobs:
        for f, step in steps.items():
            path = curve_path(rows_path(job.output_dir, step))
            if path.exists():
                counts = counts_from_record(json.loads(path.read_text()), str(path))
                data.setdefault(job.method, {}).setdefault(f, {})[job.seed] = counts
    return data


def main(argv: Sequence[str] | None = None) -> None:
    """``python -m grae.compare.frontier JOB_YAML FRACTION… [--num-problems N] [--n N] [--exact]``."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m grae.compare.frontier")
    p.add_argument("job_yaml", type=Path)
    p.add_argument("fractions", type=float, nargs="+")
    p.add_argument("--num-problems", type=int, default=None)
    p.add_argument("--n", type=int, default=None)
    p.add_argument("--exact", action="store_true", help="exact pass@k by answer enumeration (n = largest k)")
    p.add_argument("--heldout-params", type=json.loads, default=None,
                   help="JSON task parameters merged over the job's for the held-out problems")
    a = p.parse_args(argv)
    settings: dict[str, Any] = {k: v for k, v in (("num_problems", a.num_problems), ("n", a.n)) if v is not None}
    if a.exact:
        settings["exact"] = True
    if a.heldout_params:
        settings["heldout_params"] = a.heldout_params
    evaluate_frontier(a.job_yaml, check_fractions(a.fractions), settings or None)


if __name__ == "__main__":
    main(sys.argv[1:])
