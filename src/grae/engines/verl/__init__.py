"""grae inside verl 0.9.1: every grae estimator and grae's policy loss, registered as a verl plugin.

No fork: verl loads the ``verl.plugins`` entry point on every ``import verl`` (driver, TaskRunner,
engine workers), and :mod:`grae.engines.verl.plugin` registers, in verl's own registries:

* advantage estimators ``grae_<name>`` for every ``grae.advantage.names()`` (``grae_agrae``,
  ``grae_grpo``, ``grae_w_reinforce``, ``grae_avspo`` …) — select with
  ``algorithm.adv_estimator=grae_agrae``, parameters under ``+algorithm.grae.<param>=…``;
* policy losses ``grae_ppo`` and ``grae_gspo`` — select with
  ``actor_rollout_ref.actor.policy_loss.loss_mode=grae_ppo``; their extra knobs need
  ``actor_rollout_ref.actor.policy_loss._target_=grae.engines.verl.losses.GraePolicyLossConfig``.

Stateful estimators (``avspo``) survive a verl checkpoint/resume with
``trainer.checkpoint_callback_class=grae.engines.verl.checkpoint.GraeCheckpointCallback``.

verl swallows plugin import errors (logged at DEBUG). This package records them instead:
:func:`check` raises if the plugin failed or is not loaded, and the failure is logged at ERROR.
This module itself does not import verl (``grae data export --format verl`` works without it).
See docs/scaling.md for the config keys and every place verl cannot express grae exactly.
"""

from __future__ import annotations

import logging
from typing import Any

logger = logging.getLogger("grae.engines.verl")

#: verl names are the grae names with this prefix: they can never clash with verl's own
#: (``grpo`` and ``gae`` are special-cased inside verl's dispatcher and would bypass the registry).
PREFIX = "grae_"
#: the entry point ``[project.entry-points."verl.plugins"]`` declares.
ENTRY_POINT = ("grae", "grae.engines.verl.plugin")

# Set by grae.engines.verl.plugin when it runs (this package is imported first and survives a
# failure of the plugin module, which verl would otherwise swallow).
_plugin_error: BaseException | None = None
_plugin_loaded: bool = False


def verl_name(grae_name: str) -> str:
    """``"agrae"`` → ``"grae_agrae"``."""
    return PREFIX + grae_name


def grae_name(name: str) -> str:
    """``"grae_agrae"`` → ``"agrae"`` (ValueError for a name without the prefix)."""
    if not name.startswith(PREFIX):
        raise ValueError(f"{name!r} is not a grae estimator name in verl (they start with {PREFIX!r})")
    return name[len(PREFIX):]


def estimator_names() -> list[str]:
    """The verl names grae registers: ``grae_<name>`` for every grae estimator."""
    from grae.advantage import names

    return [verl_name(n) for n in names()]


def registered_names() -> dict[str, list[str]]:
    """The grae names present in verl's registries right now (imports verl)."""
    from verl.trainer.ppo import core_algos

    return {
        "estimators": sorted(n for n, fn in core_algos.ADV_ESTIMATOR_REGISTRY.items() if getattr(fn, "__grae__", None)),
        "losses": sorted(n for n, fn in core_algos.POLICY_LOSS_REGISTRY.items() if getattr(fn, "__grae__", None)),
    }


def missing_names(present: dict[str, list[str]]) -> list[str]:
    """The grae estimator and loss names absent from ``present`` (:func:`registered_names`); imports verl."""
    from grae.engines.verl.losses import LOSSES

    return sorted(set(estimator_names()) - set(present["estimators"])) + sorted(set(LOSSES) - set(present["losses"]))


def check() -> dict[str, list[str]]:
    """Raise ``RuntimeError`` unless every grae estimator and loss is registered in verl.

    Imports verl (which loads the entry point). Returns :func:`registered_names` on success.
    """
    try:
        import verl  # noqa: F401  (loads the verl.plugins entry points)
    except ImportError as err:
        raise RuntimeError(f"grae's verl engine needs verl: pip install 'grae[verl]' ({err})") from err
    if _plugin_error is not None:
        raise RuntimeError(
            f"grae's verl plugin failed while verl loaded it ({type(_plugin_error).__name__}: {_plugin_error}); "
            "verl swallows plugin errors, so grae's estimators are missing from verl's registry."
        ) from _plugin_error
    present = registered_names()
    missing = missing_names(present)
    if missing:
        hint = (
            "the plugin was never imported: install grae with its verl extra (pip install 'grae[verl]', which declares "
            f'the entry point [project.entry-points."verl.plugins"] {ENTRY_POINT[0]} = "{ENTRY_POINT[1]}"), check that '
            "VERL_USE_EXTERNAL_PLUGINS is unset/'auto' or lists 'grae', or set VERL_USE_EXTERNAL_MODULES=grae.engines.verl.plugin"
            if not _plugin_loaded
            else "the plugin ran but some names are missing (a name clash with another plugin?)"
        )
        raise RuntimeError(f"grae names missing from verl's registries: {', '.join(missing)}; {hint}.")
    return present


def last_metrics() -> dict[str, Any]:
    """The metrics of the latest grae estimator call in this process (verl cannot log them)."""
    from grae.engines.verl.advantage import LAST_METRICS

    return dict(LAST_METRICS)


__all__ = [
    "PREFIX",
    "check",
    "estimator_names",
    "grae_name",
    "last_metrics",
    "missing_names",
    "registered_names",
    "verl_name",
]
