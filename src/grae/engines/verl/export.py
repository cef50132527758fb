"""grae tasks → verl's RL dataset (parquet) + a reward function verl can load.

verl 0.9.1's ``RLHFDataset`` reads one row per prompt::

    data_source   str                    routes the reward function ("grae/<task>")
    prompt        list[{role, content}]  chat messages; verl applies the tokenizer's chat template
    ability       str                    free-form tag ("math", "reasoning")
    reward_model  {style: "rule", ground_truth: str}
    extra_info    {split, index, question_id, task, task_params, question, grae_example}
    images        [{bytes: PNG}]         visual tasks only: verl's multimodal schema (``data.image_key=images``;
                                         each ``<image>`` in a message's content is one image, in order)

and its reward manager calls ``compute_score(data_source, solution_str, ground_truth, extra_info)``
per response. :mod:`grae.engines.verl.reward` is that function, scoring with the task's own verifier
(``grae.data`` task ``.score``) from the full example stored as JSON in ``extra_info.grae_example``,
so verl and ``grae train`` give the same reward for the same completion. Point verl at it with::

    reward.custom_reward_function.path=pkg://grae.engines.verl.reward
    reward.custom_reward_function.name=compute_score

This module does not import verl.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from grae.io import atomic_path

SPLITS = ("train", "heldout")
#: verl's image placeholder in a message's content string
IMAGE_PLACEHOLDER = "<image>"
REWARD_OVERRIDES = (
    "reward.custom_reward_function.path=pkg://grae.engines.verl.reward",
    "reward.custom_reward_function.name=compute_score",
)


def chat_messages(prompt: Any) -> list[dict[str, str]]:
    """A grae example's ``prompt`` (a string, or already a list of chat messages) as chat messages.
    Content given as parts (``[{"type": "image"}, {"type": "text", "text": …}]``) becomes verl's string
    form, an ``<image>`` placeholder per image."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, (list, tuple)) and all(isinstance(m, dict) and "role" in m and "content" in m for m in prompt):
        return [{"role": str(m["role"]), "content": _content_text(m["content"])} for m in prompt]
    raise ValueError(f"prompt: expected a string or a list of {{role, content}} messages, got {type(prompt).__name__}")


def _content_text(content: Any) -> str:
    if isinstance(content, (list, tuple)):
        return "".join(IMAGE_PLACEHOLDER if part.get("type") == "image" else str(part.get("text", "")) for part in content)
    return str(content)


def _png(image) -> dict[str, bytes]:
    import io

    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return {"bytes": buffer.getvalue()}


def verl_row(example: dict, index: int, *, task_name: str, task_params: dict, split: str, ability: str) -> dict:
    """One verl RL-dataset row for one grae example (keys: question_id, question, prompt, answer)."""
    missing = [k for k in ("question_id", "prompt", "answer") if k not in example]
    if missing:
        raise ValueError(f"example {index}: missing {', '.join(missing)} (grae.data examples carry question_id, "
                         "question, prompt, answer, task)")
    image = example.get("image")
    stored = {k: v for k, v in example.items() if k != "image"}  # the image travels in the images column
    row = {
        "data_source": f"grae/{task_name}",
        "prompt": chat_messages(example["prompt"]),
        "ability": ability,
        "reward_model": {"style": "rule", "ground_truth": str(example["answer"])},
        "extra_info": {
            "split": split,
            "index": int(index),
            "question_id": str(example["question_id"]),
            "task": task_name,
            "task_params": json.dumps(task_params, sort_keys=True),
            "question": str(example.get("question", "")),
            "grae_example": json.dumps(stored, sort_keys=True, default=str),
        },
    }
    if image is not None:
        row["images"] = [_png(image)]
    return row


def verl_rows(examples: Iterable[dict], *, task_name: str, task_params: dict | None = None, split: str = "train",
              ability: str | None = None) -> list[dict]:
    params = dict(task_params or {})
    tag = ability or ("math" if "math" in task_name.lower() else "reasoning")
    return [verl_row(ex, i, task_name=task_name, task_params=params, split=split, ability=tag) for i, ex in enumerate(examples)]


def write_parquet(rows: list[dict], out: str | os.PathLike) -> Path:
    """Write rows atomically (temporary file + rename)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    if not rows:
        raise ValueError("no examples to export")
    out = Path(out)
    with atomic_path(out) as tmp:
        pq.write_table(pa.Table.from_pylist(rows), tmp)
    return out


def export_verl(task_name: str, out: str | os.PathLike, *, split: str = "train", n: int | None = 1000, seed: int = 0,
                task_params: dict | None = None, task: Any = None) -> Path:
    """Draw ``n`` examples of a grae task and write them as a verl RL-dataset parquet.

    Args:
        task_name: a ``grae.data`` task name (``math``, a reasoning-gym generator, …).
        out: output ``.parquet`` path.
        split: ``train`` (``task.train(n, seed)``) or ``heldout`` (``task.heldout(n)``, disjoint from train).
        n: number of examples; ``None`` = the whole split of a dataset-backed task (procedural tasks
            are unbounded and refuse ``None``).
        task_params: keyword parameters of the task (``grae.data.get_task(name, **params)``).
        task: a ready task object (tests); default ``grae.data.get_task(task_name, **task_params)``.
    """
    if split not in SPLITS:
        raise ValueError(f"split: {split!r}; valid: {', '.join(SPLITS)}")
    if n is not None and n < 1:
        raise ValueError(f"n: need at least one example (or None for the whole split), got {n}")
    params = dict(task_params or {})
    if task is None:
        from grae.data import get_task

        task = get_task(task_name, **params)
    examples = task.train(n, seed=seed) if split == "train" else task.heldout(n)
    return write_parquet(verl_rows(examples, task_name=task_name, task_params=params, split=split), out)
