"""Build the embedded tiny causal LM from scratch: tokenizer, config, supervised warm-up.

The recipe is deterministic given ``seed`` *and the same number of torch threads*
(CPU float reductions are partitioned per thread, so a build with 1 thread and a
build with 2 threads differ in the last bits and then drift).  See ``docs/tiny.md``.
"""

from __future__ import annotations

import json
import math
import os
import platform
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from grae.data.trace import grouped_answer, left_answer, totals_class, trace_answer

from .tasks import DEFAULT_TASK, DEFAULT_TASK_KWARGS, HELDOUT_SEED, SFT_DATA_SEED, TinyTask, format_prompt, tokenizer_corpus

SPECIAL_TOKENS = ["<|pad|>", "<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@dataclass
class TinyRecipe:
    """Everything that determines the built checkpoint."""

    seed: int = 0
    # architecture (Llama-style)
    vocab_size: int = 512
    hidden_size: int = 256
    intermediate_size: int = 768
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    max_position_embeddings: int = 256
    # task
    task: str = DEFAULT_TASK
    task_kwargs: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_TASK_KWARGS))
    #: extra ``grae.data`` task parameters of the held-out split SFT must skip (e.g. R2's
    #: ``heldout_size``/``heldout_strata``); they must match the RL recipe that evaluates the model
    heldout_params: dict[str, Any] = field(default_factory=dict)
    # supervised warm-up
    sft_steps: int = 1500
    batch_size: int = 64
    lr: float = 1e-3
    warmup_steps: int = 100
    min_lr_ratio: float = 0.1
    weight_decay: float = 0.01
    # Stage 2, "calibration": ``calib_steps`` more steps (fresh AdamW, ``calib_warmup_steps`` of
    # warm-up to ``calib_lr``, cosine down to ``calib_min_lr_ratio``) in which, with probability
    # ``label_noise``, the target is replaced by a *guess*. With ``noise_kind="guess"`` a guess is
    # ``guess_marker`` followed by ``answer + d`` (d uniform in ``guess_deltas``): always wrong and
    # never parsed as an answer. The policy keeps the stage-1 skill in its answering mode but puts
    # about ``label_noise`` of its mass on guessing — an under-confident base whose pass@k is far
    # above its pass@1, the regime in which RLVR has something to sharpen (docs/tiny.md).
    # ``noise_kind="delta"`` replaces the answer by ``answer + d``, d from ``noise_deltas``, with no
    # marker. ``calib_steps=0`` disables stage 2.
    calib_steps: int = 1200
    calib_lr: float = 3e-4
    calib_warmup_steps: int = 50
    calib_min_lr_ratio: float = 0.05
    label_noise: float = 0.5
    noise_kind: str = "guess"
    guess_marker: str = "~"
    guess_deltas: tuple[int, ...] = tuple(d for d in range(-20, 21) if d != 0)
    noise_deltas: tuple[int, ...] = (-10, -2, -1, 1, 2, 10)
    tokenizer_corpus_per_task: int = 2000
    save_dtype: str = "float32"
    #: what the SFT completion holds: ``"final"`` (the answer alone), ``"trace"`` (``chain_sum`` only: every
    #: running total, the ``chain_trace`` task's gold completion; gate v2, issue 45) or ``"two_modes"`` (the
    #: ``chain_trace`` task with ``strategies="two"``: a ``G`` trace with probability ``grouped_share`` on any chain,
    #: else an ``L`` trace on the next chain whose running totals stay in [0, 99]; issue 52 §5)
    answer_style: str = "final"
    #: ``answer_style="two_modes"``: the share of SFT targets that are ``G`` traces
    grouped_share: float = 0.12
    #: SFT also skips every question among the first ``heldout_draws`` items of grae.data's held-out stream, so
    #: that every held-out split drawn from them (any ``totals`` filter, any strata, ``heldout_size`` up to
    #: ``heldout_draws / 20``) stays unseen
    heldout_draws: int = 0


def train_tokenizer(vocab_size: int = 512, corpus_per_task: int = 2000, seed: int = 0):
    """Byte-level BPE (digits split individually) trained locally; returns a ``PreTrainedTokenizerFast``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(list(tokenizer_corpus(corpus_per_task, seed=seed)), trainer=trainer)
    hf = PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<|pad|>", eos_token="<|endoftext|>",
        bos_token=None, unk_token=None, model_max_length=256, padding_side="left",
        additional_special_tokens=["<|im_start|>", "<|im_end|>"],
    )
    hf.chat_template = CHAT_TEMPLATE
    return hf


def make_model(recipe: TinyRecipe, tokenizer):
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=recipe.hidden_size,
        intermediate_size=recipe.intermediate_size, num_hidden_layers=recipe.num_hidden_layers,
        num_attention_heads=recipe.num_attention_heads, num_key_value_heads=recipe.num_attention_heads,
        max_position_embeddings=recipe.max_position_embeddings, tie_word_embeddings=True,
        rope_theta=10000.0, pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(recipe.seed)
    model = LlamaForCausalLM(cfg)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = None
    return model


def _noisy_answer(answer: str, recipe: TinyRecipe, rng: random.Random, noise: float) -> str:
    u = rng.random()
    deltas = recipe.guess_deltas if recipe.noise_kind == "guess" else recipe.noise_deltas
    d = rng.choice(deltas)
    if noise > 0 and u < noise:
        try:
            wrong = str(int(answer) + d)
        except ValueError:  # non-integer answers: keep (noise only defined for integers)
            return answer
        return recipe.guess_marker + wrong if recipe.noise_kind == "guess" else wrong
    return answer


def _sft_examples(recipe: TinyRecipe, task: TinyTask, held_questions: set[str], *, stage: int = 1):
    """The SFT stream's ``(question, target)`` pairs, in order, before noise: the generator's questions at the stage's
    seed minus ``held_questions``, each with the target of ``recipe.answer_style`` (:class:`TinyRecipe`)."""
    ds = task.dataset(1_000_000, SFT_DATA_SEED + recipe.seed + 100 * (stage - 1))
    pick = random.Random(recipe.seed * 1_000_003 + 29 + stage)  # the strategy of each two_modes target
    i = 0
    while True:
        e = ds[i % len(ds)]
        i += 1
        if " ".join(e["question"].split()) in held_questions:
            continue
        expression = e["metadata"].get("expression", "")
        if recipe.answer_style == "two_modes":
            if pick.random() < recipe.grouped_share:
                yield e["question"], grouped_answer(expression)
                continue
            while totals_class(expression) != "in_range" or " ".join(e["question"].split()) in held_questions:
                e = ds[i % len(ds)]
                i += 1
                expression = e["metadata"]["expression"]
            yield e["question"], left_answer(expression)
        else:
            yield e["question"], trace_answer(expression) if recipe.answer_style == "trace" else str(e["answer"])


def _sft_batches(recipe: TinyRecipe, tokenizer, task: TinyTask, held_questions: set[str], *,
                 stage: int = 1, noise: float = 0.0):
    rng = random.Random(recipe.seed * 1_000_003 + 17 + stage)
    examples = _sft_examples(recipe, task, held_questions, stage=stage)
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    while True:
        items = []
        while len(items) < recipe.batch_size:
            question, target = next(examples)
            p = tokenizer(format_prompt(question), add_special_tokens=False)["input_ids"]
            answer = " " + _noisy_answer(target, recipe, rng, noise)
            c = tokenizer(answer, add_special_tokens=False)["input_ids"] + [eos]
            items.append((p, c))
        L = max(len(p) + len(c) for p, c in items)
        ids = torch.full((len(items), L), pad)
        lab = torch.full((len(items), L), -100)
        att = torch.zeros((len(items), L), dtype=torch.long)
        for j, (p, c) in enumerate(items):
            s = p + c
            ids[j, : len(s)] = torch.tensor(s)
            att[j, : len(s)] = 1
            lab[j, len(p): len(s)] = torch.tensor(c)  # loss on completion (answer + eos) only
        yield {"input_ids": ids, "attention_mask": att, "labels": lab}


#: Named recipe variants (``grae tiny build --recipe NAME``): :class:`TinyRecipe` field overrides.
#: ``v2`` is the shipped ``tiny`` checkpoint. ``ladder`` is the base of regime R2 (configs/regime2.yaml,
#: ``grae train regime2``; shipped as ``tiny-ladder``): the clean stage-1 model (no guess stage, so no
#: removable format mode) trained on the R2 difficulty ladder, chain_sum 2-4 terms x 1-2 digits, skipping
#: R2's stratified held-out split.
LADDER_TASK_KWARGS: dict[str, Any] = dict(min_terms=2, max_terms=4, min_digits=1, max_digits=2)
LADDER_HELDOUT_PARAMS: dict[str, Any] = dict(heldout_size=600, heldout_strata=["num_terms", "num_digits"])
TRACE_TASK_KWARGS: dict[str, Any] = dict(min_terms=4, max_terms=5, min_digits=1, max_digits=2)
RANGE_TASK_KWARGS: dict[str, Any] = dict(min_terms=4, max_terms=5, max_value=30)
RECIPES: dict[str, dict[str, Any]] = {
    "v2": {},
    "ladder": dict(task_kwargs=LADDER_TASK_KWARGS, heldout_params=LADDER_HELDOUT_PARAMS, calib_steps=0),
    # The testbed gate's first attempt (issue 36, studies/design/gate_r3.yaml): the ladder model with its SFT
    # learning rate held at its peak after warm-up instead of annealed (``min_lr_ratio=1.0``). R2's annealed
    # base degraded under GRPO at lr 1e-4 within 250 steps; a constant-lr SFT base tolerated 1e-4 and gained
    # pass@1 in the CPU feasibility probe (../shared/research/cpu.md §5).
    "ladder-const": dict(task_kwargs=LADDER_TASK_KWARGS, heldout_params=LADDER_HELDOUT_PARAMS, calib_steps=0,
                         min_lr_ratio=1.0),
    # Attempt 2 (studies/design/gate_r4.yaml): the ladder model (stage 1 = tiny-ladder) plus a stage 2 in which
    # half of the targets carry a carry error, answer ± 10 or ± 20, in the answer's own format (no marker), so
    # the format-only oracle cannot delete them and the base's mistakes lie beyond a near-miss guesser's reach.
    "ladder-carry": dict(task_kwargs=LADDER_TASK_KWARGS, heldout_params=LADDER_HELDOUT_PARAMS, calib_steps=600,
                         noise_kind="delta", noise_deltas=(-20, -10, 10, 20), label_noise=0.5),
    # Gate v2, attempt 1 (studies/design/gate_v2_t1.yaml): process-verified answers. chain_sum with 4-5 terms of
    # 1-2 digits, every running total written (the chain_trace task), clean SFT (no stage 2): guessing cannot
    # reach large k, and nothing planted for RL to repair.
    "trace": dict(task_kwargs=TRACE_TASK_KWARGS, heldout_params=LADDER_HELDOUT_PARAMS, calib_steps=0,
                  answer_style="trace"),
    # Gate v2, attempt 2 (studies/design/gate_v2_t2.yaml): `trace` trained twice as long. Its stage 2 is 1,500 more
    # clean steps (label_noise 0: every target the true trace), fresh AdamW warmed up to 1e-3 and annealed to 10 %,
    # so `--stage1-from` a `trace` build runs only the new steps. `trace` had not learned 2-digit chains (held-out
    # pass@1 0.1 / 0.0 on 4 / 5 terms, its loss still falling at step 1,500).
    # Gate v2, attempt 3 (studies/design/gate_v2_t3.yaml): `trace` on chain_range (operands uniform in [0, 30], 4-5
    # terms), so that difficulty varies with the operands' size instead of jumping from 1-digit chains (solved) to
    # 2-digit ones (never solved), the split attempts 1-2's bases showed.
    "trace-range": dict(task="chain_range", task_kwargs=RANGE_TASK_KWARGS,
                        heldout_params=dict(heldout_size=600, heldout_strata=["num_terms"]), calib_steps=0,
                        answer_style="trace"),
    # Gate v3, design 2, "the conflicting rare mode" (issue 52 §5): `trace-range` with two process-verified
    # strategies chosen by the first token (the chain_trace task with strategies="two"). 88 % of the SFT targets are
    # L traces (running totals), on chains whose totals stay in [0, 99] only; 12 % are G traces (grouped sums), on
    # any chain, so on excursion chains (a running total outside [0, 99]) only G is ever shown. SFT skips the first
    # 20,000 questions of the held-out stream: every held-out split of up to 1,000 problems, any totals filter.
    "trace-two-modes": dict(task="chain_range", task_kwargs=RANGE_TASK_KWARGS,
                            heldout_params=dict(heldout_size=600, heldout_strata=["num_terms"]), calib_steps=0,
                            answer_style="two_modes", grouped_share=0.12, heldout_draws=20_000),
    # Gate v3, design 3, "a rare mode with real mass": `trace-two-modes` with G on 30 % of the SFT targets and 2,000
    # steps (about 38k G and 90k L targets). Excursion chains are solved through G only; design 2's base (11.7k G
    # targets) solved them almost never, and a power law through probe builds puts excursion pass@64 of 25 % at about
    # 31k G targets (../shared/research/passk.md §0000).
    "trace-two-modes-g30": dict(task="chain_range", task_kwargs=RANGE_TASK_KWARGS,
                                heldout_params=dict(heldout_size=600, heldout_strata=["num_terms"]), calib_steps=0,
                                answer_style="two_modes", grouped_share=0.3, sft_steps=2000, heldout_draws=20_000),
    "trace-long": dict(task_kwargs=TRACE_TASK_KWARGS, heldout_params=LADDER_HELDOUT_PARAMS, answer_style="trace",
                       calib_steps=1500, label_noise=0.0, calib_lr=1e-3, calib_warmup_steps=50,
                       calib_min_lr_ratio=0.1),
}


#: the values of :attr:`TinyRecipe.answer_style`
ANSWER_STYLES = ("final", "trace", "two_modes")


def check_recipe(recipe: TinyRecipe) -> None:
    """ValueError naming the first recipe field a build cannot honour."""
    if recipe.answer_style not in ANSWER_STYLES:
        raise ValueError(f"answer_style: one of {', '.join(ANSWER_STYLES)}, got {recipe.answer_style!r}")
    if recipe.answer_style != "final" and recipe.task not in ("chain_sum", "chain_range"):
        raise ValueError(f"answer_style={recipe.answer_style!r} writes running totals: task must be chain_sum or "
                         f"chain_range, got {recipe.task!r}")
    if not 0.0 <= recipe.grouped_share <= 1.0:
        raise ValueError(f"grouped_share: the share of G traces must be in [0, 1], got {recipe.grouped_share}")
    if recipe.heldout_draws < 0:
        raise ValueError(f"heldout_draws: must be >= 0, got {recipe.heldout_draws}")


def excluded_questions(task: TinyTask, heldout_params: dict[str, Any] | None = None, heldout_draws: int = 0) -> set[str]:
    """Whitespace-normalised questions that SFT never trains on: grae.data's whole held-out split for
    the task (what ``grae train`` / ``grae eval`` evaluate on), the first 1000 questions drawn at
    ``HELDOUT_SEED`` (the build's original held-out set) and the first ``heldout_draws`` items of grae.data's
    held-out stream (every held-out split of a filtered task is drawn from them: :class:`TinyRecipe`)."""
    from grae.data import get_task
    from grae.data.procedural import HELDOUT_BASE

    out: set[str] = set()
    for size, seed in ((1000, HELDOUT_SEED), (heldout_draws, HELDOUT_BASE)):
        held = task.dataset(size, seed) if size else []
        out |= {" ".join(held[i]["question"].split()) for i in range(len(held))}
    heldout_task = get_task(task.name, prompt_style="plain", **task.kwargs, **(heldout_params or {}))
    return out | {" ".join(e["question"].split()) for e in heldout_task.heldout()}


def sft(model, tokenizer, recipe: TinyRecipe, *, stage: int = 1, log_every: int = 100, log=print,
        eval_every: int = 0, eval_fn=None, batches=None) -> list[dict[str, Any]]:
    """Plain PyTorch SFT loop, completion-only loss.

    Stage 1: AdamW, linear warm-up, cosine decay to ``min_lr_ratio``, clean targets.
    Stage 2 (calibration): fresh AdamW, warm-up then cosine from ``calib_lr``, ``label_noise`` guesses.
    ``batches``: an iterator of model keyword batches (with ``labels``); default: the recipe's text task.
    """
    steps = recipe.sft_steps if stage == 1 else recipe.calib_steps
    noise = 0.0 if stage == 1 else recipe.label_noise
    if batches is None:
        task = TinyTask(recipe.task, dict(recipe.task_kwargs))
        held = excluded_questions(task, recipe.heldout_params, recipe.heldout_draws)
        batches = _sft_batches(recipe, tokenizer, task, held, stage=stage, noise=noise)
    torch.manual_seed(recipe.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=recipe.lr if stage == 1 else recipe.calib_lr,
                            weight_decay=recipe.weight_decay, betas=(0.9, 0.95))

    warmup = recipe.warmup_steps if stage == 1 else recipe.calib_warmup_steps
    floor = recipe.min_lr_ratio if stage == 1 else recipe.calib_min_lr_ratio

    def lr_lambda(s: int) -> float:
        if s < warmup:
            return (s + 1) / warmup
        prog = (s - warmup) / max(1, steps - warmup)
        return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, prog)))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)
    model.train()
    history: list[dict[str, Any]] = []
    t0 = time.time()
    run = 0.0
    for step, batch in enumerate(batches, start=1):
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        run += loss.item()
        if log_every and step % log_every == 0:
            rec = dict(stage=stage, step=step, loss=round(run / log_every, 4), seconds=round(time.time() - t0, 1))
            run = 0.0
            if eval_every and eval_fn is not None and step % eval_every == 0:
                rec.update(eval_fn(model))
            history.append(rec)
            log(json.dumps(rec))
        if step >= steps:
            break
    model.eval()
    return history


#: :class:`TinyRecipe` fields that only stage 2 (calibration) and saving read
STAGE2_FIELDS = frozenset({"calib_steps", "calib_lr", "calib_warmup_steps", "calib_min_lr_ratio", "label_noise",
                           "noise_kind", "guess_marker", "guess_deltas", "noise_deltas", "save_dtype"})


def load_stage1(path: str | os.PathLike, recipe: TinyRecipe):
    """``(model, tokenizer, stage-1 history)`` of a finished build at ``path`` that is exactly this recipe's
    stage 1: no stage 2 of its own, float32 weights, every other field and the torch thread count equal.
    ValueError naming the first difference otherwise (a build is deterministic only per thread count)."""
    from transformers import AutoTokenizer, LlamaForCausalLM

    info_path = Path(path) / "build_info.json"
    if not info_path.exists():
        raise ValueError(f"stage1_from: {path} has no build_info.json (not a finished grae tiny build)")
    info = json.loads(info_path.read_text())
    theirs, ours = info["recipe"], json.loads(json.dumps(asdict(recipe)))
    defaults = json.loads(json.dumps(asdict(TinyRecipe())))
    if theirs.get("calib_steps", 0) != 0 or theirs.get("save_dtype") != "float32":
        raise ValueError(f"stage1_from: {path} is not a float32 stage-1-only build (calib_steps "
                         f"{theirs.get('calib_steps')}, save_dtype {theirs.get('save_dtype')})")
    for key in sorted(set(ours) - STAGE2_FIELDS):
        if theirs.get(key, defaults[key]) != ours[key]:  # a field added later has its default in older builds
            raise ValueError(f"stage1_from: {path} was built with {key}={theirs.get(key, defaults[key])!r}, this recipe has "
                             f"{ours[key]!r}")
    if info.get("torch_threads") != torch.get_num_threads():
        raise ValueError(f"stage1_from: {path} was built with {info.get('torch_threads')} torch threads, this build "
                         f"runs {torch.get_num_threads()} (pass --threads {info.get('torch_threads')})")
    model = LlamaForCausalLM.from_pretrained(path, dtype=torch.float32)
    return model, AutoTokenizer.from_pretrained(path), [h for h in info["sft_history"] if h.get("stage") == 1]


def build_tiny(
    output_dir: str | os.PathLike,
    *,
    seed: int = 0,
    sft_steps: int | None = None,
    evaluate: bool = True,
    eval_problems: int = 200,
    eval_samples: int = 64,
    num_threads: int | None = None,
    deterministic: bool = True,
    log=print,
    recipe_name: str = "v2",
    stage1_from: str | os.PathLike | None = None,
    **overrides: Any,
) -> Path:
    """Build the tiny model into ``output_dir`` and return the path.

    ``overrides`` are :class:`TinyRecipe` fields (e.g. ``hidden_size=64, num_hidden_layers=1``).
    With ``evaluate=True`` the base pass@k on the held-out set is measured and stored in
    ``build_info.json``.  Deterministic for a fixed ``seed`` and thread count. ``recipe_name`` picks a
    variant of :data:`RECIPES` (``"ladder"``: R2's base); ``overrides`` apply on top of it.
    ``stage1_from``: a finished build with no stage 2 whose stage-1 fields and thread count equal this
    recipe's (:func:`load_stage1`); its weights replace stage 1, so only stage 2 runs (the same result).
    """
    if recipe_name not in RECIPES:
        raise ValueError(f"recipe_name {recipe_name!r} unknown; choose one of {', '.join(RECIPES)}")
    t_start = time.time()
    if num_threads:
        torch.set_num_threads(num_threads)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
    recipe = TinyRecipe(seed=seed, **{**RECIPES[recipe_name], **overrides})
    check_recipe(recipe)
    if sft_steps is not None:
        recipe.sft_steps = sft_steps
    random.seed(seed)
    torch.manual_seed(seed)
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)

    t_sft = time.time()
    if stage1_from is not None:
        model, tokenizer, history = load_stage1(stage1_from, recipe)
    else:
        tokenizer = train_tokenizer(recipe.vocab_size, recipe.tokenizer_corpus_per_task, seed=0)
        model = make_model(recipe, tokenizer)
    n_params = sum(p.numel() for p in model.parameters())
    log(f"tiny model: {n_params/1e6:.2f}M params, vocab {len(tokenizer)}")
    if stage1_from is None:
        history = sft(model, tokenizer, recipe, stage=1, log=log)
    if recipe.calib_steps > 0:
        history += sft(model, tokenizer, recipe, stage=2, log=log)
    sft_seconds = time.time() - t_sft

    if recipe.save_dtype != "float32":
        model = model.to(getattr(torch, recipe.save_dtype))
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    model = model.float()

    info: dict[str, Any] = dict(
        recipe_name=recipe_name, recipe=asdict(recipe), n_params=n_params, sft_history=history,
        **({"stage1_from": str(stage1_from)} if stage1_from is not None else {}),
        sft_seconds=round(sft_seconds, 1), torch_threads=torch.get_num_threads(),
        torch_version=torch.__version__, python=platform.python_version(),
        heldout=dict(task=recipe.task, task_kwargs=recipe.task_kwargs, split="grae.data held-out",
                     prompt="plain: f'{question}\\nAnswer:'"),
    )
    if evaluate:
        from .evaluate import evaluate_passk

        trace = recipe.answer_style in ("trace", "two_modes")
        strategies = {"strategies": "two"} if recipe.answer_style == "two_modes" else {}
        info["base_eval_task"] = dict(task="chain_trace" if trace else recipe.task,
                                      task_kwargs={**({"generator": recipe.task} if trace else {}), **strategies,
                                                   **recipe.task_kwargs, **recipe.heldout_params})
        info["base_eval"] = evaluate_passk(model, tokenizer, **info["base_eval_task"],
                                           max_new_tokens=24 if trace else 8,
                                           n_problems=eval_problems, n_samples=eval_samples, seed=seed)
        log(json.dumps(info["base_eval"]))
    info["build_seconds"] = round(time.time() - t_start, 1)
    (out / "build_info.json").write_text(json.dumps(info, indent=1) + "\n")
    return out
