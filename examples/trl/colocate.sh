#!/usr/bin/env bash
# `grae train` on one node, every GPU both trains (DeepSpeed ZeRO-3) and generates (vLLM colocated in
# the training processes, asleep during the backward pass).
#
#   examples/trl/colocate.sh [RECIPE] [--key value ...]
#
# RECIPE: a packaged recipe (grae/configs/*.yaml, default qwen25math7b_agrae) or a YAML path; extra
# --key value pairs override config keys as for `grae train` (a key the script sets too replaces its default). With 8 GPUs the packaged Qwen2.5-Math-7B
# recipes train on 8 x 16 completions x 8 accumulation steps = 1,024 completions (128 prompts) per step.
# Held-out evaluation is switched off here (HF generate under ZeRO-3 is slow); evaluate the final model
# with vLLM afterwards:  grae eval runs/<run>/final --tasks math --backend vllm
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
RECIPE=${1:-qwen25math7b_agrae}
[ $# -gt 0 ] && shift
GPUS=${GPUS:-8}
ACCELERATE_CONFIG=${ACCELERATE_CONFIG:-$HERE/accelerate/zero3.yaml}
GRAE=${GRAE:-$(command -v grae)}

# this launcher's defaults; a key the user gives replaces its default here
source "$HERE/defaults.sh"
USER_ARGS=("$@")
default --trl.use_vllm true
default --trl.vllm_mode colocate
default --trl.vllm_gpu_memory_utilization 0.35
default --trl.vllm_tensor_parallel_size 1
default --trl.vllm_enable_sleep_mode true
default --eval.enabled false
given --progress || default --no-progress

accelerate launch --config_file "$ACCELERATE_CONFIG" --num_processes "$GPUS" "$GRAE" train "$RECIPE" "${DEFAULTS[@]+"${DEFAULTS[@]}"}" "$@"
