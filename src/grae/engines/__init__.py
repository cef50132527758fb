"""Engine adapters: grae's estimators and losses inside TRL (:mod:`grae.engines.trl`) and verl.

This package's own module imports nothing (the verl engine imports it without TRL, and the reverse)."""

#: estimator state file both engines write into a checkpoint folder
STATE_FILE = "grae_estimator_state.json"
#: written last into a checkpoint folder: a folder without it was cut off mid-write and is never resumed
#: (:func:`grae.train.checkpoints.latest_complete_checkpoint`)
COMPLETE_MARKER = "grae_checkpoint_complete"
