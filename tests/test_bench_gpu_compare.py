"""The GPU sitting of a study (bench/gpu_compare.sh) runs end to end on a CPU with a random tiny model: it restores
the committed rows, runs only the chosen seeds, and brings back the pack archives and the jobs' files in $OUT."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

pytest.importorskip("trl", reason="the train extra; `make test` installs it")
from timeouts import scaled  # noqa: E402
from tiny_model import build_random_tiny  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def test_gpu_compare_sitting_brings_back_the_chosen_seeds_rows(tmp_path):
    work, out, site = tmp_path / "repo", tmp_path / "out", tmp_path / "site"
    for folder in (work / "studies", out, site):
        folder.mkdir(parents=True)
    (work / "studies" / "study_rows.py").symlink_to(ROOT / "studies" / "study_rows.py")
    study = {"base": "chain-sum",
             "overrides": {"model": build_random_tiny(str(tmp_path / "tiny")), "max_steps": 2, "save_steps": 2,
                           "task": {"train_size": 100}, "eval": {"num_problems": 4, "n": 4, "batch_size": 16},
                           "trl": {"per_device_train_batch_size": 8, "num_generations": 4, "max_completion_length": 4},
                           "continue_without_signal": True},  # a random model: its base has no signal
             "methods": {"grpo": {"estimator": "grpo"}}, "seeds": [1, 2],
             "baseline": "grpo", "output_dir": "runs/studies/sitting", "frontier": [], "parallel": 1,
             # a study-level eval (as every committed study that packs rows): its report reads the archives' rows,
             # never the jobs' sample files, which archives do not carry (study_rows pack refuses otherwise)
             "eval": {"num_problems": 4, "n": 4}}
    (work / "sitting.yaml").write_text(yaml.safe_dump(study))
    env = {**os.environ, "OUT": str(out), "SITE": str(site), "SEEDS": "2", "PARALLEL": "1", "OMP_NUM_THREADS": "1",
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(ROOT / "bench" / "gpu_compare.sh"), "sitting.yaml", str(int(scaled(240)))],
                          cwd=work, env=env, capture_output=True, text=True, timeout=scaled(300))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "FINISHED after" in done.stdout and "grpo seed 2: done" in done.stdout
    assert "report: not written: 1 of 2 jobs" in " ".join(done.stdout.split())  # seed 1 is another sitting's
    with tarfile.open(out / "rows.tgz") as rows:
        names = {Path(name).name for name in rows.getnames()}
    assert {"grpo-seed2.tgz", "study.tgz"} <= names and "grpo-seed1.tgz" not in names
    with tarfile.open(out / "jobs_raw.tgz") as raw:
        files = raw.getnames()
    assert "runs/studies/sitting/jobs/grpo/seed2/eval/summary.json" in files
    assert not any(name.endswith(".safetensors") or "/checkpoints/" in name for name in files)
