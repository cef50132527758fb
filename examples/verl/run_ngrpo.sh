#!/usr/bin/env bash
# NGRPO (Nan et al. 2025): one virtual r_max = 1 sample in every group's mean/std, asymmetric clip
# 0.16 / 0.24, token-mean, and dynamic sampling that drops only ALL-CORRECT groups. verl's filter_groups
# drops every zero-std group (all-wrong ones too), so the reward function adds the field
# grae_all_correct_filter whose std is zero only in all-correct groups (see grae.engines.verl.reward).
# verl 0.9.1's v1 ReplayBuffer samples until the batch is full of kept groups: it has no cap on generation
# rounds (filter_groups.max_num_gen_batches is ignored, with a warning); max_inflight_gen_batches (default 1)
# only bounds how many prompt batches generate at once.
source "$(dirname "$0")/common.sh"
python3 -m grae.engines.verl.main "${COMMON[@]}" \
    reward.custom_reward_function.name=compute_score_ngrpo \
    algorithm.adv_estimator=grae_ngrpo \
    +algorithm.grae.max_reward=1.0 \
    +algorithm.grae.num_virtual=1 \
    algorithm.filter_groups.enable=True \
    algorithm.filter_groups.metric=grae_all_correct_filter \
    actor_rollout_ref.actor.clip_ratio_low=0.16 \
    actor_rollout_ref.actor.clip_ratio_high=0.24 \
    actor_rollout_ref.actor.loss_agg_mode=token-mean \
    trainer.experiment_name=qwen25math7b-ngrpo \
    trainer.default_local_dir="$CKPT_ROOT/qwen25math7b-ngrpo" \
    "$@"
