"""Whether every prompt and its completion budget fit in the model's context.

A prompt is measured in the model's tokens the way the run tokenizes it: a training prompt as TRL's
``GRPOTrainer`` does (chat messages through the chat template with the generation prompt and
``trl.chat_template_kwargs``, a plain prompt with the tokenizer's special tokens), a held-out prompt as the
held-out evaluation does (:class:`grae.eval.backends.HFSampler`: rendered, then tokenized). The longest of each
split plus its budget (``trl.max_completion_length``; ``eval.max_tokens`` held out) is compared with the model's
context length: ``max_position_embeddings`` of its config, else its tokenizer's ``model_max_length`` where that is
a real length (transformers gives a tokenizer without one 10^30). A prompt that does not fit with its budget
would be generated past the positions the model knows (held out, the sampler would quietly shorten the budget).

:func:`measure_context` measures, :func:`context_lines` is the dry run's ``context`` row and
:func:`context_problems` the line the dry run's verdict and ``grae train`` stop on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

#: prompts tokenized per call
BATCH = 512
#: a tokenizer's ``model_max_length`` at or above this is transformers' "no limit", not a context length
NO_LIMIT = 10**9
#: where the fixes of a prompt too long are given
SHORTER_PROMPT = "shorten the prompts (task.params, or shorter problems)"


@dataclass
class Longest:
    """The longest prompt of one split, and the budget its completions get."""

    #: "training" or "held-out"
    split: str
    #: its length in the model's tokens
    tokens: int
    #: which problem: ``file.jsonl:LINE`` for a local file, else its question id
    problem: str
    #: the key of its completion budget and the budget
    key: str
    budget: int
    #: prompts of the split, and those that do not fit in the context with the budget
    prompts: int = 0
    over: int = 0


@dataclass
class ContextFit:
    """What :func:`measure_context` found."""

    #: the model's context in tokens (None: neither its config nor its tokenizer says) and where it was read
    context: int | None
    source: str
    #: the prompts go through the chat template
    chat: bool
    longest: list[Longest] = field(default_factory=list)


def context_length(config: Any, tokenizer: Any) -> tuple[int | None, str]:
    """The model's context in tokens and where it was read: ``config.max_position_embeddings`` (the text config's,
    for a model that has one), else the tokenizer's ``model_max_length`` below :data:`NO_LIMIT`; ``(None, why)``
    when neither gives one."""
    text = config.get_text_config() if config is not None and hasattr(config, "get_text_config") else config
    positions = getattr(text, "max_position_embeddings", None)
    if isinstance(positions, int) and positions > 0:
        return positions, "config.max_position_embeddings"
    length = getattr(tokenizer, "model_max_length", None)
    if isinstance(length, int) and 0 < length < NO_LIMIT:
        return length, "the tokenizer's model_max_length"
    return None, "neither config.max_position_embeddings nor the tokenizer's model_max_length gives it"


def training_prompt_lengths(tokenizer: Any, prompts: Sequence[Any], chat_template_kwargs: dict | None = None
                            ) -> list[int]:
    """Each training prompt's length in tokens as TRL's ``GRPOTrainer`` tokenizes it, in batches of :data:`BATCH`:
    chat messages through ``apply_chat_template`` with the generation prompt, plain text with special tokens."""
    lengths: list[int] = []
    for start in range(0, len(prompts), BATCH):
        chunk = list(prompts[start:start + BATCH])
        if chunk and not isinstance(chunk[0], str):
            ids = tokenizer.apply_chat_template(conversation=chunk, add_generation_prompt=True, tokenize=True,
                                                return_dict=True, **(chat_template_kwargs or {}))["input_ids"]
        else:
            ids = tokenizer(text=chunk)["input_ids"]
        lengths += [len(row) for row in ids]
    return lengths


def heldout_prompt_lengths(tokenizer: Any, prompts: Sequence[Any]) -> list[int]:
    """Each held-out prompt's length in tokens as the held-out evaluation tokenizes it, in batches of
    :data:`BATCH`: rendered (chat messages through the chat template), then special tokens added unless the
    rendered text begins with them."""
    from grae.eval.backends import _render_with, _starts_with_special

    lengths: list[int] = []
    for start in range(0, len(prompts), BATCH):
        texts = [_render_with(tokenizer, prompt) for prompt in prompts[start:start + BATCH]]
        special = not all(_starts_with_special(tokenizer, text) for text in texts)
        lengths += [len(row) for row in tokenizer(texts, add_special_tokens=special)["input_ids"]]
    return lengths


def unmeasured(examples: Sequence[dict], tokenizer: Any, config: Any) -> str | None:
    """Why the prompts cannot be measured here, or None: the model's tokenizer is not on this machine, the model
    reads images (its processor's tokens), or chat prompts meet a tokenizer without a chat template (the run
    stops on that before it loads: :func:`grae.train.model_files.tokenizer_problem`)."""
    from grae.eval.backends import is_vision_language

    if tokenizer is None:
        return "the model's tokenizer is not on this machine"
    if config is not None and is_vision_language(config):
        return "a vision-language model's prompts are its processor's tokens, images included"
    if any(not isinstance(e["prompt"], str) for e in examples) and not getattr(tokenizer, "chat_template", None):
        return "chat prompts, and the tokenizer has no chat template"
    return None


def measure_context(task: Any, train: Sequence[dict], heldout: Sequence[dict], tokenizer: Any, config: Any,
                    max_completion_length: int, eval_tokens: int | None,
                    chat_template_kwargs: dict | None = None) -> ContextFit:
    """The longest training prompt (with ``max_completion_length``) and, when ``eval_tokens`` is given, the longest
    held-out prompt (with ``eval_tokens``) of ``task``'s examples, in ``tokenizer``'s tokens, against the context
    :func:`context_length` reads; check :func:`unmeasured` first."""
    from grae.train.gold_check import _key, _places

    context, source = context_length(config, tokenizer)
    places = _places(task)
    chat = any(not isinstance(e["prompt"], str) for e in [*train, *heldout])
    fit = ContextFit(context, source, chat)
    splits = [("training", train, training_prompt_lengths(tokenizer, [e["prompt"] for e in train],
                                                          chat_template_kwargs),
               "trl.max_completion_length", max_completion_length)]
    if eval_tokens is not None and heldout:
        splits.append(("held-out", heldout, heldout_prompt_lengths(tokenizer, [e["prompt"] for e in heldout]),
                       "eval.max_tokens", eval_tokens))
    for split, examples, lengths, key, budget in splits:
        if not lengths:
            continue
        at = max(range(len(lengths)), key=lengths.__getitem__)
        over = 0 if context is None else sum(n + budget > context for n in lengths)
        where = places.get(_key(examples[at]), str(examples[at]["question_id"]))  # file.jsonl:LINE, else its id
        fit.longest.append(Longest(split, lengths[at], where, key, budget, len(lengths), over))
    return fit


def context_lines(fit: ContextFit | None, why: str | None = None) -> list[tuple[str, str]]:
    """The dry run's ``context`` row: each split's longest prompt plus its budget against the model's context, or
    why the prompts were not measured (``why``)."""
    if fit is None:
        return [("context", f"prompts not measured: {why}")] if why else []
    parts = []
    for longest in fit.longest:
        total = longest.tokens + longest.budget
        against = ("" if fit.context is None else f" of {fit.context}" if not longest.over else
                   f" > {fit.context}: {longest.over} of {longest.prompts} {longest.split} prompts do not fit")
        parts.append(f"longest {longest.split} prompt {longest.tokens} tokens (problem {longest.problem}) + {longest.key} "
                     f"{longest.budget} = {total}{against}")
    how = " with the chat template" if fit.chat else ""
    context = (f"the model's context {fit.context} tokens ({fit.source})" if fit.context is not None else
               f"the model's context is not known ({fit.source}): not checked")
    return [("context", "; ".join([*parts, context]) + f"; prompts measured{how} as the run tokenizes them")]


def context_problems(fit: ContextFit | None) -> list[str]:
    """What does not fit in the model's context, one line per split, as the dry run's verdict and ``grae train``
    say it: how many prompts, the longest and its problem, and the key to lower (or the prompts to shorten)."""
    if fit is None or fit.context is None:
        return []
    lines = []
    for longest in fit.longest:
        if not longest.over:
            continue
        room = fit.context - longest.tokens
        fix = (f"lower {longest.key} to {room}, or {SHORTER_PROMPT}" if room > 0 else
               f"the prompt alone fills the context: {SHORTER_PROMPT}, or use a model with a longer context")
        lines.append(f"context: {longest.over} of {longest.prompts} {longest.split} prompts do not fit with "
                     f"{longest.key} {longest.budget} in the model's context of {fit.context} tokens ({fit.source}): "
                     f"the longest (problem {longest.problem}) takes {longest.tokens} tokens"
                     f"{' with the chat template' if fit.chat else ''}, {longest.tokens} + {longest.budget} = "
                     f"{longest.tokens + longest.budget}; {fix}")
    return lines
