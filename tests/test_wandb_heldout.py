"""Held-out pass@k reaches W&B: ``grae train --trl.report_to wandb`` in offline mode, then the
run's transaction log (``run-<id>.wandb``) is read back and must hold ``heldout/before/pass@k`` at training
step 0 and ``heldout/after/pass@k`` at the last step, with the values of ``eval/summary.json``.

Before the fix the after-training row was logged with ``step=`` below wandb's own step (transformers logs
without one, so wandb's step runs ahead of the trainer's) and wandb dropped it ("ignoring partial history
record"). TensorBoard's side is tests/test_train_run.py's tensorboard test.

wandb 0.31 has no Python reader of the transaction log, so :func:`wandb_history` reads its record format:
a 7-byte header, then 32 KiB blocks of chunks (CRC32 u32, length u16, type u8: 1 full, 2 first, 3 middle,
4 last), each record a ``wandb_internal_pb2.Record`` protobuf."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl", reason="the train extra; `make test` installs it")
wandb = pytest.importorskip("wandb", reason="the dev extra installs wandb; `make test` installs it")
from timeouts import scaled  # noqa: E402
from tiny_model import build_random_tiny  # noqa: E402

BLOCK, HEADER, CHUNK = 32768, 7, 7


def wandb_records(path: Path) -> list:
    """Every protobuf ``Record`` of an offline run's ``.wandb`` transaction log, in order."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", f"{path} is not a W&B transaction log"
    records, pending, pos = [], b"", HEADER
    while pos + CHUNK <= len(data):
        if BLOCK - pos % BLOCK < CHUNK:  # a block's tail too short for a chunk header is padding
            pos += BLOCK - pos % BLOCK
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos:pos + CHUNK])
        if kind == 0 and length == 0:
            break
        pending += data[pos + CHUNK:pos + CHUNK + length]
        pos += CHUNK + length
        if kind in (1, 4):  # full or last chunk: a record is complete
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            records.append(record)
            pending = b""
    return records


def wandb_history(path: Path) -> list[dict]:
    """The history rows (``run.log`` calls wandb kept) of an offline run's ``.wandb`` file."""
    return [{item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item}
            for record in wandb_records(path) if record.WhichOneof("record_type") == "history"]


def test_held_out_pass_at_k_before_and_after_reaches_wandb_at_the_trainers_steps(tmp_path):
    model_dir = build_random_tiny(str(tmp_path / "tiny"))
    out, wandb_dir = tmp_path / "run", tmp_path / "wandb"
    wandb_dir.mkdir()
    cmd = [sys.executable, "-m", "grae.cli", "train", "--model", model_dir, "--output-dir", str(out),
           "--max-steps", "2", "--task.train_size", "200", "--trl.per_device_train_batch_size", "16",
           "--trl.num_generations", "4", "--trl.max_completion_length", "6", "--eval.num_problems", "4",
           "--eval.n", "4", "--eval.batch_size", "16", "--no-progress", "--trl.report_to", "wandb",
           "--continue-without-signal"]  # a random model: its base has no signal
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline", "WANDB_DIR": str(wandb_dir),
           "WANDB_SILENT": "true", "WANDB_PROJECT": "grae-test"}
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=scaled(600))
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]

    (log,) = wandb_dir.glob("wandb/offline-run-*/run-*.wandb")
    rows = wandb_history(log)
    assert any("train/reward" in row for row in rows)  # TRL's own logs, same run
    summary = json.loads((out / "eval" / "summary.json").read_text())
    for which, step in (("before", 0), ("after", summary["steps"])):
        assert summary[which], f"no {which} pass@k in summary.json"
        for k, value in summary[which].items():
            key = f"heldout/{which}/pass@{k}"
            kept = [row for row in rows if key in row]
            assert len(kept) == 1, f"{key}: {len(kept)} rows in {log}"
            assert kept[0][key] == pytest.approx(value)
            assert kept[0]["train/global_step"] == step  # plotted against the trainer's step
    assert summary["steps"] == 2
