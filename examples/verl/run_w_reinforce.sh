#!/usr/bin/env bash
# W-REINFORCE, lambda = 0.1 (Zhu et al. 2025, Eq. 9): A = +0.1 for correct, -1 for wrong, no baseline,
# PPO clip 0.2, token-mean over all kept tokens (W-REINFORCE drops nothing).
source "$(dirname "$0")/common.sh"
python3 -m grae.engines.verl.main "${COMMON[@]}" \
    algorithm.adv_estimator=grae_w_reinforce \
    +algorithm.grae.lam=0.1 \
    actor_rollout_ref.actor.clip_ratio_low=0.2 \
    actor_rollout_ref.actor.clip_ratio_high=0.2 \
    actor_rollout_ref.actor.loss_agg_mode=token-mean \
    trainer.experiment_name=qwen25math7b-w-reinforce \
    trainer.default_local_dir="$CKPT_ROOT/qwen25math7b-w-reinforce" \
    "$@"
