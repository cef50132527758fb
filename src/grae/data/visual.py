"""Procedural visual reasoning tasks: a rendered image, a question about it, an integer answer.

In the spirit of the multimodal benchmarks of the A-GRAE paper (Geometry3K, chart and counting
questions), small enough for the embedded tiny VLM (``grae tiny build --vlm``) to learn on a CPU:

* ``count_shapes`` — "How many red shapes?" (or, for a share ``any_share`` of the scenes, "How many
  shapes?") over squares and discs of three colours scattered on a white canvas. The answer is uniform
  over its range given the question (0–``max_shapes`` for a colour, 1–``max_shapes`` for all shapes), so
  the question text alone answers no better than about 1 in 6: the image is needed.
* ``bar_value`` — a bar chart of three coloured bars on a grid; "What is the value of the green bar?"
  answer 1–``max_value``.

Every example is a pure function of its parameters, which are a pure function of ``(split seed,
index)``: deterministic by seed on any machine. The held-out split is drawn from its own seed range
and training skips every held-out scene (``question_id`` = a hash of the scene and the question), so
the splits are disjoint. Examples carry the image as a PIL image (``image``) and its id (``image_id``);
prompts are chat messages with an image placeholder, the form TRL's ``GRPOTrainer`` takes for
vision-language models (an ``image`` column beside a conversational ``prompt``).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterator
from typing import Any

from grae.data.base import Task, text_id
from grae.data.registry import register_task

COLOURS = {"red": (220, 30, 30), "green": (30, 170, 50), "blue": (40, 60, 220)}
HELDOUT_SEED = 2**31
#: distinct held-out scenes per task (the first ``n`` are the held-out split)
HELDOUT_SIZE = 500
#: scene draws per split before a task with few distinct scenes gives up
MAX_DRAWS = 1_000_000
_INTEGER = re.compile(r"-?\d+")


def first_integer(completion: Any) -> int | None:
    """The first integer in a completion (str, bytes or TRL's message list); None if there is none."""
    from grae.rewards.extract import completion_text

    match = _INTEGER.search(completion_text(completion) or "")
    return int(match.group()) if match else None


class VisualTask(Task):
    """Base of the visual tasks: splits, prompts, scoring; subclasses draw scenes and render them.

    Args:
        image_size: side of the square RGB image in pixels.
        heldout_size: distinct held-out scenes.
    """

    prompt_style = "chat"
    answer_format = "plain"
    name = ""

    def __init__(self, image_size: int = 32, heldout_size: int = HELDOUT_SIZE, prompt_style: str = "chat"):
        if prompt_style != "chat":
            raise ValueError(f"prompt_style: visual tasks put the image in a chat message; use 'chat', got {prompt_style!r}")
        if image_size < 16:
            raise ValueError(f"image_size: at least 16 pixels, got {image_size}")
        self.image_size, self.heldout_size = image_size, heldout_size

    # -- to implement --------------------------------------------------------------------------
    def scene(self, rng: random.Random) -> dict[str, Any]:
        """Random scene parameters (JSON-serialisable) with ``question`` and ``answer`` keys."""
        raise NotImplementedError

    def render(self, scene: dict[str, Any]):
        """The scene as a PIL image."""
        raise NotImplementedError

    # -- splits --------------------------------------------------------------------------------
    def _example(self, scene: dict[str, Any]) -> dict[str, Any]:
        key = json.dumps({"task": self.name, "size": self.image_size, **scene}, sort_keys=True)
        qid = text_id(key)
        return {
            "question_id": qid, "task": self.name, "question": scene["question"],
            "prompt": [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": scene["question"]}]}],
            "answer": str(scene["answer"]), "source": f"grae/visual/{self.name}",
            "image": self.render(scene), "image_id": f"{self.name}/{qid}",
        }

    def _scenes(self, seed: int) -> Iterator[dict[str, Any]]:
        for index in range(MAX_DRAWS):
            yield self.scene(random.Random(f"{self.name}/{seed}/{index}"))

    def _heldout_scenes(self) -> list[dict[str, Any]]:
        seen, scenes = set(), []
        for scene in self._scenes(HELDOUT_SEED):
            key = json.dumps(scene, sort_keys=True)
            if key not in seen:
                seen.add(key)
                scenes.append(scene)
            if len(scenes) == self.heldout_size:
                return scenes
        return scenes

    def heldout(self, n: int | None = None) -> list[dict]:
        scenes = self._heldout_scenes()
        if n is not None and n > len(scenes):
            raise ValueError(f"task {self.name!r}: {len(scenes)} held-out scenes (heldout_size), asked for {n}")
        return [self._example(scene) for scene in scenes[:n]]

    def iter_train(self, seed: int = 0) -> Iterator[dict]:
        seen = {json.dumps(scene, sort_keys=True) for scene in self._heldout_scenes()}
        for scene in self._scenes(seed):
            key = json.dumps(scene, sort_keys=True)
            if key not in seen:
                seen.add(key)
                yield self._example(scene)

    def _shortage_hint(self) -> str:
        return "The task's parameters allow few distinct scenes: raise max_shapes/max_value, or train on fewer prompts."

    # -- scoring -------------------------------------------------------------------------------
    def score(self, completion: Any, example: dict) -> float:
        try:
            return float(first_integer(completion) == int(example["answer"]))
        except (TypeError, ValueError):
            return 0.0

    def to_hf_dataset(self, examples):
        """Columns of :func:`grae.data.base.to_hf_dataset` plus ``image`` (a datasets ``Image``) and ``image_id``."""
        import datasets

        rows = list(examples)
        if not rows:
            raise ValueError("to_hf_dataset needs at least one example")
        keys = ("question_id", "task", "question", "prompt", "answer", "source", "image", "image_id")
        return datasets.Dataset.from_list([{k: row[k] for k in keys} for row in rows])

    def _canvas(self):
        from PIL import Image

        return Image.new("RGB", (self.image_size, self.image_size), (255, 255, 255))


@register_task("count_shapes")
class CountShapes(VisualTask):
    """Count the shapes of one colour, or all of them.

    Labels are balanced: a colour question first draws its answer ``a`` uniformly from
    0 … ``max_shapes``, then ``b`` shapes of the other two colours (``a + b`` between 1 and ``max_shapes``);
    "How many shapes?" draws its answer uniformly from 1 … ``max_shapes``. The question text alone then
    predicts the answer no better than 1 / (``max_shapes`` + 1) or 1 / ``max_shapes`` (the text-only
    majority baseline of :func:`grae.tiny.vlm.text_only_chance`); the old generator (a uniform number of
    shapes, each of a uniform colour) let "0" or "1" by colour answer 45.5% of the scenes blind.

    Args:
        max_shapes: at most this many shapes (squares or discs, side ``image_size // 8``) per image.
        any_share: the share of "How many shapes?" questions (colour-blind counting: the easier half the
            tiny VLM learns to look from, docs/tiny.md).
    """

    name = "count_shapes"

    def __init__(self, max_shapes: int = 5, any_share: float = 0.5, **kwargs: Any):
        super().__init__(**kwargs)
        if not 1 <= max_shapes <= 9:
            raise ValueError(f"max_shapes: between 1 and 9, got {max_shapes}")
        if not 0.0 <= any_share <= 1.0:
            raise ValueError(f"any_share: a share between 0 and 1, got {any_share}")
        self.max_shapes, self.any_share = max_shapes, any_share
        self.cell = self.image_size // 4  # shapes sit in a 4 × 4 grid of cells, at most one per cell

    def answer_set(self) -> list[str]:
        """0 … ``max_shapes`` (no shape of the asked colour is a valid answer)."""
        return [str(v) for v in range(0, self.max_shapes + 1)]

    def scene(self, rng: random.Random) -> dict[str, Any]:
        palette = sorted(COLOURS)
        if rng.random() < self.any_share:
            count = rng.randint(1, self.max_shapes)
            colours = [rng.choice(palette) for _ in range(count)]
            colour, question, answer = "any", "How many shapes?", count
        else:
            colour = rng.choice(palette)
            answer = rng.randint(0, self.max_shapes)
            others = [c for c in palette if c != colour]
            colours = [colour] * answer + [rng.choice(others) for _ in range(rng.randint(max(0, 1 - answer),
                                                                                         self.max_shapes - answer))]
            question = f"How many {colour} shapes?"
        cells = rng.sample(range(16), len(colours))
        shapes = sorted((cell, c, rng.choice(("square", "disc"))) for cell, c in zip(cells, colours))
        return {"shapes": shapes, "colour": colour, "question": question, "answer": answer}

    def render(self, scene: dict[str, Any]):
        from PIL import ImageDraw

        image = self._canvas()
        draw = ImageDraw.Draw(image)
        margin = max(1, self.cell // 5)
        for cell, colour, shape in scene["shapes"]:
            x, y = (cell % 4) * self.cell + margin, (cell // 4) * self.cell + margin
            box = [x, y, x + self.cell - 2 * margin - 1, y + self.cell - 2 * margin - 1]
            (draw.rectangle if shape == "square" else draw.ellipse)(box, fill=COLOURS[colour])
        return image


@register_task("bar_value")
class BarValue(VisualTask):
    """Read the value of one bar in a chart of three bars (red, green, blue, in a shuffled order).

    Args:
        max_value: bar values are 1 … max_value (grid lines at every unit).
    """

    name = "bar_value"

    def __init__(self, max_value: int = 6, **kwargs: Any):
        super().__init__(**kwargs)
        if not 2 <= max_value <= 9:
            raise ValueError(f"max_value: between 2 and 9, got {max_value}")
        self.max_value = max_value

    def answer_set(self) -> list[str]:
        """1 … ``max_value``."""
        return [str(v) for v in range(1, self.max_value + 1)]

    def scene(self, rng: random.Random) -> dict[str, Any]:
        order = rng.sample(sorted(COLOURS), 3)
        values = [rng.randint(1, self.max_value) for _ in order]
        asked = rng.randrange(3)
        return {"bars": list(zip(order, values)), "question": f"What is the value of the {order[asked]} bar?",
                "answer": values[asked]}

    def render(self, scene: dict[str, Any]):
        from PIL import ImageDraw

        image = self._canvas()
        draw = ImageDraw.Draw(image)
        size = self.image_size
        base, unit = size - 2, (size - 4) / self.max_value
        for level in range(1, self.max_value + 1):  # grid lines
            y = round(base - level * unit)
            draw.line([0, y, size - 1, y], fill=(200, 200, 200))
        width = size // 4
        for slot, (colour, value) in enumerate(scene["bars"]):
            x = 2 + slot * (width + 2)
            draw.rectangle([x, round(base - value * unit), x + width - 1, base], fill=COLOURS[colour])
        return image
