"""Sample n completions per problem, verify them, write rows as they are produced, resume after a kill.

Layout of the work: problems are cut into generate *calls* of at most ``batch_size`` sequences,
fixed by ``(number of problems, n, batch_size)`` alone — when ``n >= batch_size`` a call is one
problem's ``generation_id`` range ``[start, start + batch_size)``; otherwise a call holds
``batch_size // n`` whole problems. Each call is seeded from ``(seed, first question_id, start)``,
so a rerun with the same settings draws the same samples whether or not it resumed.

Resume: rows already in the file are read (a truncated last line is dropped), calls whose
``(question_id, generation_id)`` pairs are all present are skipped, and a partly present call is
regenerated with its own seed and only its missing rows appended. A kill loses at most the call
in flight.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from grae.io import atomic_write_json

from .backends import HFSampler, Sampler, SamplingSettings
from .records import RecordsError, RowWriter, iter_rows, repair_tail
from .stats import ProblemCounts, count_problems, passk_estimates


@dataclass(frozen=True)
class Unit:
    """Generation ids ``[start, start + count)`` of example ``index``."""

    index: int
    start: int
    count: int


def plan_calls(num_examples: int, n: int, batch_size: int) -> list[list[Unit]]:
    """The fixed cut of ``num_examples × n`` samples into generate calls (see module docstring)."""
    if n < 1 or batch_size < 1:
        raise ValueError(f"need n >= 1 and batch_size >= 1, got n={n}, batch_size={batch_size}")
    if n >= batch_size:
        return [[Unit(i, start, min(batch_size, n - start))] for i in range(num_examples)
                for start in range(0, n, batch_size)]
    per_call = batch_size // n
    return [[Unit(i, 0, n) for i in range(first, min(first + per_call, num_examples))]
            for first in range(0, num_examples, per_call)]


def count_calls(num_examples: int, n: int, batch_size: int) -> int:
    """``len(plan_calls(num_examples, n, batch_size))`` without building the calls."""
    if n >= batch_size:
        return num_examples * -(-n // batch_size)
    return -(-num_examples // (batch_size // n))


def rows_done(output_path: str | Path, question_ids: Sequence[str]) -> set[tuple[str, int]]:
    """The ``(question_id, generation_id)`` pairs of these problems already in the rows file (none when it
    does not exist); a partly written last row does not count."""
    output_path = Path(output_path)
    if not output_path.exists():
        return set()
    wanted = set(question_ids)
    return {(str(row["question_id"]), row["generation_id"]) for row in iter_rows(output_path)
            if str(row.get("question_id")) in wanted and isinstance(row.get("generation_id"), int)}


def check_resumed_rows(output_path: Path, examples: Sequence[dict[str, Any]], task: Any) -> None:
    """Each row on disk of these problems, checked against the task before a resume counts it: its
    ``gold_answer`` is the example's gold and its ``label`` is what the task's verifier says of its ``response``
    now. A row edited, or written for another task or file, raises :class:`RecordsError` naming the row: pass@k
    is never computed from labels the verifier does not give."""
    if not output_path.exists():
        return
    by_id = {str(example["question_id"]): example for example in examples}
    verdicts: dict[tuple[str, str, bool], bool] = {}
    fix = "rerun with --overwrite to sample them again, or choose another output"
    for number, row in enumerate(iter_rows(output_path), start=1):
        example = by_id.get(str(row.get("question_id")))
        if example is None or not isinstance(row.get("generation_id"), int):
            continue
        here = f"{output_path}: row {number} ({row.get('question_id')} #{row['generation_id']})"
        gold = None if example.get("answer") is None else str(example["answer"])
        if row.get("gold_answer") != gold:
            raise RecordsError(f"{here}: gold_answer {row.get('gold_answer')!r}, the task's is {gold!r}; the rows were "
                               f"written for other data or edited: {fix}")
        response, label = row.get("response"), row.get("label")
        if not isinstance(response, str) or not isinstance(label, bool):
            raise RecordsError(f"{here}: expected a text response and a true/false label, got {type(response).__name__} "
                               f"and {label!r}: {fix}")
        key = (str(row["question_id"]), response, row.get("truncated") is True)
        if _unscored_cut(task, row):
            verdicts[key] = False
        elif key not in verdicts:
            verdicts[key] = float(task.score(response, example)) > 0.5
        if verdicts[key] != label:
            raise RecordsError(f"{here}: label {label}, but the task's verifier scores its response {verdicts[key]}; "
                               f"the rows were edited or scored by another verifier: {fix}")


def call_seed(seed: int, question_id: str, start: int) -> int:
    """A 31-bit seed determined by ``(seed, question_id, start)`` (stable across processes and platforms)."""
    digest = hashlib.sha256(f"{seed}\x00{question_id}\x00{start}".encode()).digest()
    return int.from_bytes(digest[:4], "little") & 0x7FFFFFFF


@dataclass
class EvalResult:
    """Outcome of evaluating one task: per-problem counts and the pass@k curve."""

    task: str
    counts: ProblemCounts
    curve: dict[int, float]
    #: 95 % percentile-bootstrap interval over problems, per k
    intervals: dict[int, tuple[float, float]]
    num_generated: int
    num_resumed: int
    seconds: float
    output_path: Path | None = None
    #: all rows, when no output file was given (otherwise read them from ``output_path``)
    rows: list[dict[str, Any]] | None = None
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def question_ids(self) -> list[str]:
        return self.counts.question_ids

    @property
    def n(self) -> np.ndarray:
        return self.counts.n

    @property
    def c(self) -> np.ndarray:
        return self.counts.c

    def summary(self) -> dict[str, Any]:
        """JSON-ready summary (what ``grae eval`` writes to ``<task>.summary.json``)."""
        return {
            "task": self.task,
            **self.settings,
            "num_problems": self.counts.num_problems,
            "n": int(self.counts.n.min()),
            "pass_at_k": {str(k): v for k, v in self.curve.items()},
            "ci95": {str(k): list(v) for k, v in self.intervals.items()},
            "mean_reward": float(self.counts.c.sum() / self.counts.n.sum()),
            "frac_never_solved": float(np.mean(self.counts.c == 0)),
            "frac_always_solved": float(np.mean(self.counts.c == self.counts.n)),
            "num_generated": self.num_generated,
            "num_resumed": self.num_resumed,
            "seconds": round(self.seconds, 3),
            "samples_per_second": round(self.num_generated / self.seconds, 2) if self.seconds > 0 else None,
            "samples": self.output_path.name if self.output_path else None,
        }


def settings_path(output_path: str | Path) -> Path:
    """Sidecar recording what the rows in ``output_path`` were sampled with (``<stem>.run.json``)."""
    output_path = Path(output_path)
    return output_path.with_name(output_path.stem + ".run.json")


#: Settings that must match for rows on disk to be resumed (n, problems and batch size may change).
#: ``identity`` is what was evaluated (grae.eval.identity): it changes when the weights change.
RESUME_KEYS = ("identity", "model", "task", "task_params", "prompt_style", "temperature", "top_p", "max_tokens", "seed",
               "exact")


def stale_reason(output_path: str | Path, settings: dict[str, Any]) -> str | None:
    """Why the rows in ``output_path`` cannot be resumed with ``settings`` (None: they can, or there are none).

    Rows whose sidecar records no ``identity`` (written before identities existed) are stale whenever
    ``settings`` has one: nothing proves they came from these weights."""
    import json

    sidecar = settings_path(output_path)
    if not sidecar.exists():
        rows = Path(output_path).exists() and Path(output_path).stat().st_size > 0
        return "rows without a record of what produced them" if rows and "identity" in settings else None
    previous = json.loads(sidecar.read_text())
    previous.setdefault("exact", False)  # sidecars from before exact rows existed hold sampled rows
    keys = [k for k in RESUME_KEYS if not (k == "model" and "identity" in settings and "identity" in previous)]
    changed = {key: (previous.get(key), settings.get(key)) for key in keys  # same weights under another name: fine
               if key in settings and (key in previous or key == "identity") and previous.get(key) != settings[key]}
    if not changed:
        return None
    return ", ".join(f"{key}: {a!r} on disk vs {b!r} now" for key, (a, b) in changed.items())


def conflicts(output_dir: str | Path, identity: str, planned: dict[Path, dict[str, Any]]) -> dict[Path, str]:
    """The rows in ``output_dir`` an evaluation of ``identity`` cannot keep, ``{rows path: why}``: rows of
    the files it will write (``planned``: ``{rows path: settings}``) produced with other settings
    (:func:`stale_reason`), and any other task's rows of other weights — a directory holds one model's
    results, so its ``summary.json`` never mixes models. Files without a grae record are not counted
    (nothing grae did not write is ever replaced)."""
    import json

    found = {Path(path): reason for path, settings in planned.items() if (reason := stale_reason(path, settings))}
    for sidecar in sorted(Path(output_dir).glob("*.run.json")):
        rows = sidecar.with_name(sidecar.name[: -len(".run.json")] + ".jsonl")
        try:
            recorded = json.loads(sidecar.read_text()).get("identity")
        except (ValueError, AttributeError):
            recorded = "an unreadable record"
        if rows not in found and recorded != identity:
            found[rows] = f"identity: {recorded!r} on disk vs {identity!r} now"
    return found


def discard_rows(output_path: str | Path) -> None:
    """Remove the rows of ``output_path`` and their sidecars (stale rows, ``--overwrite``)."""
    output_path = Path(output_path)
    for path in (output_path, settings_path(output_path), output_path.with_name(output_path.stem + ".summary.json")):
        path.unlink(missing_ok=True)


def _check_resume(output_path: Path, settings: dict[str, Any]) -> None:
    import json

    reason = stale_reason(output_path, settings)
    if reason:
        raise RecordsError(f"{output_path} holds samples of another model or other settings ({reason}); "
                           f"rerun with --overwrite to replace them, or choose another output")
    sidecar = settings_path(output_path)
    if sidecar.exists():
        settings = {**json.loads(sidecar.read_text()), **settings}
    atomic_write_json(sidecar, settings)


def predicted_answer(task: Any, completion: str) -> str | None:
    """The answer the verifier reads from ``completion``, for the ``pred_answer`` field.

    The task's own ``extract_answer(completion)`` when it has one; otherwise grae's extractor for
    the task's ``answer_format`` (``boxed`` → :func:`grae.rewards.extract_math_answer`,
    ``answer_tag``/``plain`` → :func:`grae.rewards.extract_procedural_answer` with the task's
    ``plain_answer`` fallback); ``None`` when neither applies.
    """
    method = getattr(task, "extract_answer", None)
    if callable(method):
        answer = method(completion)
        return None if answer is None else str(answer)
    fmt = getattr(task, "answer_format", None)
    if fmt not in ("boxed", "answer_tag", "plain"):
        return None
    from grae.rewards import extract_math_answer, extract_procedural_answer

    if fmt == "boxed":
        return extract_math_answer(completion)
    fallback = getattr(task, "plain_answer", None) or ("first_token" if fmt == "plain" else "none")
    return extract_procedural_answer(completion, fallback=fallback)


def _task_name(task: Any, examples: Sequence[dict[str, Any]]) -> str:
    name = getattr(task, "name", None)
    if name:
        return str(name)
    if examples and "task" in examples[0]:
        return str(examples[0]["task"])
    return type(task).__name__


def run_samples(
    sampler: Sampler,
    examples: Sequence[dict[str, Any]],
    task: Any,
    *,
    n: int,
    batch_size: int,
    seed: int = 0,
    output_path: str | Path | None = None,
    settings: dict[str, Any] | None = None,
    progress: Callable[[int, int], None] | None = None,
    bootstrap: int = 1000,
) -> EvalResult:
    """Sample, verify and record ``n`` completions for each example; return the pass@k curve.

    Args:
        sampler: a :class:`~grae.eval.backends.Sampler` (HF or vLLM).
        examples: task examples (dicts with ``question_id``, ``prompt``, ``answer``).
        task: anything with ``score(completion, example) -> float`` (1.0 = correct); an
            ``extract_answer(completion)`` method, when present, fills ``pred_answer``.
        n: samples per problem; ``batch_size``: sequences per generate call.
        seed: base seed (see :func:`call_seed`).
        output_path: JSONL file to append rows to and resume from; ``None`` keeps rows in memory.
        settings: recorded next to the rows and checked on resume (keys :data:`RESUME_KEYS`).
        progress: called as ``progress(samples_done, samples_total)`` once before the first call (the rows
            resumed) and after each call.
        bootstrap: resamples for the confidence intervals in the result.
    """
    start_time = time.perf_counter()
    name = _task_name(task, examples)
    question_ids = [str(example["question_id"]) for example in examples]
    if len(set(question_ids)) != len(question_ids):
        raise ValueError(f"task {name}: duplicate question_id among the examples")
    settings = {"task": name, **(settings or {}), "n": n, "seed": seed}
    memory: list[dict[str, Any]] = []
    writer = None
    done: set[tuple[str, int]] = set()
    if output_path is not None:
        output_path = Path(output_path)
        _check_resume(output_path, settings)
        repair_tail(output_path)
        check_resumed_rows(output_path, examples, task)
        done = rows_done(output_path, question_ids)
        writer = RowWriter(output_path)
    num_resumed = len({pair for pair in done if pair[1] < n})
    total = len(examples) * n
    prompts = [sampler.render(example["prompt"]) for example in examples]
    images = [example.get("image") for example in examples]  # PIL images of a visual task, else None
    if any(image is not None for image in images) and not all(image is not None for image in images):
        raise ValueError(f"task {name}: some examples have an image and some do not; evaluate them separately")
    generated = 0
    if progress is not None:  # where the run starts (a resumed one: the rows on disk), before a call ends
        progress(num_resumed, total)
    try:
        for call in plan_calls(len(examples), n, batch_size):
            first = call[0]
            missing = [[gid for gid in range(u.start, u.start + u.count) if (question_ids[u.index], gid) not in done]
                       for u in call]
            if not any(missing):
                continue
            seed_ = call_seed(seed, question_ids[first.index], first.start)
            call_images = [images[u.index] for u in call] if images and images[0] is not None else None
            completions = sampler.generate([prompts[u.index] for u in call], first.count, seed=seed_,
                                           **({"images": call_images} if call_images else {}))
            rows = []
            for unit, gids, outs in zip(call, missing, completions):
                example = examples[unit.index]
                for gid in gids:
                    rows.append(_row(task, name, example, prompts[unit.index], gid, outs[gid - unit.start]))
            if writer is not None:
                writer.write_batch(rows)
            else:
                memory.extend(rows)
            done.update((row["question_id"], row["generation_id"]) for row in rows)
            generated += len(rows)
            if progress is not None:
                progress(num_resumed + generated, total)
    finally:
        if writer is not None:
            writer.close()
    all_rows = iter_rows(output_path) if output_path is not None else memory
    counts = count_problems(all_rows, n=n, question_ids=question_ids)
    if counts.dropped:
        raise RecordsError(f"task {name}: {len(counts.dropped)} problems lack samples after the run")
    estimates = passk_estimates(counts, bootstrap=bootstrap, seed=seed)
    return EvalResult(
        task=name,
        counts=counts,
        curve={k: e.value for k, e in estimates.items()},
        intervals={k: (e.lo, e.hi) for k, e in estimates.items()} if bootstrap > 0 else {},
        num_generated=generated,
        num_resumed=num_resumed,
        seconds=time.perf_counter() - start_time,
        output_path=output_path,
        rows=None if output_path is not None else memory,
        settings=settings,
    )


def _unscored_cut(task: Any, row_or_response: Any) -> bool:
    """A completion the token budget cut (a :class:`~grae.eval.backends.Completion`, or a row marked ``truncated``)
    that the task does not ask to score (``score_truncated``): it scores 0 without being read."""
    cut = row_or_response.get("truncated") if isinstance(row_or_response, dict) else getattr(row_or_response, "cut", False)
    return cut is True and not getattr(task, "score_truncated", False)


def _row(task: Any, name: str, example: dict[str, Any], prompt: str, generation_id: int, response: str) -> dict[str, Any]:
    score = 0.0 if _unscored_cut(task, response) else float(task.score(response, example))
    return {
        "question_id": str(example["question_id"]),
        "generation_id": generation_id,
        "task": str(example.get("task", name)),
        "prompt": prompt,
        "response": response,
        "pred_answer": predicted_answer(task, response),
        "gold_answer": None if example.get("answer") is None else str(example["answer"]),
        "label": score > 0.5,
        **({"image_id": str(example["image_id"])} if example.get("image_id") is not None else {}),
        **({"truncated": True} if getattr(response, "cut", False) is True else {}),
    }


def evaluate(
    model,
    tokenizer,
    examples: Sequence[dict[str, Any]],
    task: Any,
    *,
    n: int = 64,
    temperature: float = 0.6,
    top_p: float = 0.95,
    max_tokens: int = 1024,
    batch_size: int = 64,
    seed: int = 0,
    output_path: str | Path | None = None,
    progress: Callable[[int, int], None] | None = None,
    identity: str | None = None,
) -> EvalResult:
    """Evaluate an in-memory HF model (no reload) — what ``grae train`` calls before and after training.

    ``tokenizer`` is the model's tokenizer, or a vision-language model's processor (its examples then
    carry an ``image``; rows record the ``image_id``).

    The model is put in eval mode for the duration and restored; the global torch RNG state is
    untouched. ``identity`` names the weights (:mod:`grae.eval.identity`; default, when rows go to
    ``output_path``: a hash of the model's tensors); rows on disk from another identity are refused.
    See :func:`run_samples` for the other arguments.
    """
    if identity is None and output_path is not None:  # config._name_or_path is the same for every fine-tune of a base
        from .identity import tensors_fingerprint

        identity = tensors_fingerprint(model)
    from transformers import ProcessorMixin

    processor = None
    if isinstance(tokenizer, ProcessorMixin):  # a vision-language model's processor
        processor, tokenizer = tokenizer, tokenizer.tokenizer
    sampler = HFSampler(model, tokenizer, SamplingSettings(temperature, top_p, max_tokens), processor=processor)
    settings = {"model": getattr(getattr(model, "config", None), "_name_or_path", None) or type(model).__name__,
                "backend": "hf", "temperature": temperature, "top_p": top_p, "max_tokens": max_tokens,
                **({"identity": identity} if identity else {})}
    return run_samples(sampler, examples, task, n=n, batch_size=batch_size, seed=seed, output_path=output_path,
                       settings=settings, progress=progress)


def evaluate_exact(
    model,
    tokenizer,
    examples: Sequence[dict[str, Any]],
    task: Any,
    *,
    settings: dict[str, Any],
    k_max: int = 256,
    render: Callable[[Any], str] | None = None,
    output_path: str | Path | None = None,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
    memory_mb: float | None = None,
    estimate: Callable[[float], None] | None = None,
) -> EvalResult:
    """Exact pass@k of ``examples`` (:mod:`grae.eval.exact`: answer enumeration, or for a one-gold task such as
    ``chain_trace`` its gold completion teacher-forced, chosen by task), recorded like sampled rows:
    ``settings`` (with ``temperature``, ``top_p``, ``max_tokens``; ``"exact": True`` is added) go to the rows'
    sidecar, so sampled rows on disk are never mistaken for exact ones. The one code path of ``grae eval --exact``
    and of the held-out evaluations of ``grae train``/``grae compare`` with exact.

    Exact rows are recomputed whole (seconds), never resumed. ``render``: prompt → model text (default:
    the tokenizer's chat template for message lists, strings as they are). pass@k for k = 1, 2, 4, …, ``k_max``.
    ``memory_mb``: the candidates' memory budget (None: :data:`grae.eval.exact.DEFAULT_EXACT_MEMORY_MB`);
    ``estimate(seconds)``: the expected time, once, after the first chunk of candidates.
    """
    from grae.metrics import powers_of_two

    from .backends import _render_with
    from .exact import DEFAULT_EXACT_MEMORY_MB, run_exact

    settings = {**settings, "exact": True}
    if output_path is not None:
        discard_rows(output_path)
        _check_resume(Path(output_path), settings)
    was_training = getattr(model, "training", False)
    model.eval()
    try:
        counts, rows, seconds = run_exact(model, tokenizer, examples, task,
                                          render=render or (lambda prompt: _render_with(tokenizer, prompt)),
                                          temperature=settings["temperature"], top_p=settings["top_p"],
                                          max_tokens=settings["max_tokens"], output_path=output_path, k_max=k_max,
                                          progress=progress, estimate=estimate,
                                          memory_mb=DEFAULT_EXACT_MEMORY_MB if memory_mb is None else memory_mb)
    finally:
        model.train(was_training)
    estimates = passk_estimates(counts, powers_of_two(k_max), seed=seed)
    return EvalResult(task=_task_name(task, examples), counts=counts, curve={k: e.value for k, e in estimates.items()},
                      intervals={k: (e.lo, e.hi) for k, e in estimates.items()}, num_generated=len(rows),
                      num_resumed=0, seconds=seconds, output_path=Path(output_path) if output_path else None,
                      rows=None if output_path else rows, settings=settings)
