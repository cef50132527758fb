"""Build the embedded tiny vision-language model: the tiny LM + a tiny ViT, as a LLaVA.

Architecture: transformers' ``LlavaForConditionalGeneration`` — a CLIP vision tower (``image_size``
pixels in ``patch_size`` patches, ``vision_layers`` layers of width ``vision_hidden``), LLaVA's
two-layer projector, and the embedded tiny Llama (``grae.tiny``) as the language model, its tokenizer
extended by one ``<image>`` token. It loads with ``AutoModelForImageTextToText`` / ``AutoProcessor``
(``LlavaProcessor``), the pair TRL's ``GRPOTrainer`` takes for vision-language models.

Recipe, as for the LM (``docs/tiny.md``): stage 1 supervised warm-up on the visual tasks' training
splits (``grae.data.visual``: ``count_shapes``, ``bar_value``), stage 2 "calibration" with
``label_noise`` guesses (``~`` + a wrong number) so that the base model's pass@1 is well below its
pass@k — room for RL. Deterministic for a seed and a torch thread count.
"""

from __future__ import annotations

import itertools
import json
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from .build import TinyRecipe, _noisy_answer, sft

IMAGE_TOKEN = "<image>"
#: the chat template of the tiny models, with image placeholders in list-of-parts messages
VLM_CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{% if m['content'] is string %}{{ m['content'] }}"
    "{% else %}{% for part in m['content'] %}{% if part['type'] == 'image' %}<image>{% elif part['type'] == 'text' %}"
    "{{ part['text'] }}{% endif %}{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
#: the visual task the preset trains and evaluates on by default (``grae train --model tiny-vlm``)
DEFAULT_VLM_TASK = "count_shapes"


@dataclass
class TinyVLMRecipe(TinyRecipe):
    """Everything that determines the built VLM. The LM fields of :class:`TinyRecipe` are unused (the
    language model is the embedded tiny LM); the SFT and calibration fields keep their meaning."""

    image_size: int = 32
    #: 8-pixel patches, one per cell of count_shapes' 4 × 4 grid: 16 patches + the class token = 17 image
    #: tokens per prompt (16-pixel patches give 5 tokens, too few: the model never learned to look)
    patch_size: int = 8
    vision_hidden: int = 96
    vision_intermediate: int = 192
    vision_layers: int = 2
    vision_heads: int = 4
    #: the SFT mix: visual task name -> its parameters (equal shares)
    tasks: dict[str, dict[str, Any]] = field(default_factory=lambda: {"count_shapes": {}, "bar_value": {}})
    sft_steps: int = 1000
    batch_size: int = 32
    #: stage 2 as for the LM (docs/tiny.md): a share of the targets become a guess ("~" + a wrong number),
    #: a mode the verifier never accepts — room for RL. 0.3, not the LM's 0.5, so that greedy decoding
    #: still answers where the model is sure (a guess first token at 0.5 would win every greedy tie)
    calib_steps: int = 200
    calib_lr: float = 3e-4
    label_noise: float = 0.3
    guess_deltas: tuple[int, ...] = (-3, -2, -1, 1, 2, 3)


def make_processor(tokenizer, recipe: TinyVLMRecipe):
    from transformers import CLIPImageProcessor, LlavaProcessor

    tokenizer.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>", IMAGE_TOKEN]})
    images = CLIPImageProcessor(size={"shortest_edge": recipe.image_size},
                                crop_size={"height": recipe.image_size, "width": recipe.image_size})
    return LlavaProcessor(image_processor=images, tokenizer=tokenizer, patch_size=recipe.patch_size,
                          vision_feature_select_strategy="full", num_additional_image_tokens=1,
                          chat_template=VLM_CHAT_TEMPLATE)


def make_vlm(recipe: TinyVLMRecipe, processor, language_model):
    """A LLaVA whose language model starts as ``language_model`` (the tiny LM, embeddings grown by one)."""
    from transformers import CLIPVisionConfig, LlavaConfig, LlavaForConditionalGeneration

    tokenizer = processor.tokenizer
    language_model.resize_token_embeddings(len(tokenizer))
    vision = CLIPVisionConfig(hidden_size=recipe.vision_hidden, intermediate_size=recipe.vision_intermediate,
                              num_hidden_layers=recipe.vision_layers, num_attention_heads=recipe.vision_heads,
                              image_size=recipe.image_size, patch_size=recipe.patch_size,
                              projection_dim=recipe.vision_hidden)
    config = LlavaConfig(vision_config=vision, text_config=language_model.config,
                         image_token_index=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN),
                         vision_feature_select_strategy="full", vision_feature_layer=-1, projector_hidden_act="gelu")
    torch.manual_seed(recipe.seed)
    model = LlavaForConditionalGeneration(config)
    model.model.language_model.load_state_dict(language_model.model.state_dict())
    model.lm_head.load_state_dict(language_model.lm_head.state_dict())
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = [tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|im_end|>")]
    return model


def _vlm_batches(recipe: TinyVLMRecipe, processor, *, stage: int, noise: float):
    """Batches of (chat prompt with image → answer + EOS), loss on the answer; tasks in turn."""
    from grae.data import get_task

    rng = random.Random(recipe.seed * 1_000_003 + 29 + stage)
    def endless(task, seed):  # a task with few distinct scenes (bar_value) is repeated, reshuffled, epoch by epoch
        for epoch in itertools.count():
            yield from task.iter_train(seed=seed + 1000 * epoch)

    streams = [endless(get_task(name, image_size=recipe.image_size, **params), recipe.seed + 100 * stage)
               for name, params in sorted(recipe.tasks.items())]
    tokenizer = processor.tokenizer
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    prompts: dict[str, list[int]] = {}  # question text -> prompt ids (image tokens expanded); few distinct texts

    def prompt_ids(example) -> list[int]:
        if example["question"] not in prompts:
            text = processor.apply_chat_template(example["prompt"], add_generation_prompt=True)
            prompts[example["question"]] = processor(text=[text], images=[example["image"]],
                                                     return_tensors="pt")["input_ids"][0].tolist()
        return prompts[example["question"]]

    turn = 0
    while True:
        items, images = [], []
        for _ in range(recipe.batch_size):
            example = next(streams[turn % len(streams)])
            turn += 1
            answer = tokenizer(_noisy_answer(example["answer"], recipe, rng, noise), add_special_tokens=False)["input_ids"]
            items.append((prompt_ids(example), answer + [eos]))
            images.append(example["image"])
        pixel_values = processor.image_processor(images=images, return_tensors="pt")["pixel_values"]
        width = max(len(p) + len(c) for p, c in items)
        ids = torch.full((len(items), width), pad)
        labels = torch.full((len(items), width), -100)
        mask = torch.zeros((len(items), width), dtype=torch.long)
        for row, (prompt, completion) in enumerate(items):
            sequence = prompt + completion
            ids[row, :len(sequence)] = torch.tensor(sequence)
            mask[row, :len(sequence)] = 1
            labels[row, len(prompt):len(sequence)] = torch.tensor(completion)
        yield {"input_ids": ids, "attention_mask": mask, "labels": labels,
               "pixel_values": pixel_values}


def build_tiny_vlm(output_dir: str | Path, *, seed: int = 0, evaluate: bool = True, eval_problems: int = 200,
                   eval_samples: int = 64, num_threads: int | None = None, log=print, **overrides: Any) -> Path:
    """Build the tiny VLM into ``output_dir`` (``overrides``: :class:`TinyVLMRecipe` fields); with
    ``evaluate``, the base model's held-out pass@k on each visual task goes into ``build_info.json``."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from grae.presets import tiny_model_path

    t_start = time.time()
    if num_threads:
        torch.set_num_threads(num_threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    recipe = TinyVLMRecipe(seed=seed, **overrides)
    random.seed(seed)
    torch.manual_seed(seed)
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    base = tiny_model_path()
    processor = make_processor(AutoTokenizer.from_pretrained(base), recipe)
    model = make_vlm(recipe, processor, AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32))
    n_params = sum(p.numel() for p in model.parameters())
    log(f"tiny VLM: {n_params / 1e6:.2f}M params, vocab {len(processor.tokenizer)}")
    history = sft(model, processor.tokenizer, recipe, stage=1, log=log,
                  batches=_vlm_batches(recipe, processor, stage=1, noise=0.0))
    if recipe.calib_steps > 0:
        history += sft(model, processor.tokenizer, recipe, stage=2, log=log,
                       batches=_vlm_batches(recipe, processor, stage=2, noise=recipe.label_noise))
    model.save_pretrained(out)
    processor.save_pretrained(out)
    info: dict[str, Any] = dict(recipe=asdict(recipe), n_params=n_params, sft_history=history,
                                torch_threads=torch.get_num_threads(), torch_version=torch.__version__)
    if evaluate:
        info["base_eval"] = {name: base_passk(model, processor, name, params, eval_problems, eval_samples, recipe)
                             for name, params in sorted(recipe.tasks.items())}
        log(json.dumps(info["base_eval"]))
    info["build_seconds"] = round(time.time() - t_start, 1)
    (out / "build_info.json").write_text(json.dumps(info, indent=1) + "\n")
    return out


def base_passk(model, processor, task_name: str, params: dict, problems: int, samples: int,
               recipe: TinyVLMRecipe) -> dict[str, float]:
    """Held-out pass@k of ``model`` on a visual task (``grae.eval.evaluate``; T = 1, 4 new tokens)."""
    from grae.data import get_task
    from grae.eval import evaluate

    task = get_task(task_name, image_size=recipe.image_size, **params)
    result = evaluate(model, processor, task.heldout(problems), task, n=samples, temperature=1.0, top_p=1.0,
                      max_tokens=4, batch_size=256, seed=recipe.seed)
    return {f"pass@{k}": round(v, 4) for k, v in result.curve.items()}


#: the image conditions of :func:`vision_gap`: the scene's own image, a blank canvas, the next scene's image
IMAGE_CONDITIONS = ("right", "blank", "other")


def text_only_chance(train, heldout) -> float:
    """The accuracy of a text-only reader on ``heldout``: each question text answered with its most frequent
    answer among the ``train`` examples (the majority baseline; about 1/6 on bar_value's uniform values)."""
    from collections import Counter, defaultdict

    answers: dict[str, Counter] = defaultdict(Counter)
    for example in train:
        answers[example["question"]][example["answer"]] += 1
    guess = {q: c.most_common(1)[0][0] for q, c in answers.items()}
    return sum(guess.get(e["question"]) == e["answer"] for e in heldout) / max(1, len(heldout))


def vision_gap(model, processor, task_name: str, *, problems: int = 200, samples: int = 16, params: dict | None = None,
               image_size: int = 32, seed: int = 0, conditions=IMAGE_CONDITIONS) -> dict[str, Any]:
    """How much a VLM's answers depend on the image: greedy accuracy and pass@1 (``samples`` draws at
    T = 1, 4 new tokens) on the first ``problems`` held-out scenes of a visual task, once per image
    condition — the right image, a blank (white) canvas, and another prompt's image (scene i + 1's).
    ``samples = 0`` skips pass@1. Returns ``{"chance": the text-only majority baseline (fit on 2000 training
    scenes), condition: {"greedy": ..., "pass@1": ...}}``."""
    from PIL import Image

    from grae.data import get_task
    from grae.eval import evaluate

    task = get_task(task_name, image_size=image_size, **(params or {}))
    examples = task.heldout(problems)
    blank = Image.new("RGB", (image_size, image_size), (255, 255, 255))
    images = {"right": [e["image"] for e in examples], "blank": [blank] * len(examples),
              "other": [examples[(i + 1) % len(examples)]["image"] for i in range(len(examples))]}
    chance = text_only_chance(task.train(2000, seed=seed), examples)
    out: dict[str, Any] = {"task": task_name, "problems": len(examples), "chance": round(chance, 4)}
    for condition in conditions:
        shown = [{**e, "image": image} for e, image in zip(examples, images[condition])]
        greedy = evaluate(model, processor, shown, task, n=1, temperature=0.0, top_p=1.0, max_tokens=4,
                          batch_size=256, seed=seed)
        row = {"greedy": greedy.curve[1]}
        if samples:
            row["pass@1"] = evaluate(model, processor, shown, task, n=samples, temperature=1.0, top_p=1.0,
                                     max_tokens=4, batch_size=256, seed=seed).curve[1]
        out[condition] = {k: round(v, 4) for k, v in row.items()}
        out[condition]["greedy_by_question"] = _accuracy_by_question(greedy.rows, examples)
    return out


def _accuracy_by_question(rows, examples) -> dict[str, float]:
    """Greedy accuracy per question text ("How many shapes?", "How many red shapes?", …)."""
    from collections import defaultdict

    question = {e["question_id"]: e["question"] for e in examples}
    labels: dict[str, list[bool]] = defaultdict(list)
    for r in rows:
        labels[question[r["question_id"]]].append(bool(r["label"]))
    return {q: round(sum(v) / len(v), 4) for q, v in sorted(labels.items())}
