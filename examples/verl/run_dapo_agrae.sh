#!/usr/bin/env bash
# DAPO + A-GRAE: clip-higher 0.2 / 0.28 and token-mean loss, as the seeds' DAPO scripts (no dynamic
# sampling, no overlong shaping).
source "$(dirname "$0")/common.sh"
python3 -m grae.engines.verl.main "${COMMON[@]}" \
    algorithm.adv_estimator=grae_agrae \
    +algorithm.grae.alpha=1.0 \
    actor_rollout_ref.actor.clip_ratio_low=0.2 \
    actor_rollout_ref.actor.clip_ratio_high=0.28 \
    actor_rollout_ref.actor.loss_agg_mode=token-mean \
    trainer.experiment_name=qwen25math7b-dapo-agrae \
    trainer.default_local_dir="$CKPT_ROOT/qwen25math7b-dapo-agrae" \
    "$@"
