"""The study key ``mechanism`` checked when a study loads (:mod:`grae.compare.mechanism` describes the rows it
asks for): ``{steps, ks, band_holdout}``, each optional."""

from __future__ import annotations

from typing import Any

KEYS = ("steps", "ks", "band_holdout")


def _int_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and len(set(value)) == len(value) and all(
        isinstance(v, int) and not isinstance(v, bool) for v in value)


def check_mechanism(value: Any, cfg: Any) -> dict[str, Any] | None:
    """The study's ``mechanism`` normalised (``{steps, ks, band_holdout}``), or None; ``ConfigError`` naming the key
    and the fix otherwise. ``cfg``: the :class:`grae.compare.grid.CompareConfig` being loaded (which calls this;
    typed loosely so that this module does not name the module above it)."""
    from grae.compare.frontier import step_settings
    from grae.compare.rules.spec import study_exact_by
    from grae.data.band import BandFileError, check_same_task, read_band
    from grae.eval.exact import BY_GOLD
    from grae.train.config import ConfigError

    if value is None:
        return None
    unknown = sorted(set(value) - set(KEYS))
    if unknown:
        raise ConfigError(f"mechanism: unknown key(s) {unknown}; valid: {list(KEYS)}")
    if not (cfg.eval or {}).get("exact") or study_exact_by(cfg) != BY_GOLD:
        raise ConfigError("mechanism: needs the teacher-forced exact p of a one-gold task (each strategy's mass is its "
                          "gold completion's probability): give eval: {exact: true} on chain_trace, or remove mechanism")
    configs = {(job.method, job.seed): cfg.train_config(job) for job in cfg.jobs()}
    max_steps = {c.max_steps for c in configs.values()}
    if len(max_steps) != 1:
        raise ConfigError(f"mechanism: the methods train {sorted(max_steps)} steps; its steps need one length for all")
    (last,) = max_steps
    steps = value.get("steps", [0, last])
    if not _int_list(steps) or not all(0 <= s <= last for s in steps):
        raise ConfigError(f"mechanism.steps: expected distinct training steps in [0, {last}] (0 = the base), got "
                          f"{steps!r}")
    for (method, _), config in configs.items():
        missing = [s for s in steps if 0 < s < last and s not in config.keep_steps]
        if missing:
            raise ConfigError(f"mechanism.steps: {missing} are not kept by method {method!r} (its snapshots: "
                              f"{config.keep_steps}); add the fraction(s) {[s / last for s in missing]} to frontier")
    k_max = step_settings(next(iter(configs.values())), cfg.eval)["n"]
    ks = value.get("ks", [1, k_max])
    if not _int_list(ks) or not all(1 <= k <= k_max for k in ks):
        raise ConfigError(f"mechanism.ks: expected distinct k in [1, {k_max}] (eval.n is the largest exact k; "
                          f"n: 256 reaches pass@256), got {ks!r}")
    band = value.get("band_holdout")
    if band is not None:
        if not isinstance(band, str):
            raise ConfigError(f"mechanism.band_holdout: expected the path of a band file, got {band!r}")
        try:
            header, rows = read_band(band)
            held = {str(r["question_id"]) for r in rows}
            for (method, _), config in configs.items():
                if not config.task.train_subset:
                    raise ConfigError(f"mechanism.band_holdout: method {method!r} trains without task.train_subset, so "
                                      "no band problems are held out of its training; train on a band file or remove "
                                      "band_holdout")
                check_same_task(header, config.task.name, config.task.params, band)
                trained = {str(r["question_id"]) for r in read_band(config.task.train_subset)[1]}
                if held & trained:
                    raise ConfigError(f"mechanism.band_holdout: {len(held & trained)} of its problems are in method "
                                      f"{method!r}'s training band {config.task.train_subset} (e.g. "
                                      f"{sorted(held & trained)[0]}); hold out problems the training file lacks")
        except BandFileError as err:
            raise ConfigError(f"mechanism.band_holdout: {err}") from None
    return {"steps": sorted(steps), "ks": sorted(ks), "band_holdout": band}
