"""The probability that one sample is the gold completion, teacher-forced: a problem's exact pass rate on a
task whose correct answer is one completion.

For a task whose verifier accepts one completion per problem (``chain_trace``: the whole running-total trace), a
sample at temperature ``T`` (nucleus ``top_p``) is correct with probability

    p = π_T(answer_completion(gold) + EOS | prompt)

and pass@k = 1 − (1 − p)^k with no sampling variance. Answer-set tasks (``chain_sum``: one integer per line) are
the same computation for the gold answer alone (:mod:`grae.eval.exact` scores every answer of the set, for the
reference policies; this scores only the gold one, so it takes one forward per problem, batched). A task whose
verifier accepts several completions (``chain_trace`` with ``strategies="two"``: an ``L`` trace or a ``G`` trace)
lists them (``Task.gold_completions``); they are distinct texts ending in EOS, so their events are disjoint and

    p = Σ_j π_T(gold_j + EOS | prompt)

(one teacher-forced sequence per gold completion, summed per problem). The verifier may also accept other texts
(another tokenisation, text after the first line); ``p`` counts only the canonical completions, so it is a lower
bound of the sampled pass rate by that outside mass (``grae eval --exact`` prints it).

:func:`gold_probs` is the one implementation (:func:`gold_prob_parts` its terms, one per gold completion):
``grae data band --exact``, the temperature frontier (:mod:`grae.eval.temperature_frontier`) and
``studies/gate_v2.py`` call it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

#: problems teacher-forced per forward
GOLD_BATCH = 64


class GoldExactError(ValueError):
    """A task whose pass rate is not the probability of one gold completion (one line naming the fix)."""


def has_gold_completion(task: Any) -> bool:
    """Whether a problem's pass rate under ``task`` is carried by the one canonical completion of its gold answer:
    tasks that declare it (``one_gold_completion``, e.g. ``chain_trace``) or that declare a finite answer set
    (their completions are the answer alone; :mod:`grae.eval.exact`)."""
    if getattr(task, "one_gold_completion", False):
        return True
    answers = task.answer_set() if hasattr(task, "answer_set") else None
    return bool(answers)


def check_gold_task(task: Any) -> None:
    """:class:`GoldExactError` unless :func:`has_gold_completion`."""
    if not has_gold_completion(task):
        raise GoldExactError(f"task {getattr(task, 'name', task)!r}: a correct answer is not one completion (it may "
                             "follow reasoning, or take many forms), so its pass rate is not one teacher-forced "
                             "probability; estimate it by sampling (n samples per problem) instead")


def gold_completions(task: Any, examples: Sequence[dict[str, Any]]) -> list[list[str]]:
    """Each example's gold completions (without EOS; :meth:`grae.data.base.Task.gold_completions`, one for most tasks),
    each checked against the task's verifier and distinct (distinct texts end in EOS at different tokens, so their
    events are disjoint and their probabilities add)."""
    out = []
    for example in examples:
        method = getattr(task, "gold_completions", None)
        completions = list(method(example)) if method is not None else \
            [task.answer_completion(str(example["answer"]).strip())]
        if not completions or len(set(completions)) != len(completions):
            raise GoldExactError(f"task {getattr(task, 'name', task)}: gold_completions of {example.get('question_id')} "
                                 f"must be one or more distinct texts, got {completions!r}")
        for completion in completions:
            if task.score(completion, example) != 1.0:
                raise GoldExactError(f"task {getattr(task, 'name', task)}: the verifier rejects the gold completion "
                                     f"{completion!r} of {example.get('question_id')}; answer_completion does not match "
                                     "the task's answer format")
        out.append(completions)
    return out


def gold_probs(model, tokenizer, examples: Sequence[dict[str, Any]], task: Any, *, temperature: float = 1.0,
               top_p: float = 1.0, max_tokens: int | None = None, batch: int = GOLD_BATCH,
               render: Callable[[Any], str] | None = None) -> np.ndarray:
    """``[P]`` probability that one sample of ``model`` at ``temperature`` / ``top_p`` is a gold completion of
    each example, + EOS, teacher-forced: the sum over its :func:`gold_completions` (module docstring; the terms are
    :func:`gold_prob_parts`). ``max_tokens``: a gold completion longer than the sampler's budget has p = 0.
    ``batch``: completions per forward. ``render``: prompt → model text (default: the chat template for message
    lists, strings as they are), as the evaluations render it."""
    return gold_prob_parts(model, tokenizer, examples, task, temperature=temperature, top_p=top_p,
                           max_tokens=max_tokens, batch=batch, render=render).sum(axis=1)


def gold_prob_parts(model, tokenizer, examples: Sequence[dict[str, Any]], task: Any, *, temperature: float = 1.0,
                    top_p: float = 1.0, max_tokens: int | None = None, batch: int = GOLD_BATCH,
                    render: Callable[[Any], str] | None = None) -> np.ndarray:
    """``[P, J]``: the teacher-forced probability of each example's gold completions + EOS, in the order of
    :func:`gold_completions` (J the most any example has; 0 past an example's own). For ``chain_trace`` with
    ``strategies="two"`` column 0 is the ``L`` trace and column 1 the ``G`` trace. Arguments as :func:`gold_probs`."""
    return gold_prob_parts_at(model, tokenizer, examples, task, [temperature], top_p=top_p, max_tokens=max_tokens,
                              batch=batch, render=render)[float(temperature)]


def gold_prob_parts_at(model, tokenizer, examples: Sequence[dict[str, Any]], task: Any,
                       temperatures: Sequence[float], *, top_p: float = 1.0, max_tokens: int | None = None,
                       batch: int = GOLD_BATCH, render: Callable[[Any], str] | None = None) -> dict[float, np.ndarray]:
    """Temperature → :func:`gold_prob_parts` at it, for every temperature from one forward pass per batch (the
    logits do not depend on the temperature; each temperature's distribution is read from them)."""
    check_gold_task(task)
    bad = [t for t in temperatures if not t > 0]
    if bad:
        raise GoldExactError(f"temperature must be > 0 (greedy decoding has no sampling distribution), got {bad[0]}")
    golds = gold_completions(task, examples)
    from .backends import _render_with

    render = render or (lambda prompt: _render_with(tokenizer, prompt))
    cells = [(i, j) for i, completions in enumerate(golds) for j in range(len(completions))]
    prompts = [render(examples[i]["prompt"]) for i, _ in cells]
    completions = [golds[i][j] for i, j in cells]
    was_training = getattr(model, "training", False)
    model.eval()
    try:
        logp = [_batch_logp(model, tokenizer, prompts[start:start + batch], completions[start:start + batch],
                            temperatures, top_p, max_tokens)
                for start in range(0, len(completions), batch)]  # [B, len(temperatures)] each
    finally:
        model.train(was_training)
    width = max((len(c) for c in golds), default=0)
    out = {}
    for t_index, temperature in enumerate(temperatures):
        parts = np.zeros((len(examples), width))  # [P, J]
        if cells:
            rows, cols = zip(*cells)
            parts[list(rows), list(cols)] = np.exp(np.concatenate([chunk[:, t_index] for chunk in logp]))
        out[float(temperature)] = parts
    return out


def _batch_logp(model, tokenizer, prompts: list[str], completions: list[str], temperatures: Sequence[float],
                top_p: float, max_tokens: int | None) -> np.ndarray:
    """``[B, len(temperatures)]`` summed log-probabilities of each completion + EOS after its prompt at each
    temperature (one right-padded forward)."""
    import torch

    from .backends import NonFiniteLogitsError, _starts_with_special
    from .nucleus import nucleus_logprobs

    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    pairs = [(tokenizer(p, add_special_tokens=not _starts_with_special(tokenizer, p))["input_ids"],
              tokenizer(c, add_special_tokens=False)["input_ids"] + [eos]) for p, c in zip(prompts, completions)]
    width = max(len(p) + len(c) for p, c in pairs)
    device = next(model.parameters()).device
    ids = torch.full((len(pairs), width), pad, dtype=torch.long)
    attention = torch.zeros((len(pairs), width), dtype=torch.long)
    for i, (p, c) in enumerate(pairs):
        ids[i, :len(p) + len(c)] = torch.tensor(p + c)
        attention[i, :len(p) + len(c)] = 1
    with torch.no_grad():
        logits = model(input_ids=ids.to(device), attention_mask=attention.to(device)).logits
    out = np.empty((len(pairs), len(temperatures)))
    for i, (p, c) in enumerate(pairs):
        if max_tokens is not None and len(c) > max_tokens:
            out[i] = -np.inf
            continue
        positions = torch.arange(len(p) - 1, len(p) + len(c) - 1, device=device)
        targets = torch.tensor(c, device=device)[:, None]
        for t_index, temperature in enumerate(temperatures):
            logp = nucleus_logprobs(logits[i, positions], temperature, top_p)  # [len(c), V]
            total = float(logp.gather(-1, targets).sum())
            if np.isnan(total):
                raise NonFiniteLogitsError("teacher-forcing the gold completions")
            out[i, t_index] = total
    return out
