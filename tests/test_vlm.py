"""Multimodal RLVR on a CPU: the procedural visual tasks, the shipped tiny VLM, its evaluation,
2 steps of A-GRAE through GraeTrainer with images in the prompts, and verl's multimodal export."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest

from grae.data import get_task
from timeouts import scaled

pytest.importorskip("PIL", reason="the visual tasks render with Pillow (a transformers dependency)")


# -- the visual tasks -----------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["count_shapes", "bar_value"])
def test_visual_tasks_are_deterministic_and_their_splits_disjoint(name):
    task = get_task(name)
    first, again = task.heldout(20), get_task(name).heldout(20)
    assert [e["question_id"] for e in first] == [e["question_id"] for e in again]
    assert all(a["image"].tobytes() == b["image"].tobytes() for a, b in zip(first, again))
    train = task.train(300, seed=0)
    assert [e["question_id"] for e in train] == [e["question_id"] for e in get_task(name).train(300, seed=0)]
    assert [e["question_id"] for e in train] != [e["question_id"] for e in task.train(300, seed=1)]
    held = {e["question_id"] for e in task.heldout()}
    assert not held & {e["question_id"] for e in train}
    assert len({e["question_id"] for e in train}) == 300  # deduplicated
    example = first[0]
    assert example["image"].size == (32, 32) and example["image_id"].startswith(f"{name}/")
    assert example["prompt"][0]["content"][0] == {"type": "image"}


def test_count_shapes_answers_by_hand():
    task = get_task("count_shapes")
    scene = {"shapes": [[0, "red", "square"], [5, "blue", "disc"], [9, "red", "disc"]], "colour": "red",
             "question": "How many red shapes?", "answer": 2}
    image = task.render(scene)
    cell = 32 // 4
    assert image.getpixel((cell // 2, cell // 2)) == (220, 30, 30)  # cell 0: a red square at its centre
    assert image.getpixel((31, 31)) == (255, 255, 255)  # cell 15 empty
    example = task._example(scene)
    assert task.score("2", example) == 1.0 and task.score(" 2 shapes", example) == 1.0
    assert task.score("3", example) == 0.0 and task.score("~1", example) == 0.0 and task.score(None, example) == 0.0


def test_count_shapes_labels_are_balanced_so_the_question_alone_does_not_answer():
    """The answer is drawn first, uniformly, so the text-only majority baseline is near 1 in 6 (drawing the
    shapes first, "0"/"1" by colour answers 45.5% blind), and every scene's answer is its count."""
    from collections import Counter

    from grae.tiny.vlm import text_only_chance

    task = get_task("count_shapes")
    held = task.heldout()
    assert text_only_chance(task.train(2000, seed=0), held) < 0.25
    scenes = task._heldout_scenes()
    for scene in scenes:
        counted = [c for _, c, _ in scene["shapes"] if scene["colour"] in ("any", c)]
        assert len(counted) == scene["answer"] and 1 <= len(scene["shapes"]) <= task.max_shapes
    kinds = Counter(scene["colour"] == "any" for scene in scenes)
    assert 0.4 < kinds[True] / len(scenes) < 0.6  # any_share = 0.5
    colour_answers = Counter(scene["answer"] for scene in scenes if scene["colour"] != "any")
    assert set(colour_answers) == set(range(6)) and max(colour_answers.values()) < 2 * min(colour_answers.values())


def test_visual_task_settings_name_the_field():
    with pytest.raises(ValueError, match="max_shapes"):
        get_task("count_shapes", max_shapes=12)
    with pytest.raises(ValueError, match="any_share"):
        get_task("count_shapes", any_share=1.5)
    with pytest.raises(ValueError, match="prompt_style"):
        get_task("bar_value", prompt_style="plain")
    with pytest.raises(ValueError, match="held-out scenes"):
        get_task("bar_value", heldout_size=10).heldout(11)


def test_visual_tasks_export_in_verls_multimodal_schema(tmp_path):
    import pyarrow.parquet as pq
    from PIL import Image

    from grae.engines.verl.export import export_verl
    from grae.engines.verl.reward import compute_score

    rows = pq.read_table(export_verl("count_shapes", tmp_path / "cs.parquet", n=3)).to_pylist()
    row = rows[0]
    assert row["prompt"] == [{"role": "user", "content": "<image>" + json.loads(row["extra_info"]["grae_example"])["question"]}]
    image = Image.open(io.BytesIO(row["images"][0]["bytes"]))
    assert image.size == (32, 32)
    gold = row["reward_model"]["ground_truth"]
    assert compute_score(row["data_source"], gold, gold, row["extra_info"]) == 1.0
    assert compute_score(row["data_source"], str(int(gold) + 1), gold, row["extra_info"]) == 0.0


# -- the tiny VLM -----------------------------------------------------------------------------------
pytest.importorskip("trl", reason="the train extra; `make test` installs it")


@pytest.fixture(scope="module")
def vlm():
    from grae.eval.backends import load_hf

    model, _, processor = load_hf("tiny-vlm", device="cpu")
    return model, processor


def test_the_tiny_vlm_loads_as_a_transformers_vlm(vlm):
    from transformers import LlavaForConditionalGeneration, ProcessorMixin

    model, processor = vlm
    assert isinstance(model, LlavaForConditionalGeneration) and isinstance(processor, ProcessorMixin)
    assert sum(p.numel() for p in model.parameters()) < 6e6


def test_evaluating_the_vlm_on_images_records_the_image(vlm, tmp_path):
    from grae.eval import evaluate

    model, processor = vlm
    task = get_task("count_shapes")
    examples = task.heldout(6)
    path = tmp_path / "rows.jsonl"
    result = evaluate(model, processor, examples, task, n=4, temperature=1.0, top_p=1.0, max_tokens=4, batch_size=8,
                      seed=0, output_path=path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 24 and {r["image_id"] for r in rows} == {e["image_id"] for e in examples}
    # a completion the 4-token budget cut scores 0 without being read (grae.eval.backends.Completion)
    assert all(r["label"] == (not r.get("truncated") and task.score(r["response"], e) == 1.0) for r in rows
               for e in examples if e["question_id"] == r["question_id"])
    assert set(result.curve) == {1, 2, 4}
    same = evaluate(model, processor, examples, task, n=4, temperature=1.0, top_p=1.0, max_tokens=4, batch_size=8, seed=0)
    assert [r["response"] for r in same.rows] == [r["response"] for r in rows]  # seeded: reproducible


def test_grae_eval_runs_on_a_visual_task(tmp_path):
    out = tmp_path / "ev"
    proc = subprocess.run([sys.executable, "-m", "grae.cli", "eval", "tiny-vlm", "--tasks", "bar_value", "--num-problems", "3",
                           "--n", "2", "--output", str(out)], capture_output=True, text=True, timeout=scaled(300))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    rows = [json.loads(line) for line in (out / "bar_value.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and all(r["image_id"].startswith("bar_value/") for r in rows)


def test_grae_train_tiny_vlm_two_steps(tmp_path):
    """``grae train --model tiny-vlm --max-steps 2 --eval.enabled false``: the preset's recipe (count_shapes,
    A-GRAE α = 0.5), images in the prompts through GraeTrainer, a loadable final model."""
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, "-m", "grae.cli", "train", "--model", "tiny-vlm", "--max-steps", "2",
                           "--eval.enabled", "false", "--trl.per_device_train_batch_size", "16", "--output-dir", str(out)],
                          capture_output=True, text=True, timeout=scaled(600))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    config = (out / "config.yaml").read_text()
    assert "count_shapes" in config and "alpha: 0.5" in config
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [1, 2] and all(m["reward_mean"] is not None for m in metrics)
    from transformers import AutoModelForImageTextToText, AutoProcessor

    AutoProcessor.from_pretrained(out / "final")
    AutoModelForImageTextToText.from_pretrained(out / "final")


def test_the_tiny_vlm_must_look_at_the_image_on_its_default_task(vlm):
    """On the default visual task the base beats the text-only majority baseline with the right
    image, and with the image blanked its greedy accuracy loses at least half of that gain (200 held-out
    scenes, greedy only: cheap)."""
    from grae.tiny.vlm import DEFAULT_VLM_TASK, vision_gap

    model, processor = vlm
    gap = vision_gap(model, processor, DEFAULT_VLM_TASK, problems=200, samples=0, conditions=("right", "blank"))
    gain = gap["right"]["greedy"] - gap["chance"]
    assert gain > 0.02, gap
    assert gap["blank"]["greedy"] <= gap["right"]["greedy"] - gain / 2, gap
