"""``verify_math``: binary correctness of a math completion against a gold answer.

Pipeline (each stage documented in docs/tasks.md, "Hostile-input policy"):

1. coerce the completion to text (``bytes`` decoded with ``errors="replace"``, TRL message lists
   flattened); empty -> 0.0;
2. extract the final answer (:func:`grae.rewards.extract.extract_math_answer`: last ``\\boxed{}``, else
   ``<answer>`` tag, else a final-answer line); none -> 0.0; longer than :data:`MAX_ANSWER_CHARS` -> 0.0;
3. **fast path** (no sympy, microseconds): identical after whitespace/``\\left``/``\\dfrac``
   normalisation -> 1.0; both plain numbers (integers, decimals, ``a/b``, ``\\frac{a}{b}``, ``\\frac12``: the
   grammar of :mod:`grae.rewards.numbers`) -> exact rational comparison, 1.0 if equal, else 0.0, however near
   (``0.30000000000000004`` is not 0.3): the tolerance is exact equality, and math-verify is never asked about two
   numbers;
4. **slow path**: ``math_verify.parse`` + ``math_verify.verify`` (decimals replaced by the rationals they write, so
   that math-verify's 6-decimal float rounding never applies: :mod:`grae.rewards._math_worker`; with math_verify's own
   ``signal``-based timeouts disabled) in a persistent worker process with a hard deadline of
   ``timeout`` seconds (:mod:`grae.rewards._pool`); on timeout 0.0 and ``stats()["timeouts"] += 1``.
   Definite results are cached per ``(answer, gold)``, and so are time-outs (with the time allowed):
   the same hostile answer against the same gold costs one time-out, not one per sample
   (``stats()["timeout_cache_hits"]``); a later call allowed more time tries again.

:func:`verify_math_batch` verifies a batch on the whole worker pool at once (identical pairs once).

Gold answers may be bare (``"\\frac{1}{2}"``, ``"$0.5$"``) or contain ``\\boxed{}`` (a MATH solution),
in which case the last box is used.
"""

from __future__ import annotations

import os
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from typing import Any

from grae.rewards import _pool, _stats
from grae.rewards.extract import clean_answer, completion_text, extract_boxed, extract_math_answer
from grae.rewards.numbers import read_number

#: Extracted answers (and gold answers) longer than this are not parsed: the prediction scores 0.0
#: (``stats()["rejected"]``); an over-long gold is only compared as an exact string.
MAX_ANSWER_CHARS = 1_000
#: Size of the ``(answer, gold) -> bool`` cache (GRPO groups repeat answers a lot).
CACHE_SIZE = 65_536
#: Default per-call timeout (seconds) of :func:`verify_math`.
DEFAULT_TIMEOUT = 5.0
#: Remember time-outs per ``(answer, gold)`` (off only to measure what the cache saves: bench/bench_verify_batch.py).
CACHE_TIMEOUTS = True

#: ``(answer, gold)`` → ``True``/``False`` (definite), or the seconds a call was allowed before it timed out
_cache: OrderedDict[tuple[str, str], bool | float] = OrderedDict()
_cache_lock = threading.Lock()


def _cache_get(key: tuple[str, str]) -> bool | float | None:
    with _cache_lock:
        value = _cache.get(key)
        if value is not None:
            _cache.move_to_end(key)
        return value


def _cache_put(key: tuple[str, str], value: bool | float) -> None:
    with _cache_lock:
        _cache[key] = value
        _cache.move_to_end(key)
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)


def clear_cache() -> None:
    """Forget cached ``(answer, gold)`` results."""
    with _cache_lock:
        _cache.clear()


# --- fast path -------------------------------------------------------------------------------------

_SPACING_RE = re.compile(r"\\left(?![A-Za-z])|\\right(?![A-Za-z])|\\[!,;: ]|\\displaystyle(?![A-Za-z])|~")
_MACRO_SPACE_RE = re.compile(r"(\\[A-Za-z]+)\s+(?=[A-Za-z])")
_WS_RE = re.compile(r"\s+")
#: two digit runs apart by what is not a thousands separator: spaces of any width (``4 2``, ``1\u00a0000``), an
#: apostrophe, zero-width characters, LaTeX spacing (its thin space between groups of three, ``1\\,000``, aside:
#: :data:`grae.rewards.numbers.THOUSANDS_SEPARATORS`)
_SPLIT_DIGITS_RE = re.compile(r"\d(?:\s|['\u2019\u200b\u200c\u200d\u2060\ufeff~]|\\[,;:! ])+\d")
_THIN_SPACE_THOUSANDS_RE = re.compile(r"(?<=\d)\\,(?=\d{3}(?!\d))")


def normalize_latex(s: str) -> str:
    """Conservative normalisation for the exact-match fast path: drops ``$``, ``\\left``/``\\right``,
    LaTeX spacing commands and whitespace (keeping the one space that separates ``\\pi r``),
    ``\\dfrac``/``\\tfrac`` -> ``\\frac``, and a trailing period. Never changes the meaning."""
    s = s.replace("$", "")
    s = _SPACING_RE.sub(" ", s)
    s = s.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = _MACRO_SPACE_RE.sub(lambda m: m.group(1) + "\x00", s)
    s = _WS_RE.sub("", s).replace("\x00", " ")
    return s.rstrip(".")


def parse_number(s: str) -> Fraction | None:
    """Exact value of a plain number in normalised form (``-12``, ``0.5``, ``.5``, ``3/4``, ``\\frac{3}{4}``,
    ``\\frac34``, ``-\\frac{1}{2}``, ``1,234``, ``1.5e-3``, ``1.5\\times10^{-3}``, ``2^{10}``, ``50\\%``: the grammar
    of :mod:`grae.rewards.numbers`), else ``None``. At most 40 digits per part."""
    return read_number(s)


def canonical_answer(answer: str | None) -> str | None:
    """A canonical form of a parsed final answer, so that answers the fast path calls equal compare equal
    as strings: :func:`clean_answer`, :func:`normalize_latex`, and a plain number as its exact value
    (``"0.50"``, ``"1/2"``, ``"\\frac{1}{2}"`` → ``"1/2"``). ``None`` (unparsable) and an empty answer give None."""
    if answer is None:
        return None
    from grae.rewards.extract import clean_answer

    s = normalize_latex(clean_answer(str(answer)))
    if not s:
        return None
    value = parse_number(s)
    return s if value is None else str(value)


def fast_compare(pred: str, gold: str) -> bool | None:
    """``True``/``False`` when decidable without sympy, ``None`` to defer to math_verify. An answer whose digits are
    split by what is not a thousands separator (``4 2``, ``1'000``) is two numbers, never one: False (math-verify
    reads ``4 2`` as a product). Two numbers are decided here by their exact values, however near."""
    if _SPLIT_DIGITS_RE.search(_THIN_SPACE_THOUSANDS_RE.sub("", pred)):
        return False
    a, b = normalize_latex(pred), normalize_latex(gold)
    if a and a == b:
        return True
    x, y = parse_number(a), parse_number(b)
    if x is None or y is None:
        return None
    return x == y


# --- gold answers ----------------------------------------------------------------------------------


def number_answer(value: Any) -> str | None:
    """A completion that is a finite real number (``42``, ``0.5``, a numpy scalar; not a bool) as answer text,
    in :func:`gold_answer`'s form: ``verify_math(42, "42")`` is 1.0. None for anything else."""
    import math
    import numbers

    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    number = int(value) if isinstance(value, numbers.Integral) else float(value)
    if isinstance(number, float) and not math.isfinite(number):
        return None
    return gold_answer(number)


def gold_answer(gold: Any) -> str:
    """The comparable form of a gold answer: last ``\\boxed{}`` if it has one, else the cleaned string."""
    text = completion_text(gold) if not isinstance(gold, (int, float)) else repr(gold)
    if isinstance(gold, float) and gold.is_integer():
        text = str(int(gold))
    boxed = extract_boxed(text) if "\\boxed" in text or "\\fbox" in text else None
    return clean_answer(boxed if boxed is not None else text)


# --- slow path -------------------------------------------------------------------------------------


def _verify_in_process(pred: str, gold: str) -> bool | None:
    """math_verify in this process without any timeout (``timeout=None`` or non-POSIX), as the worker runs it."""
    import logging

    from math_verify import parse, verify

    from grae.rewards._math_worker import check

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    try:
        return check(parse, verify, pred, gold)
    except Exception:  # noqa: BLE001
        return None


def verify_math(completion: Any, gold: Any, *, timeout: float | None = DEFAULT_TIMEOUT,
                extract: Callable[[str], str | None] = extract_math_answer) -> float:
    """1.0 if the final answer of ``completion`` equals ``gold`` mathematically, else 0.0.

    Args:
        completion: model output: ``str``, ``bytes`` (decoded with ``errors="replace"``) or a TRL
            conversational completion (``[{"role": "assistant", "content": ...}]``).
        gold: reference answer, bare (``"\\frac{1}{2}"``) or containing ``\\boxed{}``.
        timeout: hard wall-clock bound (seconds) on the math_verify part of this call; works from any
            thread. ``None`` or ``<= 0`` runs math_verify in-process without a bound (only for trusted
            inputs). Waiting for a free worker (more concurrent callers than workers) or for a worker's
            first start is not counted.
        extract: completion text → its final answer (None: it has none); default the math rules of
            :func:`grae.rewards.extract.extract_math_answer` (a dataset task's ``answer_extraction`` passes
            its own, :mod:`grae.data.answers`).

    Never raises on any input; counters in :func:`grae.rewards.stats`.
    """
    _stats.incr("calls")
    try:
        number = number_answer(completion)
        text = completion_text(completion) if number is None else number
        if not text.strip():
            _stats.incr("rejected")
            return 0.0
        pred = extract(text) if number is None else number  # a bare number is the answer itself
        if pred is None:
            _stats.incr("no_answer")
            return 0.0
        if len(pred) > MAX_ANSWER_CHARS:
            _stats.incr("rejected")
            return 0.0
        gold_s = gold_answer(gold)
        if not gold_s:
            _stats.incr("errors")
            return 0.0
        decided = fast_compare(pred, gold_s)
        if decided is not None:
            _stats.incr("fast_path")
            return float(decided)
        if len(gold_s) > MAX_ANSWER_CHARS:
            return 0.0  # exact match was tried above
        key = (pred, gold_s)
        cached = _cache_get(key)
        if isinstance(cached, bool):
            _stats.incr("cache_hits")
            return float(cached)
        if cached is not None and timeout is not None and 0 < timeout <= cached:  # timed out with as much time
            _stats.incr("timeout_cache_hits")
            return 0.0
        _stats.incr("slow_path")
        if timeout is None or timeout <= 0 or os.name != "posix":
            result = _verify_in_process(pred, gold_s)
            status = "ok" if result is not None else "error"
        else:
            status, result = _pool.get_pool().verify(pred, gold_s, float(timeout))
    except _pool.WorkerStartError:
        raise  # infrastructure failure, not a property of the input: fail loudly
    except Exception:  # noqa: BLE001 - never raise on hostile input
        _stats.incr("errors")
        return 0.0
    if status == "timeout":
        _stats.incr("timeouts")
        if CACHE_TIMEOUTS:
            _cache_put(key, float(timeout))
        return 0.0
    if status != "ok" or result is None:
        _stats.incr("errors")
        return 0.0
    _cache_put(key, bool(result))
    return float(result)


def verify_math_batch(completions: Sequence[Any], golds: Sequence[Any], *, timeout: float | None = DEFAULT_TIMEOUT,
                      workers: int | None = None,
                      extract: Callable[[str], str | None] = extract_math_answer) -> list[float]:
    """:func:`verify_math` of each ``(completion, gold)`` (answers read by ``extract``), on ``workers`` threads
    at once (default: the worker pool's size, so every math_verify process is busy); identical pairs are
    verified once."""
    if len(completions) != len(golds):
        raise ValueError(f"golds: {len(golds)} for {len(completions)} completions")
    keys = [_pair_key(c, g, i) for i, (c, g) in enumerate(zip(completions, golds))]
    first = {key: i for i, key in reversed(list(enumerate(keys)))}  # key → its first sample
    unique = list(first)
    threads = max(1, min(workers or _pool.get_pool().max_workers, len(unique)))

    def one(key: tuple) -> float:
        i = first[key]
        return verify_math(completions[i], golds[i], timeout=timeout, extract=extract)

    if threads == 1:
        scores = {key: one(key) for key in unique}
    else:
        with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="grae-verify") as ex:
            scores = dict(zip(unique, ex.map(one, unique)))
    return [scores[key] for key in keys]


def _pair_key(completion: Any, gold: Any, index: int) -> tuple:
    """What makes two verifications the same; a pair that cannot be read is its own (verify_math scores it 0)."""
    try:
        number = number_answer(completion)
        return (completion_text(completion) if number is None else ("#number", number), gold_answer(gold))
    except Exception:  # noqa: BLE001
        return ("#unreadable", index)
