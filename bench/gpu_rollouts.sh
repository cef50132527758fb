#!/usr/bin/env bash
# Issue 34 §6 on a lent GPU machine (PyTorch, no network, no grae extras), in one call of at most 10 minutes:
#
#   bench/gpu_rollouts.sh [EXTRA ARGS for bench/bench_gpu_rollouts.py]
#
# GraeTrainer vs stock trl.GRPOTrainer in bf16 on a random-weight Qwen2.5-0.5B-shaped model (TRL's generate and
# grae's decoding), then grae eval's HF backend samples/s with grae's decoding and with transformers' generate.
# Needs trl, transformers, tokenizers, datasets, dill and multiprocess as Python 3.12 wheels in .whl/ (the list
# and how to fetch them: bench/gpu_compare.sh), carried to the machine. The table is printed and the
# measurements land in $OUT/gpu_rollouts.json. The same script runs on a CPU with --size tiny
# (tests/test_bench_gpu_rollouts.py).
set -u
if [ -d .whl ] && [ ! -d /tmp/site ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
timeout 560 python3 bench/bench_gpu_rollouts.py --out "${OUT:-.}/gpu_rollouts.json" "$@"
