#!/usr/bin/env bash
# GRPO + A-GRAE (Yu et al. 2026, Eqs. 11-13; alpha = 1 for MATH): grae_agrae on verl's PPO loss.
source "$(dirname "$0")/common.sh"
python3 -m grae.engines.verl.main "${COMMON[@]}" \
    algorithm.adv_estimator=grae_agrae \
    +algorithm.grae.alpha=1.0 \
    actor_rollout_ref.actor.clip_ratio_low=0.2 \
    actor_rollout_ref.actor.clip_ratio_high=0.2 \
    actor_rollout_ref.actor.loss_agg_mode=token-mean \
    trainer.experiment_name=qwen25math7b-grpo-agrae \
    trainer.default_local_dir="$CKPT_ROOT/qwen25math7b-grpo-agrae" \
    "$@"
