"""The teacher-forced probes behind a study's mechanism rows (``mechanism:``, :mod:`grae.compare.mechanism`).

At each probe step of a job (the study's ``mechanism.steps`` above 0, and its last step) and once for the base
(step 0), the exact probability of each gold completion of each problem, :func:`grae.eval.gold.gold_prob_parts`
(``[P, J]``; for ``chain_trace`` with ``strategies: two`` column 0 is the ``L`` trace, column 1 the ``G`` trace),
on the study's held-out problems (its ``eval`` settings and ``heldout_params``) and, with
``mechanism.band_holdout``, on that band file's problems (drawn again from the jobs' training task, as
``task.train_subset`` draws its own). A row's sum is the problem's exact p, the same number compare's exact
evaluation gives; its columns are each strategy's mass.

Files: ``<job>/eval/frontier/step-N.parts.json`` and ``<output_dir>/base/probes.json``, each ``{"step",
"settings", "labels", "heldout": {"question_ids", "parts"}, "band": {…} | null}``; a file whose settings differ is
probed again. ``python -m grae.compare.probes JOB_YAML --steps N… [--eval JSON] [--band PATH]`` probes one job (the
compare runner does, in the job's own process slot, after its frontier evaluation).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from grae.compare.frontier import FRONTIER_DIR, frontier_eval_config, step_settings
from grae.eval.strata import strategy_labels
from grae.io import atomic_write_json

if TYPE_CHECKING:
    from grae.compare.grid import CompareConfig, Job
    from grae.train.config import TrainConfig

#: the base's probe file, under ``<output_dir>/base/``
BASE_PROBES = "probes.json"


def parts_path(job_dir: Path, step: int) -> Path:
    return Path(job_dir) / "eval" / FRONTIER_DIR / f"step-{step}.parts.json"


def probe_steps(max_steps: int, steps: Sequence[int]) -> list[int]:
    """A job's probe steps: the study's steps above 0 and the last step."""
    return sorted({s for s in steps if s > 0} | {max_steps})


def probe_settings(config: TrainConfig, study_eval: dict[str, Any] | None, band: str | None) -> dict[str, Any]:
    """What a probe file is computed with (recorded in it): the evaluation's settings and the band file."""
    e = frontier_eval_config(config, study_eval).eval
    return {**step_settings(config, study_eval), "temperature": e.temperature, "top_p": e.top_p,
            "max_tokens": e.max_tokens, "band_holdout": band}


def probe_done(path: Path, settings: dict[str, Any]) -> bool:
    return path.exists() and json.loads(path.read_text()).get("settings") == settings


def band_examples(config: TrainConfig, band: str) -> list[dict[str, Any]]:
    """The band file's problems as the jobs' training task draws them (:class:`grae.data.band.BandTask`)."""
    from grae.data import get_task
    from grae.data.band import BandTask

    return BandTask(get_task(config.task.name, **config.task.params), band, config.task.name,
                    config.task.params).examples


def probe_model(model, tokenizer, config: TrainConfig, study_eval: dict[str, Any] | None, band: str | None,
                step: int) -> dict[str, Any]:
    """The probe record of one model (module docstring)."""
    from grae.data import get_task
    from grae.eval.gold import gold_prob_parts

    cfg = frontier_eval_config(config, study_eval)
    e = cfg.eval
    task = get_task(cfg.task.name, **cfg.task.params)
    heldout = task.heldout(e.num_problems)
    kwargs = {"temperature": e.temperature, "top_p": e.top_p, "max_tokens": e.max_tokens}
    parts = gold_prob_parts(model, tokenizer, heldout, task, **kwargs)
    record: dict[str, Any] = {
        "step": step, "settings": probe_settings(config, study_eval, band),
        "labels": strategy_labels(task, parts.shape[1]),
        "heldout": {"question_ids": [str(x["question_id"]) for x in heldout], "parts": parts.tolist()}, "band": None}
    if band:
        train_task = get_task(config.task.name, **config.task.params)
        examples = band_examples(config, band)
        record["band"] = {"question_ids": [str(x["question_id"]) for x in examples],
                          "parts": gold_prob_parts(model, tokenizer, examples, train_task, **kwargs).tolist()}
    return record


def _load(weights: Path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    # fp32 wherever it runs, as the frontier's exact evaluations
    device = "cuda" if torch.cuda.is_available() else "cpu"
    return (AutoModelForCausalLM.from_pretrained(weights, dtype=torch.float32).to(device),
            AutoTokenizer.from_pretrained(weights))


def evaluate_probes(job_yaml: Path, steps: Sequence[int], study_eval: dict[str, Any] | None, band: str | None,
                    log=print) -> dict[int, Path]:
    """Probe one finished job at its probe steps (resumable: a file of these settings is kept)."""
    from grae.train.callbacks import snapshot_path
    from grae.train.config import TrainConfig as _TrainConfig
    from grae.train.config import from_dict, validate
    from grae.yaml_io import load_yaml

    job_dir = Path(job_yaml).parent
    config = from_dict(_TrainConfig, load_yaml(Path(job_yaml).read_text()), "")
    validate(config)
    settings = probe_settings(config, study_eval, band)
    out: dict[int, Path] = {}
    for step in probe_steps(config.max_steps, steps):
        weights = job_dir / "final" if step == config.max_steps else snapshot_path(job_dir, step)
        path = parts_path(job_dir, step)
        if probe_done(path, settings):
            out[step] = path
            continue
        if not (weights / "config.json").exists():
            log(f"probes: no model at step {step} ({weights}); skipped")
            continue
        model, tokenizer = _load(weights)
        atomic_write_json(path, probe_model(model, tokenizer, config, study_eval, band, step))
        log(f"probes: step {step} written ({path.name})")
        out[step] = path
    return out


def probes_done(cfg: CompareConfig, job: Job) -> bool:
    """Every probe step of ``job`` whose weights are there has its file of the study's settings."""
    from grae.train.callbacks import snapshot_path

    if not cfg.mechanism:
        return True
    config = cfg.train_config(job)
    settings = probe_settings(config, cfg.eval, cfg.mechanism["band_holdout"])
    for step in probe_steps(config.max_steps, cfg.mechanism["steps"]):
        weights = job.output_dir / "final" if step == config.max_steps else snapshot_path(job.output_dir, step)
        if (weights / "config.json").exists() and not probe_done(parts_path(job.output_dir, step), settings):
            return False
    return True


def probes_command(cfg: CompareConfig, config_path: Path) -> list[str]:
    band = cfg.mechanism["band_holdout"]
    return [sys.executable, "-m", "grae.compare.probes", str(config_path), "--steps",
            *map(str, cfg.mechanism["steps"]), "--eval", json.dumps(cfg.eval), *(["--band", band] if band else [])]


def base_probe_evaluation(cfg: CompareConfig, job: Job, log) -> Path:
    """The base model's probe record (step 0) into ``<output_dir>/base/probes.json``, kept while its settings and the
    base's weights hold."""
    from grae.eval.identity import model_identity
    from grae.presets import resolve_model

    config = cfg.train_config(job)
    model_path = resolve_model(config.model)
    settings = {**probe_settings(config, cfg.eval, cfg.mechanism["band_holdout"]),
                "identity": model_identity(config.model, model_path)}
    path = cfg.output_dir / "base" / BASE_PROBES
    if probe_done(path, settings):
        return path
    log("base probes: each gold completion's exact probability on the held-out"
        + (" and band hold-out" if cfg.mechanism["band_holdout"] else "") + " problems")
    model, tokenizer = _load(Path(model_path))
    record = probe_model(model, tokenizer, config, cfg.eval, cfg.mechanism["band_holdout"], 0)
    atomic_write_json(path, {**record, "settings": settings})
    return path


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m grae.compare.probes")
    p.add_argument("job_yaml", type=Path)
    p.add_argument("--steps", type=int, nargs="+", required=True)
    p.add_argument("--eval", type=json.loads, default=None, help="the study's eval settings (JSON)")
    p.add_argument("--band", default=None, help="the band hold-out file")
    a = p.parse_args(argv)
    evaluate_probes(a.job_yaml, a.steps, a.eval, a.band)


if __name__ == "__main__":
    main(sys.argv[1:])
