"""``python -m grae.engines.verl.main <Hydra overrides>``: verl's ``main_ppo`` with grae's keys checked first.

Hydra accepts any key under ``+algorithm.grae.*`` and verl's ``validate_config`` does not look at it,
so an estimator-parameter typo (``+algorithm.grae.alhpa=0.5``) used to surface only when the first
advantage was computed — after Ray, FSDP and vLLM had started. This entry point composes verl's own
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
        read_options(grae_name(estimator), algorithm)  # unknown estimator / parameter / option value
    elif algorithm.get("grae", None):
        raise ValueError(
            f"algorithm.grae: set, but algorithm.adv_estimator={estimator!r} is not a grae estimator, so verl "
            "would ignore it; use algorithm.adv_estimator=grae_<name> (grae estimators) or drop algorithm.grae."
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
