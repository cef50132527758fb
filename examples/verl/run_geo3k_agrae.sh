#!/usr/bin/env bash
# A-GRAE on Geometry3K with a vision-language model (Yu et al. 2026, §5 Table 4 and App. C.2): Qwen2.5-VL-3B-
# Instruct, 512 prompts per step, G = 5, 20 epochs, and the multimodal alpha = 0.5 ("multi-modal datasets exhibit
# a higher propensity for training collapse"). Images reach the model through verl's multimodal dataset schema
# (data.image_key=images); the reward is verl's own Geometry3K scorer (accuracy of the \boxed{} answer plus a
# format term), which verl selects from the rows' data_source (hiyouga/geometry3k).
#
# Data: verl's preprocessing script writes the parquet files (it downloads hiyouga/geometry3k):
#   python3 verl/examples/data_preprocess/geo3k.py --local_save_dir ~/data/geo3k      (from a verl checkout)
# grae's own visual tasks export in the same schema:  grae data export count_shapes out.parquet --format verl
#
# Environment knobs (all optional): MODEL, GEO3K_DIR, CKPT_ROOT, NNODES, GPUS_PER_NODE, ROLLOUT_TP, LOGGER, PROJECT.
set -euo pipefail

MODEL=${MODEL:-Qwen/Qwen2.5-VL-3B-Instruct}
GEO3K_DIR=${GEO3K_DIR:-$HOME/data/geo3k}
TRAIN_FILE=${TRAIN_FILE:-$GEO3K_DIR/train.parquet}
VAL_FILE=${VAL_FILE:-$GEO3K_DIR/test.parquet}
CKPT_ROOT=${CKPT_ROOT:-checkpoints}
PROJECT=${PROJECT:-grae-verl}
NNODES=${NNODES:-1}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
ROLLOUT_TP=${ROLLOUT_TP:-1}
LOGGER=${LOGGER:-"['console','tensorboard']"}

for f in "$TRAIN_FILE" "$VAL_FILE"; do
    if [ ! -f "$f" ]; then
        echo "missing $f: run verl's examples/data_preprocess/geo3k.py --local_save_dir $GEO3K_DIR first" >&2
        exit 1
    fi
done
python3 -c "import grae.engines.verl as g; g.check()"

python3 -m grae.engines.verl.main \
    data.train_files="$TRAIN_FILE" \
    data.val_files="$VAL_FILE" \
    data.image_key=images \
    data.train_batch_size=512 \
    data.max_prompt_length=1024 \
    data.max_response_length=2048 \
    data.filter_overlong_prompts=True \
    data.truncation=error \
    actor_rollout_ref.model.path="$MODEL" \
    actor_rollout_ref.model.use_remove_padding=True \
    actor_rollout_ref.model.enable_gradient_checkpointing=True \
    actor_rollout_ref.actor.optim.lr=1e-6 \
    actor_rollout_ref.actor.ppo_mini_batch_size=128 \
    actor_rollout_ref.actor.use_dynamic_bsz=True \
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu=16384 \
    actor_rollout_ref.actor.use_kl_loss=False \
    actor_rollout_ref.actor.kl_loss_coef=0 \
    actor_rollout_ref.actor.entropy_coeff=0 \
    actor_rollout_ref.actor.clip_ratio_low=0.2 \
    actor_rollout_ref.actor.clip_ratio_high=0.2 \
    actor_rollout_ref.actor.loss_agg_mode=token-mean \
    actor_rollout_ref.rollout.name=vllm \
    actor_rollout_ref.rollout.n=5 \
    actor_rollout_ref.rollout.temperature=1.0 \
    actor_rollout_ref.rollout.tensor_model_parallel_size="$ROLLOUT_TP" \
    actor_rollout_ref.rollout.gpu_memory_utilization=0.6 \
    actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=16 \
    algorithm.adv_estimator=grae_agrae \
    +algorithm.grae.alpha=0.5 \
    algorithm.use_kl_in_reward=False \
    algorithm.kl_ctrl.kl_coef=0 \
    trainer.checkpoint_callback_class=grae.engines.verl.checkpoint.GraeCheckpointCallback \
    trainer.logger="$LOGGER" \
    trainer.project_name="$PROJECT" \
    trainer.experiment_name=qwen25vl3b-geo3k-agrae \
    trainer.default_local_dir="$CKPT_ROOT/qwen25vl3b-geo3k-agrae" \
    trainer.nnodes="$NNODES" \
    trainer.n_gpus_per_node="$GPUS_PER_NODE" \
    trainer.total_epochs=20 \
    trainer.save_freq=20 \
    trainer.test_freq=5 \
    trainer.val_before_train=True \
    "$@"
