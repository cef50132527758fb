"""Run integrity, the parts that need no training run: what counts as a full disk, identities
of in-memory models, compare job folders, Ctrl-C outside training, paths printed literally."""

from __future__ import annotations

import errno
import json

import pytest
import yaml

pytest.importorskip("trl", reason="the train extra; `make test` installs it")
from typer.testing import CliRunner  # noqa: E402

from grae.train.config import ConfigError, load_config, to_dict  # noqa: E402
from grae.train.faults import disk_full_reason  # noqa: E402
from tiny_model import build_random_tiny  # noqa: E402

TORCH_WRITE_FAILED = RuntimeError("[enforce fail at inline_container.cc:672] . PytorchStreamWriter failed writing file "
                                  "data/0: file write failed")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return build_random_tiny(str(tmp_path_factory.mktemp("tiny")))


def cli():
    from grae.cli import _mount, app

    _mount()
    return app


@pytest.mark.parametrize("err", [
    OSError(errno.ENOSPC, "No space left on device"),
    OSError(errno.EDQUOT, "Disk quota exceeded"),
    Exception('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No space left on device" })'),
], ids=["ENOSPC", "EDQUOT", "safetensors"])
def test_full_disk_errors_are_recognised(err, tmp_path):
    assert disk_full_reason(err, tmp_path)
    wrapped = RuntimeError("saving failed")
    wrapped.__cause__ = err
    assert disk_full_reason(wrapped, tmp_path), "a full disk under another exception"


def test_torch_write_failures_count_only_when_the_disk_is_nearly_full(tmp_path, monkeypatch):
    import grae.train.faults as faults

    assert disk_full_reason(TORCH_WRITE_FAILED, tmp_path) is None  # this machine's disk has room: another fault
    assert disk_full_reason(OSError(errno.EACCES, "Permission denied"), tmp_path) is None
    monkeypatch.setattr(faults, "_free_bytes", lambda where: 4 << 20)
    assert "file write failed, 4 MiB free" == disk_full_reason(TORCH_WRITE_FAILED, tmp_path / "not" / "yet")


def test_evaluate_names_in_memory_weights_by_their_tensors(model_dir, tmp_path):
    """A library caller's evaluate() into one file: config._name_or_path is the same for the base and
    every model trained from it, so before this the second model resumed the first one's rows."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grae.data import get_task
    from grae.eval import RecordsError, evaluate

    task = get_task("chain_sum")
    problems, rows = task.heldout(2), tmp_path / "rows.jsonl"
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    kwargs = dict(n=2, max_tokens=4, batch_size=4, output_path=rows)
    evaluate(model, tokenizer, problems, task, **kwargs)
    assert evaluate(model, tokenizer, problems, task, **kwargs).num_resumed == 4  # same weights: resumed
    with torch.no_grad():
        next(model.parameters()).add_(0.01)  # "trained"
    with pytest.raises(RecordsError, match="identity"):
        evaluate(model, tokenizer, problems, task, **kwargs)


def test_model_paths_that_cannot_be_hub_ids(tmp_path, monkeypatch):
    from grae.eval.identity import looks_like_missing_path

    monkeypatch.chdir(tmp_path)
    (tmp_path / "runs").mkdir()
    assert looks_like_missing_path("runs/x")  # `runs` is a local folder: a path, and it is missing
    assert not looks_like_missing_path("Qwen/Qwen2.5-Math-7B") and not looks_like_missing_path("tiny")
    assert looks_like_missing_path("./x") and looks_like_missing_path("a/b/c")


def _study(tmp_path, overrides):
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump({"base": "chain-sum", "overrides": overrides, "seeds": [0], "baseline": "grpo",
                                    "methods": {"grpo": {"estimator": "grpo"}}, "output_dir": str(tmp_path / "study")}))
    return path


def test_compare_refuses_a_finished_job_folder_of_another_run(tmp_path):
    """A finished job is skipped, never re-claimed: its folder's run must be this job's run."""
    from grae.compare.grid import load_compare_config
    from grae.train.rundir import claim

    job_dir = tmp_path / "study" / "jobs" / "grpo" / "seed0"
    job_dir.mkdir(parents=True)
    other = load_config("chain-sum", {"estimator": "agrae", "seed": 0, "output_dir": str(job_dir)})
    claim(job_dir, to_dict(other), resume=False, overwrite=False)  # `grae train` of another method put there
    (job_dir / "eval").mkdir()
    (job_dir / "eval" / "summary.json").write_text(json.dumps({"before": {}, "after": {}}))
    with pytest.raises(ConfigError, match=r"method 'grpo' seed 0: .* holds run \w+ with a different config "
                                          r"\(estimator: 'agrae' → 'grpo'"):
        load_compare_config(_study(tmp_path, {}))


def test_compare_refuses_an_unfinished_job_folder_it_cannot_own(tmp_path):
    from grae.compare.grid import load_compare_config

    job_dir = tmp_path / "study" / "jobs" / "grpo" / "seed0"
    job_dir.mkdir(parents=True)
    (job_dir / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="is not empty and holds no grae run"):
        load_compare_config(_study(tmp_path, {}))
    assert sorted(p.name for p in job_dir.iterdir()) == ["notes.txt"]


def test_ctrl_c_outside_training_exits_130(model_dir, tmp_path, monkeypatch):
    """Ctrl-C during held-out evaluation (train) or sampling (eval): exit 130, never a traceback or 1."""
    import grae.eval.runner
    import grae.train.run

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(grae.train.run, "run_train", interrupted)
    monkeypatch.setattr(grae.eval.runner, "run_samples", interrupted)
    runner = CliRunner()
    train = runner.invoke(cli(), ["train", "--model", model_dir, "--output-dir", str(tmp_path / "r")])
    # stopped before it claimed its run directory: there is no run a --resume could continue
    assert train.exit_code == 130 and "rerun the same command" in train.output and "--resume" not in train.output
    evaluate = runner.invoke(cli(), ["eval", model_dir, "--tasks", "chain_sum", "--n", "2", "--num-problems", "2",
                                     "-o", str(tmp_path / "e")])
    assert evaluate.exit_code == 130 and "rerun the same command to resume" in evaluate.output


def test_paths_print_literally(model_dir, tmp_path):
    """`:100:` in a path stays `:100:` (not 💯) and `[b]` stays `[b]` in every line grae eval prints."""
    out = tmp_path / "ev:100:[b]"
    args = ["eval", model_dir, "--tasks", "chain_sum", "--n", "2", "--num-problems", "2", "-o", str(out)]
    first = CliRunner().invoke(cli(), args)
    assert first.exit_code == 0, first.output
    assert f"rows: {out / 'chain_sum.jsonl'}" in first.output and "💯" not in first.output
    other = build_random_tiny(str(tmp_path / "other"), seed=1)
    refused = CliRunner().invoke(cli(), [args[0], other, *args[2:]])
    assert refused.exit_code == 2 and f"{out} holds samples of another model" in refused.output
    assert len(refused.output.strip().splitlines()) == 1


def test_an_eval_directory_holds_one_models_results(model_dir, tmp_path):
    """Another model's evaluation of *another task* into the same -o is refused: its own file would pass a
    per-file check, and summary.json would name the new model over the old model's results. --overwrite replaces."""
    from grae.train.rundir import LOCK_FILE, claim
    from test_integrity_train import tree_digest

    out, other = tmp_path / "ev", build_random_tiny(str(tmp_path / "other"), seed=1)

    def grae_eval(model, task, *extra, output=out):
        return CliRunner().invoke(cli(), ["eval", model, "--tasks", task, "--n", "2", "--num-problems", "2",
                                          "-o", str(output), *extra])

    assert grae_eval(model_dir, "chain_sum").exit_code == 0
    before = tree_digest(out)
    refused = grae_eval(other, "gcd")
    assert refused.exit_code == 2 and "chain_sum.jsonl: identity" in refused.output and "--overwrite" in refused.output
    assert tree_digest(out) == before
    assert grae_eval(other, "gcd", "--overwrite").exit_code == 0
    assert not (out / "chain_sum.jsonl").exists() and (out / "gcd.jsonl").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["tasks"]) == ["gcd"] and summary["identity"] == summary["tasks"]["gcd"]["identity"]

    run = tmp_path / "run"
    claim(run, to_dict(load_config("chain-sum", {"output_dir": str(run)})), resume=False, overwrite=False)
    for target in (run, run / "eval"):  # a train run's own files: never mixed with, even with --overwrite
        held = grae_eval(model_dir, "chain_sum", "--overwrite", output=target)
        assert held.exit_code == 2 and "holds the files of the grae train run" in held.output
    assert sorted(p.name for p in run.iterdir() if p.name != LOCK_FILE) == ["run.json"]  # the claim's lock stays


def _saved_checkpoint(folder, weights):
    """A checkpoint folder as GraeTrainer marks it: ``weights`` in model.safetensors, the trainer state, optimizer
    and scheduler, and the completion marker with every file's size and sha256."""
    import torch
    from safetensors.torch import save_file

    from grae.engines import COMPLETE_MARKER, file_digests, file_sizes

    folder.mkdir(parents=True)
    save_file(weights, str(folder / "model.safetensors"))
    torch.save({"state": torch.zeros(64)}, folder / "optimizer.pt")
    torch.save({"last_epoch": 1}, folder / "scheduler.pt")
    (folder / "trainer_state.json").write_text("{}")
    (folder / COMPLETE_MARKER).write_text(json.dumps({"step": 1, "run_id": "r", "files": file_sizes(str(folder)),
                                                      "sha256": file_digests(str(folder))}))
    return folder


def test_a_checkpoint_is_checked_by_its_content_and_its_weights_finiteness(tmp_path):
    import torch

    from grae.engines import COMPLETE_MARKER
    from grae.train.checkpoints import checkpoint_problem

    ok = _saved_checkpoint(tmp_path / "ok", {"w": torch.ones(4, 4)})
    assert checkpoint_problem(str(ok), content=True, saves_optimizer=True) is None
    # one byte of a float changed in place: the size is the same, the sha256 is not
    weights = ok / "model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0x01
    weights.write_bytes(bytes(data))
    assert checkpoint_problem(str(ok)) is None  # sizes alone cannot tell
    assert checkpoint_problem(str(ok), content=True).startswith("model.safetensors: its content is not what was saved")
    # a marker from before the digests: sizes only, and the weights' finiteness, which a NaN weight fails
    nan = _saved_checkpoint(tmp_path / "nan", {"w": torch.tensor([1.0, float("nan"), float("inf")])})
    record = json.loads((nan / COMPLETE_MARKER).read_text())
    del record["sha256"]
    (nan / COMPLETE_MARKER).write_text(json.dumps(record))
    assert checkpoint_problem(str(nan), content=True) == ("model.safetensors: 2 non-finite values (first in w), which "
                                                          "grae never saves")
    # a marker that lists less than a checkpoint holds: damaged, whether the file is there or not
    thin = _saved_checkpoint(tmp_path / "thin", {"w": torch.ones(2)})
    record = json.loads((thin / COMPLETE_MARKER).read_text())
    for key in ("files", "sha256"):
        record[key].pop("optimizer.pt")
    (thin / COMPLETE_MARKER).write_text(json.dumps(record))
    assert checkpoint_problem(str(thin), saves_optimizer=True).startswith("optimizer.pt: not in the completion marker")
    assert checkpoint_problem(str(thin), saves_optimizer=False) is None  # save_only_model keeps none
    record["files"] = {}
    (thin / COMPLETE_MARKER).write_text(json.dumps(record))
    assert checkpoint_problem(str(thin)).startswith("the completion marker lists no weight file")


def test_a_reward_without_any_reward_for_n_scored_batches_in_a_row_stops_training():
    import torch

    from grae.engines.trl.rewards import MissingRewardWatch
    from grae.rewards import RewardFunctionError

    nan = float("nan")
    watch = MissingRewardWatch(3, max_steps=100)
    some = torch.tensor([[1.0, nan], [0.0, nan]])  # [B=2, F=2]: "b" gave no reward
    watch.see(["a", "b"], some)
    watch.see(["a", "b"], some)
    watch.see(["a", "b"], torch.tensor([[1.0, nan], [0.0, 0.5]]))  # one sample scored: the streak starts again
    watch.see(["a", "b"], some)
    watch.see(["a", "b"], some)
    with pytest.raises(RewardFunctionError, match=r"^reward function 'b' gave no reward \(None or NaN\) on any sample "
                                                  r"of 3 scored batches in a row \(2 samples each\)"):
        watch.see(["a", "b"], some)
    short = MissingRewardWatch(5, max_steps=2)  # a run shorter than the knob: every batch it scored had none
    short.see(["b"], some[:, 1:])
    with pytest.raises(RewardFunctionError, match="of 2 scored batches in a row"):
        short.see(["b"], some[:, 1:])
    off = MissingRewardWatch(0, max_steps=2)
    for _ in range(5):
        off.see(["b"], some[:, 1:])
    with pytest.raises(ValueError, match="missing_reward_steps"):
        MissingRewardWatch(-1, max_steps=2)
    for bad in (-1, 2.5, True, "3"):  # the config knob: one line naming it
        with pytest.raises(ConfigError, match=r"^missing_reward_steps: (must be an integer >= 0|expected int, got)"):
            load_config("chain-sum", {"missing_reward_steps": bad})
    assert load_config("chain-sum", {}).missing_reward_steps == 5 and load_config("chain-sum", {"missing_reward_steps": 0})


def test_a_divergence_names_as_kept_only_a_checkpoint_whose_content_is_what_was_saved(tmp_path):
    """checkpoint-3's weights overwritten in place (64 KiB of 0xff, the size kept) are not "the last finite
    checkpoint": the message names checkpoint-2, whose files are what was saved."""
    import torch

    from grae.engines.divergence import DivergenceError
    from grae.train.checkpoints import latest_complete_checkpoint
    from grae.train.run import _stops_diverged

    folder = tmp_path / "checkpoints"
    for step in (2, 3):
        _saved_checkpoint(folder / f"checkpoint-{step}", {"w": torch.ones(64 * 1024)})
    weights = folder / "checkpoint-3" / "model.safetensors"
    size = weights.stat().st_size
    with open(weights, "r+b") as f:
        f.seek(size - 64 * 1024)
        f.write(b"\xff" * 64 * 1024)
    assert weights.stat().st_size == size

    def stopped() -> str:
        with pytest.raises(DivergenceError) as caught, \
                _stops_diverged(lambda: latest_complete_checkpoint(str(folder), "r", content=True),
                                lambda: latest_complete_checkpoint(str(folder), "r")):
            raise DivergenceError(4, "the loss is nan", "the learning rate")
        return str(caught.value)

    assert latest_complete_checkpoint(str(folder), "r") == str(folder / "checkpoint-3")  # sizes alone: fooled
    assert f"the last finite checkpoint is {folder / 'checkpoint-2'}, no final/ written" in stopped()
    (folder / "checkpoint-2" / "optimizer.pt").write_bytes(b"\0" * (folder / "checkpoint-2" / "optimizer.pt").stat().st_size)
    assert "no checkpoint of this run on disk holds its saved content with finite weights, no final/" in stopped()
