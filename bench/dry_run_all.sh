#!/usr/bin/env bash
# Writes `grae train --dry-run` of every shipped config (configs/*.yaml) and every model preset into OUT_DIR,
# one file each (stdout and stderr, then the exit code), so two checkouts can be compared with `diff -r`:
# GRAE and PYTHON name the grae command and its interpreter (default: this checkout's .venv).
#   bench/dry_run_all.sh /tmp/before && (after a change) bench/dry_run_all.sh /tmp/after && diff -r /tmp/before /tmp/after
set -u
out=${1:?usage: bench/dry_run_all.sh OUT_DIR}
grae=${GRAE:-.venv/bin/grae}
python=${PYTHON:-.venv/bin/python}
mkdir -p "$out"
for config in configs/*.yaml; do
    name=$(basename "$config" .yaml)
    { "$grae" train "$config" --dry-run 2>&1; echo "exit code $?"; } > "$out/config-$name.txt"
done
presets=$("$python" -c "from grae.presets import PRESETS; print(' '.join(PRESETS))")
for preset in $presets; do
    { "$grae" train --model "$preset" --dry-run 2>&1; echo "exit code $?"; } > "$out/preset-$preset.txt"
done
{ "$grae" train --dry-run 2>&1; echo "exit code $?"; } > "$out/no-arguments.txt"
