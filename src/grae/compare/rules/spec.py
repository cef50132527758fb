"""What a study's ``rule:`` key may hold, checked when the study loads (:func:`grae.compare.grid.check_rule`):
each rule's keys with their types, an example, and its study-level checks.

The rules themselves (pure functions of a study's table) are :mod:`grae.compare.rules.keeps_passk` and
:mod:`grae.compare.rules.every_k` (``non_inferior_every_k``). This module sits below them and below
``grid``, so loading a study never imports the rules' statistics (nor, through them, the report's layer).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from grae.train.config import ConfigError

#: a study's config (grae.compare.grid.CompareConfig; named loosely: this module sits below grid)
CompareConfig = Any


class RuleKey(NamedTuple):
    """One key of a rule's spec: whether it is required, what it takes (the words of its error) and its
    type: ``points`` (a finite number), ``margin`` (points <= 0), ``count`` (an integer >= 1),
    ``power_of_two`` (a count that is one), ``method`` (a trained arm other than the baseline), ``test``
    (one of :data:`FRONTIER_TESTS`), ``k_list`` (a non-empty list of distinct counts) or ``label`` (non-empty text)."""

    required: bool
    what: str
    type: str = "points"


@dataclass(frozen=True)
class RuleSpec:
    """One rule's spec: its keys, an example, and the study-level checks beyond each key's type
    (``check(spec, cfg)`` raises ConfigError naming the key and the fix)."""

    keys: dict[str, RuleKey]
    example: str
    check: Callable[[dict[str, Any], CompareConfig], None]


def evaluated_n(cfg: CompareConfig) -> int:
    """The largest k the study's held-out rows will reach: ``eval.n``, else the first job's own ``eval.n``."""
    return (cfg.eval or {}).get("n") or cfg.train_config(cfg.jobs()[0]).eval.n


MIN_SEEDS_KEY = RuleKey(False, "an integer >= 1: fewer seeds per arm make the report a pilot (default 3)", "count")

#: how keeps_passk reads "above the baseline's frontier": ``interval`` (the distance's crossed interval has its
#: lower bound above ``frontier_margin``, a criterion under Holm; grae.compare.rules.frontier_distance) or
#: ``point`` (the distance's point above 0, the rule as studies/design/decisive_r4.yaml pre-registered it; the interval
#: is printed beside it)
FRONTIER_TESTS = ("interval", "point")

#: keeps_passk's keys (grae.compare.rules.keeps_passk)
KEEPS_PASSK_KEYS = {
    "k": RuleKey(True, "the deciding k, a power of two (e.g. 16)", "power_of_two"),
    "pass1_margin_vs_baseline": RuleKey(True, "points, e.g. -2: pass@1(arm) − pass@1(baseline) must stay above it"),
    "passk_margin_vs_base": RuleKey(True, "points, e.g. -1: pass@k(arm) − pass@k(base) must stay above it"),
    "min_seeds": MIN_SEEDS_KEY,
    "baseline_pass1_margin_vs_oracle": RuleKey(False, "points, e.g. 3: the baseline must beat the format-only "
                                                      "oracle's pass@1 by more (95 % lower bound), or the testbed failed"),
    "frontier_margin": RuleKey(False, "points, e.g. 0 (the default): the distance above the baseline's frontier at "
                                      "equal pass@1 must have its lower bound above it"),
    "frontier_test": RuleKey(False, "'interval' (the default: the distance's lower bound > frontier_margin) or 'point' "
                                    "(its point > 0, as decisive_r4.yaml pre-registered it)", "test"),
    "temperature_frontier_margin": RuleKey(False, "points, e.g. 0: Δ_F, the arm's pass@k above the base's temperature "
                                                  "frontier at equal pass@1, must have its lower bound above it (needs "
                                                  "paired_against: temperature_frontier)"),
}


def check_keeps(spec: dict[str, Any], cfg: CompareConfig) -> None:
    """keeps_passk's study-level needs: the baseline's frontier, rows that reach k, exact rows for the oracle."""
    if not cfg.frontier:
        raise ConfigError("rule.keeps_passk: needs the baseline's checkpoint frontier (an arm keeps only above it); "
                          "give frontier: [0.25, 0.5, 0.75, 1.0]")
    n = evaluated_n(cfg)
    if spec["k"] > n:
        raise ConfigError(f"rule.keeps_passk.k = {spec['k']}: the study evaluates pass@k up to n = {n}; lower k or "
                          "raise eval.n")
    if "baseline_pass1_margin_vs_oracle" in spec:
        from grae.eval.exact import BY_GOLD

        if not (cfg.eval or {}).get("exact"):
            raise ConfigError("rule.keeps_passk.baseline_pass1_margin_vs_oracle: the format-only oracle needs the "
                              "base's exact rows; add eval: {exact: true}")
        if study_exact_by(cfg) == BY_GOLD:
            raise ConfigError("rule.keeps_passk.baseline_pass1_margin_vs_oracle: the task's exact p teacher-forces its "
                              "one gold completion, so it has no format-only oracle; remove the key")
    if spec.get("frontier_test") == "point" and spec.get("frontier_margin", 0) != 0:
        raise ConfigError("rule.keeps_passk.frontier_margin: the point test compares the point with 0; give "
                          "frontier_test: interval to use a margin, or remove frontier_margin")
    if "temperature_frontier_margin" in spec and "temperature_frontier" not in cfg.paired_against:
        raise ConfigError("rule.keeps_passk.temperature_frontier_margin: the base's temperature frontier is not traced; "
                          "add temperature_frontier to paired_against (with eval: {exact: true})")
    spec.setdefault("frontier_test", "interval")
    spec.setdefault("frontier_margin", 0)


#: non_inferior_every_k's keys (grae.compare.rules.every_k)
EVERY_K_KEYS = {
    "arm": RuleKey(True, "the claim's arm: a method of this study other than the baseline", "method"),
    "margin_vs_baseline": RuleKey(True, "points <= 0, e.g. -1: at k the arm holds when pass@k(arm) − "
                                        "pass@k(baseline) has its lower bound above it", "margin"),
    "baseline_pass1_margin_vs_base": RuleKey(True, "points, e.g. 3: the baseline's pass@1 − base must have its 95 % "
                                                   "lower bound above it, or the regime cannot test the claim"),
    "min_seeds": MIN_SEEDS_KEY,
}


def check_every_k(spec: dict[str, Any], cfg: CompareConfig) -> None:
    """The rule reads the base model's pass@1 from compare's own evaluation of every model: it needs ``eval``."""
    if not cfg.eval:
        raise ConfigError("rule.non_inferior_every_k: reads the base model's pass@1 (did "
                          f"{cfg.baseline} learn?) from compare's own evaluation of every model; give the study "
                          "eval: {exact: true} or eval: {n: N}")


#: beats_baseline's keys (grae.compare.rules.beats_baseline)
BEATS_KEYS = {
    "ks": RuleKey(True, "a list of distinct k, e.g. [1, 64, 256]: each arm − the baseline at each", "k_list"),
    "frontier_ks": RuleKey(False, "a list of distinct k > 1, e.g. [64, 256]: Δ_F per stratum against its own "
                                  "temperature frontier (needs paired_against: temperature_frontier)", "k_list"),
    "rare_stratum": RuleKey(False, "a held-out stratum's label, e.g. totals=excursion (a key of the held-out task's "
                                   "heldout_strata, '=', one of its values)", "label"),
    "rare_k": RuleKey(False, "an integer >= 1, e.g. 64: each arm − the baseline on rare_stratum at this k too", "count"),
    "strategy": RuleKey(False, "a strategy of the probes, e.g. G: its mass on rare_stratum at the last step − the "
                               "base's", "label"),
    "min_seeds": MIN_SEEDS_KEY,
}


def check_beats(spec: dict[str, Any], cfg: CompareConfig) -> None:
    """beats_baseline reads the mechanism rows (strata, probes): it needs ``mechanism``, exact rows reaching every k,
    the traced temperature frontier for ``frontier_ks``, and a stratum the held-out task has."""
    if not cfg.mechanism:
        raise ConfigError("rule.beats_baseline: reads the held-out strata and strategy mass that the study key "
                          "mechanism gathers; give mechanism: {steps: [0, LAST], ks: [1, 256]}")
    n = evaluated_n(cfg)
    for key in ("ks", "frontier_ks", "rare_k"):
        values = spec.get(key)
        values = [values] if isinstance(values, int) else values or []
        if any(k > n for k in values):
            raise ConfigError(f"rule.beats_baseline.{key}: the study evaluates pass@k up to n = {n}; lower it or raise "
                              "eval.n")
    if spec.get("frontier_ks"):
        if "temperature_frontier" not in cfg.paired_against:
            raise ConfigError("rule.beats_baseline.frontier_ks: the base's temperature frontier is not traced; add "
                              "temperature_frontier to paired_against (with eval: {exact: true})")
        if 1 in spec["frontier_ks"]:
            raise ConfigError("rule.beats_baseline.frontier_ks: Δ_F is read at equal pass@1, so k = 1 is 0 by "
                              "construction; give k > 1")
    rare = spec.get("rare_stratum")
    if rare is not None:
        strata = ((cfg.eval or {}).get("heldout_params") or {}).get("heldout_strata") or []
        if "=" not in rare or rare.split("=", 1)[0] not in strata:
            raise ConfigError(f"rule.beats_baseline.rare_stratum = {rare!r}: the held-out task's strata are keyed by "
                              f"{list(strata)} (eval.heldout_params.heldout_strata); give KEY=VALUE, e.g. "
                              "totals=excursion")
    elif spec.get("rare_k") is not None or spec.get("strategy") is not None:
        raise ConfigError("rule.beats_baseline.rare_stratum: rare_k and strategy are read on it; give rare_stratum")


#: every rule a study can name: name → its spec
RULE_SPECS = {
    "keeps_passk": RuleSpec(KEEPS_PASSK_KEYS, "rule: {keeps_passk: {k: 16, pass1_margin_vs_baseline: -2, "
                                              "passk_margin_vs_base: -1}}", check_keeps),
    "non_inferior_every_k": RuleSpec(EVERY_K_KEYS, "rule: {non_inferior_every_k: {arm: agrae, margin_vs_baseline: -1, "
                                                   "baseline_pass1_margin_vs_base: 3, min_seeds: 5}}", check_every_k),
    "beats_baseline": RuleSpec(BEATS_KEYS, "rule: {beats_baseline: {ks: [1, 64, 256], frontier_ks: [64, 256], "
                                           "rare_stratum: totals=excursion, rare_k: 64, strategy: G, min_seeds: 4}}",
                               check_beats),
}


def study_exact_by(cfg: CompareConfig) -> str:
    """How the study's task is evaluated exactly (:func:`grae.eval.exact.exact_by`: an answer set enumerated, or a
    one-gold task's gold completion teacher-forced); ConfigError naming the field when neither applies."""
    from grae.data import get_task
    from grae.eval.exact import ExactError, exact_by

    key = "eval.exact" if cfg.eval else "frontier_eval.exact"
    config = cfg.train_config(cfg.jobs()[0])
    try:
        return exact_by(get_task(config.task.name, **config.task.params))
    except ExactError as err:
        raise ConfigError(f"{key}: {err}; drop {key} to evaluate by sampling") from None
