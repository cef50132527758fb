#!/usr/bin/env bash
# `grae train` on one node with a separate vLLM server: GPUs 0-3 generate (`trl vllm-serve`, 4 data-
# parallel vLLM replicas), GPUs 4-7 train (DeepSpeed ZeRO-3, 4 processes). Generation and training
# then overlap no memory; weights are pushed to the server after every optimizer step.
#
#   examples/trl/server.sh [RECIPE] [--key value ...]
#
# Per step: 4 processes x 16 completions x 16 accumulation steps = 1,024 completions (128 prompts),
# the same as colocate.sh on 8 GPUs. MODEL must be the recipe's model (the server loads it).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
RECIPE=${1:-qwen25math7b_agrae}
[ $# -gt 0 ] && shift
MODEL=${MODEL:-Qwen/Qwen2.5-Math-7B}
VLLM_GPUS=${VLLM_GPUS:-0,1,2,3}
TRAIN_GPUS=${TRAIN_GPUS:-4,5,6,7}
PORT=${PORT:-8000}
MAX_MODEL_LEN=${MAX_MODEL_LEN:-4096}   # prompt 1,024 + completion 3,072
ACCELERATE_CONFIG=${ACCELERATE_CONFIG:-$HERE/accelerate/zero3.yaml}
GRAE=${GRAE:-$(command -v grae)}
n_vllm=$(echo "$VLLM_GPUS" | tr ',' '\n' | wc -l)
n_train=$(echo "$TRAIN_GPUS" | tr ',' '\n' | wc -l)

CUDA_VISIBLE_DEVICES=$VLLM_GPUS trl vllm-serve --model "$MODEL" --data_parallel_size "$n_vllm" \
    --max_model_len "$MAX_MODEL_LEN" --port "$PORT" &
server=$!
trap 'kill "$server" 2>/dev/null || true' EXIT
until curl -sf "http://127.0.0.1:$PORT/health" >/dev/null; do
    kill -0 "$server" 2>/dev/null || { echo "vLLM server exited" >&2; exit 1; }
    sleep 5
done

# this launcher's defaults; a key the user gives replaces its default here
source "$HERE/defaults.sh"
USER_ARGS=("$@")
default --trl.use_vllm true
default --trl.vllm_mode server
default --trl.vllm_server_host 127.0.0.1
default --trl.vllm_server_port "$PORT"
default --trl.per_device_train_batch_size 16
default --trl.gradient_accumulation_steps 16
default --eval.enabled false
given --progress || default --no-progress

CUDA_VISIBLE_DEVICES=$TRAIN_GPUS accelerate launch --config_file "$ACCELERATE_CONFIG" --num_processes "$n_train" \
    "$GRAE" train "$RECIPE" "${DEFAULTS[@]+"${DEFAULTS[@]}"}" "$@"
