"""``python -m grae.engines.verl.main <Hydra overrides>``: verl's ``main_ppo`` with grae's keys checked first.

Hydra accepts any key under ``+algorithm.grae.*`` and verl's ``validate_config`` does not look at it,
so under plain ``main_ppo`` an estimator-parameter typo (``+algorithm.grae.alhpa=0.5``) surfaces only when the first
advantage is computed — after Ray, FSDP and vLLM had started. This entry point composes verl's own
``ppo_trainer`` config with the same overrides, validates ``algorithm.grae`` against the chosen
estimator (:func:`check_config`; one line naming the key, exit 2), then runs verl's ``main_ppo``
unchanged. The recipes in ``examples/verl/`` launch through it; any ``main_ppo`` command line works
with ``verl.trainer.main_ppo`` replaced by ``grae.engines.verl.main``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from grae.engines.verl import grae_name
from grae.engines.verl.advantage import read_options


def check_config(config: Any) -> None:
    """Raise ``ValueError``/``TypeError`` naming the key when ``algorithm.grae`` cannot mean anything."""
    algorithm = config.algorithm
    estimator = str(algorithm.get("adv_estimator", ""))
    if estimator.startswith("grae_"):
        opts = read_options(grae_name(estimator), algorithm)  # unknown estimator / parameter / option value
        check_filter_keeps_all_wrong(grae_name(estimator), opts["params"], algorithm)
    elif algorithm.get("grae", None):
        raise ValueError(
            f"algorithm.grae: set, but algorithm.adv_estimator={estimator!r} is not a grae estimator, so verl "
            "would ignore it; use algorithm.adv_estimator=grae_<name> (grae estimators) or drop algorithm.grae."
        )


def check_filter_keeps_all_wrong(name: str, params: dict, algorithm: Any) -> None:
    """An estimator that trains only on all-wrong groups (``zero_success_gate``) with verl's dynamic sampling
    on a metric whose std is zero in all-wrong groups: verl would drop every group it learns from."""
    from grae.advantage import get_estimator

    filters = algorithm.get("filter_groups", None)
    if not filters or not filters.get("enable", False):
        return
    if not getattr(get_estimator(name, **params), "only_all_wrong_groups", False):
        return
    metric = filters.get("metric", None)
    if metric != "grae_all_correct_filter":
        raise ValueError(
            f"algorithm.filter_groups.metric={metric!r} drops the all-wrong groups, the only groups grae_{name} trains "
            "on (every update would be zero); set algorithm.filter_groups.metric=grae_all_correct_filter with "
            "reward.custom_reward_function.name=compute_score_with_filters, or algorithm.filter_groups.enable=False"
        )


def main() -> None:
    import hydra
    import verl
    from verl.trainer import main_ppo

    config_dir = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")

    @hydra.main(config_path=config_dir, config_name="ppo_trainer", version_base=None)
    def run(config) -> None:
        try:
            check_config(config)
        except (KeyError, TypeError, ValueError) as err:
            print(f"grae: {err}", file=sys.stderr)
            sys.exit(2)
        main_ppo.main.__wrapped__(config)  # verl's main, undecorated: the same config, no second compose

    run()


if __name__ == "__main__":
    main()
