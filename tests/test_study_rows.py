"""studies/study_rows.py: a study's finished jobs travel through git without weights, and compare counts
them as finished on a machine that never ran them."""

import gzip
import importlib.util
import io
import json
import tarfile
from pathlib import Path

import pytest
import yaml

from grae.compare.grid import load_compare_config

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("study_rows", ROOT / "studies" / "study_rows.py")
study_rows = importlib.util.module_from_spec(spec)
spec.loader.exec_module(study_rows)


def _study(tmp_path: Path) -> Path:
    study = {"base": "regime2", "methods": {"grpo": {"estimator": "grpo"}, "nsr": {"estimator": "nsr"}},
             "seeds": [5, 6], "baseline": "grpo", "output_dir": "runs/studies/s", "frontier": [0.5],
             "frontier_methods": ["grpo"], "eval": {"exact": True, "num_problems": 96}}
    path = tmp_path / "studies" / "design" / "s.yaml"
    path.parent.mkdir(parents=True)
    path.write_text(yaml.safe_dump(study))
    return path


def _finish(job_dir: Path, steps: list[int], weights: bool, settings: dict | None = None, config: dict | None = None) -> None:
    files = {"job.yaml": yaml.safe_dump(config), "config.yaml": "x: 1\n", "run.json": "{}", "metrics.jsonl": '{"step": 1}\n',
             "train.log": "log", "eval/summary.json": "{}"}
    for step in steps:
        files[f"eval/frontier/step-{step}.curve.json"] = json.dumps({"step": step, "settings": settings})
        files[f"eval/frontier/step-{step}.run.json"] = "{}"
        files[f"eval/frontier/step-{step}.jsonl"] = "rows"
    if weights:
        files["final/config.json"] = "{}"
        files["final/model.safetensors"] = "weights"
    for name, text in files.items():
        (job_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (job_dir / name).write_text(text)


def test_pack_then_unpack_elsewhere_gives_finished_jobs_without_weights(tmp_path, monkeypatch):
    from grae.compare.frontier import step_settings
    from grae.compare.runner import frontier_done

    here, there = tmp_path / "here", tmp_path / "there"
    design = _study(here)
    monkeypatch.chdir(here)
    cfg = load_compare_config(design)
    finished = [j for j in cfg.jobs() if j.seed == 5]
    settings = step_settings(cfg.train_config(finished[0]), cfg.eval)
    from grae.train.config import to_dict

    for job in finished:  # regime2 trains 1,000 steps: the frontier's 50 % is step 500
        _finish(job.output_dir, [500, 1000] if job.method == "grpo" else [1000], weights=True, settings=settings,
                config=to_dict(cfg.train_config(job)))
    # trained, its final model not yet evaluated (compare's evaluation still running): not packed
    _finish(cfg.jobs()[-1].output_dir, [], weights=True)
    (cfg.output_dir / "base").mkdir(parents=True)
    (cfg.output_dir / "base" / "frontier.curve.json").write_text("{}")
    (cfg.output_dir / "invocations.jsonl").write_text('{"wall_seconds": 1}\n')
    rows = here / "studies" / "rows"
    assert study_rows.pack(cfg, rows) == ["study.tgz", "grpo-seed5.tgz", "nsr-seed5.tgz"]  # seed 6 never ran
    first = (rows / "s" / "grpo-seed5.tgz").read_bytes()
    assert study_rows.pack(cfg, rows) == []  # nothing changed: nothing rewritten
    with tarfile.open(rows / "s" / "grpo-seed5.tgz") as tar:
        names = sorted(tar.getnames())
        assert all(m.mtime == 0 for m in tar.getmembers())
    assert names == ["config.yaml", "eval/frontier/step-1000.curve.json", "eval/frontier/step-1000.run.json",
                     "eval/frontier/step-500.curve.json", "eval/frontier/step-500.run.json", "eval/summary.json",
                     "job.yaml", "metrics.jsonl", "run.json"]  # no weights, no sample rows, no log

    # another machine: a clone with the design and the archives, no runs/
    (there / "studies").mkdir(parents=True)
    import shutil
    shutil.copytree(here / "studies", there / "studies", dirs_exist_ok=True)
    monkeypatch.chdir(there)
    cfg2 = load_compare_config(there / "studies" / "design" / "s.yaml")
    restored = study_rows.unpack(cfg2, there / "studies" / "rows")
    assert restored == ["base/frontier.curve.json", "invocations.jsonl", "grpo/seed5", "nsr/seed5"]
    for job in cfg2.jobs():
        assert job.done == (job.seed == 5)
        if job.seed == 5:
            assert frontier_done(cfg2, job)  # no weights left to evaluate: compare will not touch it
            assert not (job.output_dir / "final").exists()
    assert study_rows.unpack(cfg2, there / "studies" / "rows") == []  # a second unpack restores nothing
    # packing on the second machine gives the same bytes
    assert study_rows.pack(cfg2, there / "studies" / "rows") == []
    assert (there / "studies" / "rows" / "s" / "grpo-seed5.tgz").read_bytes() == first
    # a sitting here and one there: each machine's record gains the other's rows, once
    (cfg2.output_dir / "invocations.jsonl").write_text('{"wall_seconds": 1}\n{"wall_seconds": 2}')
    monkeypatch.chdir(here)  # the study's output_dir is relative
    (cfg.output_dir / "invocations.jsonl").write_text('{"wall_seconds": 1}\n{"wall_seconds": 3}\n')
    assert study_rows.pack(cfg, rows) == ["study.tgz"]
    shutil.copyfile(rows / "s" / "study.tgz", there / "studies" / "rows" / "s" / "study.tgz")
    monkeypatch.chdir(there)
    assert study_rows.unpack(cfg2, there / "studies" / "rows") == ["invocations.jsonl"]
    assert study_rows.unpack(cfg2, there / "studies" / "rows") == []
    assert (cfg2.output_dir / "invocations.jsonl").read_text().splitlines() == [
        '{"wall_seconds": 1}', '{"wall_seconds": 2}', '{"wall_seconds": 3}']


def test_an_archive_trained_with_the_no_signal_stop_armed_belongs_to_a_study_that_turns_it_off(tmp_path, monkeypatch):
    """A finished job archived with continue_without_signal false is the job of a study that says true (the flag
    only decides whether training stops); archived true, it is refused by a study that says false."""
    from grae.train.config import to_dict

    design = _study(tmp_path)
    monkeypatch.chdir(tmp_path)
    cfg = load_compare_config(design)
    job = cfg.jobs()[0]
    armed = to_dict(cfg.train_config(job))
    assert armed["continue_without_signal"] is False
    off = {**armed, "continue_without_signal": True}

    def archive(config: dict) -> Path:
        _finish(tmp_path / "job", [], weights=False, config=config)
        path = tmp_path / "job.tgz"
        with tarfile.open(path, "w:gz") as tar:
            for name in ("job.yaml", "config.yaml", "run.json", "metrics.jsonl", "eval/summary.json"):
                tar.add(tmp_path / "job" / name, arcname=name)
        return path

    assert "job.yaml" in study_rows.check_archive(archive(armed), ("*",), expected=off)
    with pytest.raises(ValueError, match=r"packed from another configuration of this job \(continue_without_signal: "
                                         r"True → False\)"):
        study_rows.check_archive(archive(off), ("*",), expected=armed)


def test_unpack_refuses_an_archive_that_writes_outside_its_job(tmp_path):
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo("eval/../../escape.txt")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    archive = tmp_path / "bad.tgz"
    archive.write_bytes(gzip.compress(raw.getvalue()))
    with pytest.raises(ValueError, match="unexpected member 'eval/../../escape.txt'"):
        study_rows.extract(archive, tmp_path / "job")
    assert not (tmp_path / "escape.txt").exists()


def test_an_archive_holding_a_file_twice_is_refused_before_anything_is_written(tmp_path):
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for body in (b'{"first": 1}', b'{"second": 2}'):
            info = tarfile.TarInfo("run.json")
            info.size = len(body)
            tar.addfile(info, io.BytesIO(body))
    archive = tmp_path / "twice.tgz"
    archive.write_bytes(gzip.compress(raw.getvalue()))
    with pytest.raises(ValueError, match="holds 'run.json' twice, and which copy is the job's cannot be told"):
        study_rows.extract(archive, tmp_path / "job")
    assert not (tmp_path / "job").exists()
