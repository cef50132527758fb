"""Engine adapters: grae's estimators and losses inside TRL (:mod:`grae.engines.trl`) and verl.

This package's own module imports nothing (the verl engine imports it without TRL, and the reverse)."""

#: estimator state file both engines write into a checkpoint folder
STATE_FILE = "grae_estimator_state.json"
