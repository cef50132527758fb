"""What an exact held-out evaluation of ``grae train`` (``eval.exact``) writes beside its rows, and reads back at the
end of the run.

Before training, once (kept while its settings hold, so a ``--resume`` reuses it):

* ``eval/temperatures.json``: the base's exact p per held-out problem at each of ``eval.temperatures``
  (:func:`grae.eval.temperature_frontier.base_temperature_p`), the points of its temperature frontier;

before and after training, for a task whose gold completions are its strategies (chain_trace with two strategies:
``L`` and ``G``; :func:`grae.eval.strata.strategy_labels`):

* ``eval/before.parts.json``, ``eval/after.parts.json``: each gold completion's exact probability per problem
  (:func:`grae.eval.gold.gold_prob_parts`), a strategy's mass.

:func:`exact_report` reads them with the exact rows into :mod:`grae.train.exact_heldout`'s report and says it
(:mod:`grae.train.exact_heldout_text`): report.md's opening section, the console's lines and the sentence.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grae.io import atomic_write_json
from grae.metrics import powers_of_two
from grae.train.exact_heldout import (
    DELTA_KS,
    PARTS_FILES,
    TEMPERATURES_FILE,
    ExactHeldout,
    exact_heldout,
    parts_record,
    read_exact_inputs,
)


@dataclass
class ExactReport:
    """The exact held-out report of a finished run and its words."""

    report: ExactHeldout
    sentence: str
    markdown: str
    lines: list[str]

    def summary(self) -> dict[str, Any]:
        """``eval/summary.json``'s ``exact`` entry: the sentence, and per stratum its problems, the best temperature,
        pass@k of the base, the base at that temperature and the trained model, and Δ_F (mean, lo, hi) per k."""
        return {"sentence": self.sentence, "strata": {name: {
            "problems": s.problems, "best_temperature": s.best.temperature,
            "base": {str(k): e.value for k, e in s.base.items()},
            "base_at_best": {str(k): e.value for k, e in s.at_best.items()},
            "trained": {str(k): e.value for k, e in s.trained.items()},
            "delta_f": {str(k): [iv.mean, iv.lo, iv.hi] for k, iv in s.delta_f.items()},
            "mass": {label: {"before": b.value, "after": a.value} for label, (b, a, _) in s.mass.items()}}
            for name, s in self.report.strata.items()}}


def _kept(path: Path, settings: dict[str, Any]) -> bool:
    """``path`` holds a record written with ``settings``."""
    try:
        return json.loads(path.read_text()).get("settings") == settings
    except (OSError, ValueError, AttributeError):
        return False


def _settings(cfg: Any, identity: str, heldout: list[dict]) -> dict[str, Any]:
    e = cfg.eval
    return {"identity": identity, "top_p": e.top_p, "max_tokens": e.max_tokens,
            "question_ids": [str(x["question_id"]) for x in heldout]}


def write_base_temperatures(cfg: Any, model, processing, heldout: list[dict], task: Any, out: Path, identity: str,
                            log) -> Path:
    """``eval/temperatures.json`` of the base (module docstring), unless one with the same settings is there."""
    from grae.eval.temperature_frontier import base_temperature_p, temperature_record

    path = out / "eval" / TEMPERATURES_FILE
    settings = {**_settings(cfg, identity, heldout), "temperatures": [float(t) for t in cfg.eval.temperatures]}
    if _kept(path, settings):
        return path
    log(f"base temperature frontier: {len(heldout)} problems × {len(cfg.eval.temperatures)} temperatures, exact")
    p = base_temperature_p(model, processing, heldout, task, cfg.eval.temperatures, top_p=cfg.eval.top_p,
                           max_tokens=cfg.eval.max_tokens)
    atomic_write_json(path, temperature_record(settings["question_ids"], p, settings))
    return path


def has_strategies(task: Any) -> bool:
    """Whether the task's gold completions are solution strategies whose mass is worth reporting one by one
    (chain_trace with ``strategies: two``: the L and the G trace)."""
    return getattr(task, "strategies", None) == "two"


def write_parts(which: str, cfg: Any, model, processing, heldout: list[dict], task: Any, out: Path,
                identity: str) -> Path | None:
    """``eval/<which>.parts.json`` (``which``: ``"before"`` or ``"after"``) where :func:`has_strategies`, unless one
    with the same settings is there; None for a task without strategies."""
    from grae.eval.gold import gold_prob_parts
    from grae.eval.strata import strategy_labels

    if not has_strategies(task):
        return None
    path = out / "eval" / PARTS_FILES[("before", "after").index(which)]
    settings = {**_settings(cfg, identity, heldout), "temperature": cfg.eval.temperature}
    if _kept(path, settings):
        return path
    parts = gold_prob_parts(model, processing, heldout, task, temperature=cfg.eval.temperature, top_p=cfg.eval.top_p,
                            max_tokens=cfg.eval.max_tokens)
    atomic_write_json(path, parts_record(strategy_labels(task, parts.shape[1]), settings["question_ids"], parts,
                                         settings))
    return path


def exact_report(out: Path, cfg: Any, task: Any, heldout: list[dict]) -> ExactReport | None:
    """The exact held-out report of the run in ``out`` (:func:`grae.train.exact_heldout.exact_heldout`: every
    problem, then each of the held-out task's strata) and its words; None where its files are not all there (a run
    without ``eval.exact``)."""
    from grae.eval.strata import stratum_labels
    from grae.train.exact_heldout_text import console_lines, gain_sentence, markdown

    inputs = read_exact_inputs(out)
    if inputs is None:
        return None
    report = exact_heldout(inputs, stratum_labels(task, heldout), ks=list(powers_of_two(cfg.eval.n)),
                           delta_ks=[k for k in DELTA_KS if k <= cfg.eval.n], seed=cfg.eval.seed)
    sentence = gain_sentence(report, cfg.estimator)
    return ExactReport(report, sentence, markdown(report, sentence), console_lines(report, sentence))

