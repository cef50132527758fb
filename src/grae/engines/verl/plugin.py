"""verl plugin entry point: registers grae's estimators and losses in verl's registries.

Declared in pyproject as::

    [project.entry-points."verl.plugins"]
    grae = "grae.engines.verl.plugin"

verl 0.9.1 imports it at the end of ``import verl`` in every process (driver, TaskRunner, engine
workers). Alternative without the entry point: ``VERL_USE_EXTERNAL_MODULES=grae.engines.verl.plugin``
(make sure the variable reaches the Ray workers, e.g. ``ray_kwargs.ray_init.runtime_env.env_vars``).

verl swallows exceptions raised by plugins (``logger.debug``). This module logs a failure at ERROR,
records it for :func:`grae.engines.verl.check`, and re-raises (so a direct import, or Hydra
resolving ``GraePolicyLossConfig``, fails with the real error).
"""

from __future__ import annotations

import logging

import grae.engines.verl as _pkg

logger = logging.getLogger("grae.engines.verl")


def register() -> dict[str, list[str]]:
    """Register ``grae_<name>`` for every grae estimator and the grae losses; idempotent.

    Raises ``ValueError`` if a name is already taken by a function that is not grae's, and
    ``RuntimeError`` if a name is missing afterwards.
    """
    from verl.trainer.ppo import core_algos

    from grae.advantage import names
    from grae.engines.verl.advantage import make_estimator_fn
    from grae.engines.verl.losses import LOSSES

    for name in names():
        key = _pkg.verl_name(name)
        existing = core_algos.ADV_ESTIMATOR_REGISTRY.get(key)
        if existing is None:
            core_algos.register_adv_est(key)(make_estimator_fn(name))
        elif getattr(existing, "__grae__", None) != name:
            raise ValueError(f"verl advantage estimator {key!r} is already registered by {existing!r}; grae cannot register it")
    for key, fn in LOSSES.items():
        existing = core_algos.POLICY_LOSS_REGISTRY.get(key)
        if existing is None:
            core_algos.register_policy_loss(key)(fn)
        elif getattr(existing, "__grae__", None) != key:
            raise ValueError(f"verl policy loss {key!r} is already registered by {existing!r}; grae cannot register it")

    # Self-check: verl swallows plugin errors, so verify here rather than at the first training step.
    present = _pkg.registered_names()
    missing = _pkg.missing_names(present)
    if missing:
        raise RuntimeError(f"grae verl plugin: {', '.join(missing)} missing from verl's registries after registration")
    return present


try:
    register()
    _pkg._plugin_loaded = True
    _pkg._plugin_error = None
except Exception as _err:  # noqa: BLE001 - recorded, logged loudly, re-raised
    _pkg._plugin_error = _err
    logger.error("grae's verl plugin failed to register grae estimators (%s: %s); verl will continue without "
                 "them and reject algorithm.adv_estimator=grae_*. grae.engines.verl.check() raises this error.",
                 type(_err).__name__, _err, exc_info=True)
    raise
