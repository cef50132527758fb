"""Exact pass@k by answer enumeration: teacher-force every candidate answer, no sampling.

When a task's answers form a finite set (:meth:`grae.data.base.Task.answer_set`, e.g. ``chain_sum``'s
integer range), the probability that one sample is correct is the probability of the gold answer's
completion, ``p = π(completion(gold) + EOS | prompt)``, under the *sampling* distribution (temperature
``T`` then nucleus ``top_p``, as :class:`grae.eval.backends.HFSampler` samples). Then

    pass@k = mean over problems of 1 − (1 − p)^k          (k = 1 … 256, no sampling variance)

Every candidate ``a`` of the set is scored the same way, so each problem also reports the enumerated
mass ``Σ_a π(completion(a) + EOS)``: what lies outside (other formats, non-canonical tokenizations,
trailing text the verifier might also accept) is ``1 − mass``. ``p`` counts only the canonical
completion, so exact pass@k is a lower bound of the sampled one by at most that outside mass.

Speed: one forward of the prompt, its KV cache repeated for the candidates, one forward of the
``[C, L]`` candidate tokens (right padded; causal attention never sees the padding).

Memory: the candidates are scored in chunks that fit ``memory_mb`` (default
:data:`DEFAULT_EXACT_MEMORY_MB`; ``grae eval --exact-memory-mb``). A candidate costs its copy of the prompt's
KV cache plus its own tokens' (``2 · layers · kv_heads · head_dim · (L_prompt + L)`` values), one layer's
activations and ``L`` rows of vocabulary-sized float32 scores, a few times over while top-p and the
log-softmax run (:func:`candidate_bytes`). The chunks give the same numbers as one batch (each
candidate's row is computed from the same prompt cache; tested), so the budget changes only the time.
Before that, ``grae eval`` refuses a task with more than :data:`DEFAULT_EXACT_MAX_CANDIDATES` candidate
answers per problem (``--exact-max-candidates`` raises it): reasoning-gym's default ``chain_sum`` has
109,990, hours of teacher forcing even on the tiny model.

Reference policies, computed exactly from the same rows:

* **format-only oracle**: the model with all mass outside the enumerated answer format removed and
  renormalised, ``p / mass`` per problem;
* **near-miss guesser**: uniform on the answers of the set within ``± w`` of the gold answer (a
  numeric set; ``w`` = :data:`NEAR_MISS_W`), ``p = 1 / |{a ∈ set : |a − gold| ≤ w}|``.

Rows (one per problem, in ``<task>.jsonl`` like sampled rows; :func:`grae.eval.stats.count_problems`
reads them)::

    {"question_id", "task", "prompt", "gold_answer", "exact": true, "exact_by": "answer_set", "p", "mass", "k_max",
     "mode_answer", "mode_p", "near_miss_p"}

**One-gold tasks** (``chain_trace``: a correct answer is one whole completion, no finite set to enumerate;
:func:`grae.eval.gold.has_gold_completion`): :func:`run_exact` teacher-forces each problem's gold completion(s)
instead (:func:`grae.eval.gold.gold_probs`, :func:`gold_rows`) — one code path choosing by task
(:func:`exact_by`). Their rows are the same with ``"exact_by": "gold_completion"``; the enumerated completions are
the gold ones, so ``mass`` = ``p`` and there is no format-only oracle or near-miss guesser
(:func:`reference_counts` gives none).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from grae.io import atomic_write_text

from .nucleus import nucleus_logprobs
from .stats import EXACT_K_MAX, ProblemCounts, count_problems, passk_estimates

#: Half-width of the near-miss guesser's window (answers within ± w of the gold answer).
NEAR_MISS_W = 20
#: Memory (MB) the candidates' batches may take at once (``grae eval --exact-memory-mb``).
DEFAULT_EXACT_MEMORY_MB = 512
#: the smallest ``grae eval --exact-memory-mb`` taken (10 kB): one candidate's logits alone take vocabulary × 4 bytes
#: per token (the embedded tiny model's whole candidate about 0.5 MB), so a smaller budget holds no candidate of any
#: language model and would only be exceeded by chunks of one: a mistaken unit (1e-9), not a budget
MIN_EXACT_MEMORY_MB = 0.01
#: Candidate answers per problem above which ``grae eval --exact`` refuses (``--exact-max-candidates``).
DEFAULT_EXACT_MAX_CANDIDATES = 20_000
#: vocabulary-sized float32 score tensors alive at once per candidate token (logits, ``/ T``, top-p's
#: probabilities and mask, its sort when the nucleus is wide, log-softmax): an upper count
SCORE_COPIES = 8


class ExactError(ValueError):
    """A task or model the exact evaluation cannot enumerate (one line naming the fix)."""


def task_answer_set(task: Any) -> list[str]:
    """The task's declared finite answer set, or :class:`ExactError` naming why there is none."""
    answers = task.answer_set() if hasattr(task, "answer_set") else None
    if not answers:
        raise ExactError(f"task {getattr(task, 'name', task)!r} declares no finite answer set; --exact needs one "
                         "(grae.data Task.answer_set: chain_sum, count_shapes, bar_value)")
    return list(answers)


#: ``exact_by`` of rows whose p enumerates a finite answer set / teacher-forces the gold completion(s)
BY_ANSWER_SET = "answer_set"
BY_GOLD = "gold_completion"


def exact_by(task: Any) -> str:
    """How exact p is computed for ``task``: :data:`BY_ANSWER_SET` (a declared finite answer set, enumerated) or
    :data:`BY_GOLD` (a one-gold task: its gold completion teacher-forced); :class:`ExactError` naming both when
    neither applies."""
    from .gold import has_gold_completion

    answers = task.answer_set() if hasattr(task, "answer_set") else None
    if answers:
        return BY_ANSWER_SET
    if has_gold_completion(task):
        return BY_GOLD
    raise ExactError(f"task {getattr(task, 'name', task)!r} declares no finite answer set and no one gold completion; "
                     "exact p needs one (answer sets: chain_sum, count_shapes, bar_value; one gold completion: "
                     "chain_trace)")


def candidate_bytes(config: Any, prompt_len: int, width: int, value_bytes: int = 4) -> int:
    """Upper estimate of the memory one candidate of ``width`` tokens takes while it is scored after a
    prompt of ``prompt_len`` tokens, for a model with (text) ``config``: its KV cache (the prompt's copy and
    its own tokens), one layer's activations and the vocabulary-sized scores (:data:`SCORE_COPIES`)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    layers, hidden, vocab = text.num_hidden_layers, text.hidden_size, text.vocab_size
    heads = text.num_attention_heads
    kv_heads = getattr(text, "num_key_value_heads", None) or heads
    head_dim = getattr(text, "head_dim", None) or hidden // heads
    intermediate = getattr(text, "intermediate_size", None) or 4 * hidden
    context = prompt_len + width
    cache = 2 * layers * kv_heads * head_dim * (context + prompt_len) * value_bytes  # + the repeat's transient
    layer = width * (4 * hidden + 3 * intermediate) * value_bytes + heads * width * context * 4  # [L, ·], scores
    scores = width * vocab * 4 * SCORE_COPIES
    return cache + layer + scores


class CandidateScorer:
    """Sequence probabilities of a fixed list of completions after any prompt, for one HF causal LM,
    scored in chunks of candidates within ``memory_mb`` (module docstring)."""

    def __init__(self, model, tokenizer, completions: Sequence[str], *, temperature: float = 0.6,
                 top_p: float = 0.95, max_tokens: int | None = None, memory_mb: float = DEFAULT_EXACT_MEMORY_MB):
        import torch

        if temperature <= 0:
            raise ExactError("--temperature 0 (greedy) has no sampling distribution to enumerate; use T > 0")
        if not memory_mb > 0:
            raise ExactError(f"--exact-memory-mb must be > 0, got {memory_mb}")
        self.model, self.tokenizer = model, tokenizer
        self.temperature, self.top_p = float(temperature), float(top_p)
        self.memory_bytes = float(memory_mb) * 2**20
        eos = model.generation_config.eos_token_id
        eos = eos[0] if isinstance(eos, (list, tuple)) else eos
        eos = eos if eos is not None else tokenizer.eos_token_id
        ids = [tokenizer(text, add_special_tokens=False)["input_ids"] + [eos] for text in completions]
        self.lengths = torch.tensor([len(t) for t in ids])  # [C]
        #: completions the sampler could not produce (longer than max_tokens) have probability 0
        self.too_long = (self.lengths > max_tokens) if max_tokens else torch.zeros(len(ids), dtype=torch.bool)
        width = int(self.lengths.max())
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
        self.tokens = torch.full((len(ids), width), pad, dtype=torch.long)  # [C, L]
        for i, t in enumerate(ids):
            self.tokens[i, : len(t)] = torch.tensor(t)
        self.valid = torch.arange(width)[None, :] < self.lengths[:, None]  # [C, L]

    def chunk_size(self, prompt_len: int) -> int:
        """Candidates scored at once after a prompt of ``prompt_len`` tokens: as many as fit the memory
        budget (:func:`candidate_bytes`), at least one."""
        value_bytes = next(self.model.parameters()).element_size()
        each = candidate_bytes(self.model.config, prompt_len, self.tokens.shape[1], value_bytes)
        return max(1, min(self.tokens.shape[0], int(self.memory_bytes // each)))

    def logprobs(self, prompt: str, on_chunk: Callable[[int, int], None] | None = None) -> np.ndarray:
        """``[C]`` log-probabilities of every completion (+ EOS) after ``prompt`` (rendered text), scored
        :meth:`chunk_size` candidates at a time; ``on_chunk(done, C)`` after each chunk."""
        import torch

        from .backends import _starts_with_special

        tok, model = self.tokenizer, self.model
        device = next(model.parameters()).device
        enc = tok(prompt, return_tensors="pt", add_special_tokens=not _starts_with_special(tok, prompt))
        prompt_ids = enc["input_ids"].to(device)  # [1, Lp]
        count = self.tokens.shape[0]
        size = self.chunk_size(prompt_ids.shape[1])
        totals = []
        with torch.no_grad():
            out = model(input_ids=prompt_ids, use_cache=True)
            first = nucleus_logprobs(out.logits[:, -1], self.temperature, self.top_p)  # [1, V]
            for start in range(0, count, size):
                totals.append(self._score_chunk(out.past_key_values, first, prompt_ids.shape[1],
                                                slice(start, min(start + size, count)), device))
                if on_chunk is not None:
                    on_chunk(min(start + size, count), count)
        total = torch.cat(totals).masked_fill(self.too_long, float("-inf"))  # [C]
        if bool(total.isnan().any()):  # -inf is a candidate the nucleus drops; NaN, logits that overflowed
            from .backends import NonFiniteLogitsError

            raise NonFiniteLogitsError("scoring the candidate answers")
        return total.double().numpy()

    def _score_chunk(self, prompt_cache, first, prompt_len: int, rows: slice, device):
        """``[c]`` summed log-probabilities of the candidates ``rows``, each after its own copy of the
        prompt's cache (the forward appends to the cache it is given)."""
        import copy

        import torch

        width = int(self.lengths[rows].max())
        tokens = self.tokens[rows, :width].to(device)  # [c, L]
        copies = tokens.shape[0]
        steps = first.expand(copies, -1)[:, None]  # [c, 1, V]
        if width > 1:
            cache = copy.deepcopy(prompt_cache)
            cache.batch_repeat_interleave(copies)
            positions = torch.arange(prompt_len, prompt_len + width - 1, device=device)
            rest = self.model(input_ids=tokens[:, :-1], past_key_values=cache, use_cache=False,
                              position_ids=positions[None, :].expand(copies, -1)).logits  # [c, L-1, V]
            del cache
            steps = torch.cat([steps, nucleus_logprobs(rest, self.temperature, self.top_p)], dim=1)  # [c, L, V]
        picked = steps.gather(-1, tokens[:, :, None])[..., 0]  # [c, L]
        picked = picked.masked_fill(~self.valid[rows, :width].to(device), 0.0)
        return picked.sum(dim=1).cpu()


def near_miss_p(gold: str, answers: Sequence[str], w: int = NEAR_MISS_W) -> float:
    """p(correct) of the near-miss guesser: uniform on the set's answers within ± ``w`` of ``gold``
    (numeric sets; NaN when the answers are not integers)."""
    try:
        g = int(gold)
        near = sum(1 for a in answers if abs(int(a) - g) <= w)
    except ValueError:
        return float("nan")
    return 1.0 / near if near else 0.0


def exact_rows(scorer: CandidateScorer, examples: Sequence[dict[str, Any]], task: Any, answers: Sequence[str],
               render: Callable[[Any], str], *, k_max: int = EXACT_K_MAX,
               progress: Callable[[int, int], None] | None = None,
               estimate: Callable[[float], None] | None = None) -> list[dict[str, Any]]:
    """One exact row per example (module docstring). Checks that the gold answer is in the set and that
    the task's verifier accepts its completion, so a wrong declaration cannot pass silently.
    ``estimate(seconds)``: once, after the first chunk of candidates, the expected time of all examples
    extrapolated from it."""
    index = {a: i for i, a in enumerate(answers)}
    name = getattr(task, "name", "task")
    rows = []
    for done, example in enumerate(examples, 1):
        gold = str(example["answer"]).strip()
        if gold not in index:
            raise ExactError(f"task {name}: gold answer {gold!r} of {example['question_id']} is outside the declared "
                             f"answer set ({answers[0]} … {answers[-1]}); the set's declaration is wrong")
        completion = task.answer_completion(gold)
        if task.score(completion, example) != 1.0:
            raise ExactError(f"task {name}: the verifier rejects the gold completion {completion!r}; "
                             "answer_completion does not match the task's answer format")
        prompt = render(example["prompt"])
        logp = scorer.logprobs(prompt, on_chunk=_first_chunk_timer(len(examples), estimate) if done == 1 else None)
        probs = np.exp(logp)
        mode = int(np.argmax(logp))
        rows.append({"question_id": str(example["question_id"]), "task": name, "prompt": prompt,
                     "gold_answer": gold, "exact": True, "exact_by": BY_ANSWER_SET, "p": float(probs[index[gold]]),
                     "mass": float(probs.sum()),
                     "k_max": k_max, "mode_answer": answers[mode], "mode_p": float(probs[mode]),
                     "near_miss_p": near_miss_p(gold, answers)})
        if progress is not None:
            progress(done, len(examples))
    return rows


def gold_rows(model, tokenizer, examples: Sequence[dict[str, Any]], task: Any, render: Callable[[Any], str], *,
              temperature: float, top_p: float, max_tokens: int | None, k_max: int = EXACT_K_MAX,
              progress: Callable[[int, int], None] | None = None) -> list[dict[str, Any]]:
    """One exact row per example of a one-gold task (module docstring): p from :func:`grae.eval.gold.gold_probs`,
    :data:`grae.eval.gold.GOLD_BATCH` problems per call (``progress(done, total)`` after each)."""
    from .gold import GOLD_BATCH, GoldExactError, gold_probs

    name = getattr(task, "name", "task")
    rows: list[dict[str, Any]] = []
    for start in range(0, len(examples), GOLD_BATCH):
        chunk = examples[start:start + GOLD_BATCH]
        try:
            probs = gold_probs(model, tokenizer, chunk, task, temperature=temperature, top_p=top_p,
                               max_tokens=max_tokens, render=render)
        except GoldExactError as err:
            raise ExactError(str(err)) from None
        for example, p in zip(chunk, probs):
            rows.append({"question_id": str(example["question_id"]), "task": name, "prompt": render(example["prompt"]),
                         "gold_answer": str(example["answer"]).strip(), "exact": True, "exact_by": BY_GOLD,
                         "p": float(p), "mass": float(p), "k_max": k_max})
        if progress is not None:
            progress(len(rows), len(examples))
    return rows


def _first_chunk_timer(problems: int, estimate: Callable[[float], None] | None) -> Callable[[int, int], None] | None:
    """An ``on_chunk`` that calls ``estimate`` once, with the time of ``problems`` problems extrapolated from
    the first chunk (prompt forward included)."""
    if estimate is None:
        return None
    start, said = time.perf_counter(), []

    def on_chunk(scored: int, total: int) -> None:
        if not said:
            said.append(True)
            estimate((time.perf_counter() - start) * total / scored * problems)

    return on_chunk


def reference_counts(counts: ProblemCounts, rows: Sequence[dict[str, Any]] | None = None) -> dict[str, ProblemCounts]:
    """The reference policies of exact ``counts`` as exact counts of their own: ``format-only oracle``
    (p / mass) and, when ``rows`` carry ``near_miss_p``, ``near-miss guesser (w = …)``. None for the rows of a
    one-gold task (``exact_by: gold_completion``): its only enumerated completion is the gold one, so p / mass = 1
    would be no reference at all."""
    if counts.p is None or counts.mass is None:
        raise ValueError("reference policies need exact counts (p and mass per problem)")
    out: dict[str, ProblemCounts] = {}
    if rows is not None and any(row.get("exact_by") == BY_GOLD for row in rows):
        return out
    with np.errstate(divide="ignore", invalid="ignore"):
        oracle = np.where(counts.mass > 0, counts.p / counts.mass, 0.0).clip(0.0, 1.0)
    out["format-only oracle"] = ProblemCounts(counts.question_ids, counts.n, oracle * counts.n, p=oracle,
                                              mass=np.ones_like(oracle))
    if rows is not None:
        by_q = {str(r["question_id"]): r.get("near_miss_p") for r in rows}
        near = np.array([float(by_q.get(q) if by_q.get(q) is not None else math.nan) for q in counts.question_ids])
        if np.all(np.isfinite(near)):
            out[f"near-miss guesser (w = {NEAR_MISS_W})"] = ProblemCounts(counts.question_ids, counts.n,
                                                                          near * counts.n, p=near, mass=np.ones_like(near))
    return out


def reference_table(counts: ProblemCounts, rows: Sequence[dict[str, Any]] | None = None,
                    ks: Sequence[int] = (1, 16, 64, 256)) -> dict[str, dict[int, float]]:
    """``{policy: {k: pass@k}}`` for the model itself and its reference policies (exact, no interval)."""
    table = {"model (exact)": counts, **reference_counts(counts, rows)}
    return {name: {int(k): e.value for k, e in passk_estimates(c, ks, bootstrap=0).items()} for name, c in table.items()}


def run_exact(model, tokenizer, examples: Sequence[dict[str, Any]], task: Any, *, render: Callable[[Any], str],
              temperature: float, top_p: float, max_tokens: int | None, output_path: str | Path | None = None,
              k_max: int = EXACT_K_MAX, progress: Callable[[int, int], None] | None = None,
              memory_mb: float = DEFAULT_EXACT_MEMORY_MB, estimate: Callable[[float], None] | None = None,
              ) -> tuple[ProblemCounts, list[dict[str, Any]], float]:
    """Exact rows of ``examples`` (written atomically to ``output_path`` when given), their counts and the
    seconds it took, by :func:`exact_by`: an answer-set task's candidates scored within ``memory_mb``
    (:class:`CandidateScorer`), ``estimate`` as in :func:`exact_rows`; a one-gold task's gold completions
    teacher-forced (:func:`gold_rows`; ``memory_mb`` and ``estimate`` unused)."""
    import json

    if any(example.get("image") is not None for example in examples):
        raise ExactError(f"task {getattr(task, 'name', task)!r} has images: --exact supports text tasks only for now")
    start = time.perf_counter()
    if exact_by(task) == BY_GOLD:
        rows = gold_rows(model, tokenizer, examples, task, render, temperature=temperature, top_p=top_p,
                         max_tokens=max_tokens, k_max=k_max, progress=progress)
    else:
        answers = task_answer_set(task)
        scorer = CandidateScorer(model, tokenizer, [task.answer_completion(a) for a in answers],
                                 temperature=temperature, top_p=top_p, max_tokens=max_tokens, memory_mb=memory_mb)
        rows = exact_rows(scorer, examples, task, answers, render, k_max=k_max, progress=progress, estimate=estimate)
    if output_path is not None:
        atomic_write_text(Path(output_path), "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    counts = count_problems(rows)
    return counts, rows, time.perf_counter() - start
