#!/usr/bin/env bash
# Dr.GRPO + A-GRAE: A-GRAE applied to Dr.GRPO's un-normalised advantage r - mean (scale=none), and
# Dr.GRPO's constant normaliser: seq-mean-token-sum-norm divided by the max response length 3,072
# (loss_scale_factor; verl's default would use each micro-batch's padded width, which varies).
source "$(dirname "$0")/common.sh"
python3 -m grae.engines.verl.main "${COMMON[@]}" \
    algorithm.adv_estimator=grae_agrae \
    +algorithm.grae.alpha=1.0 \
    +algorithm.grae.scale=none \
    actor_rollout_ref.actor.clip_ratio_low=0.2 \
    actor_rollout_ref.actor.clip_ratio_high=0.2 \
    actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm \
    actor_rollout_ref.actor.loss_scale_factor=3072 \
    trainer.experiment_name=qwen25math7b-drgrpo-agrae \
    trainer.default_local_dir="$CKPT_ROOT/qwen25math7b-drgrpo-agrae" \
    "$@"
