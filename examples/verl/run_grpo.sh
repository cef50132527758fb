#!/usr/bin/env bash
# GRPO baseline (verl's built-in `grpo`; grae_grpo gives the same numbers), PPO clip 0.2, dual clip 3,
# token-mean loss. Extra hydra overrides are appended: ./run_grpo.sh trainer.total_epochs=1
source "$(dirname "$0")/common.sh"
python3 -m grae.engines.verl.main "${COMMON[@]}" \
    algorithm.adv_estimator=grpo \
    algorithm.norm_adv_by_std_in_grpo=True \
    actor_rollout_ref.actor.clip_ratio_low=0.2 \
    actor_rollout_ref.actor.clip_ratio_high=0.2 \
    actor_rollout_ref.actor.loss_agg_mode=token-mean \
    trainer.experiment_name=qwen25math7b-grpo \
    trainer.default_local_dir="$CKPT_ROOT/qwen25math7b-grpo" \
    "$@"
