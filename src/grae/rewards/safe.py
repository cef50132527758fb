"""``safe_reward``: isolate per-sample faults of a (user) reward function.

TRL (``GRPOTrainer._calculate_rewards``) calls every reward function once per batch as
``f(prompts=..., completions=..., completion_ids=..., **dataset_columns, trainer_state=..., log_extra=...,
log_metric=...)`` and aborts the whole training step if it raises. A ``None`` reward is turned into NaN
and treated as "not applicable" for that sample, so a per-sample fallback of ``None`` keeps the rest of the
batch usable.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import math
import numbers
import threading
from collections.abc import Callable
from typing import Any

from grae.rewards import _stats
from grae.supervision.beacon import leave_if_copy, reward_call


class RewardFunctionError(RuntimeError):
    """A wrapped reward function failed on every sample of a call."""


def _callable_name(fn: Callable) -> str:
    while isinstance(fn, functools.partial):
        fn = fn.func
    return getattr(fn, "__name__", type(fn).__name__)


#: a returned value that is not a reward: ±inf or beyond ±REWARD_LIMIT (1e30), or not a number (a string, a list, ...)
BAD = object()


def _reward(value: Any) -> Any:
    """A finite float, ``None`` for "no reward" (``None`` or NaN, as TRL reads them), or :data:`BAD`."""
    if value is None:
        return None
    if isinstance(value, numbers.Real):
        from grae.advantage.base import REWARD_LIMIT  # beyond it float32 training overflows: a fault, as ±inf

        try:
            value = float(value)
        except OverflowError:  # an int beyond float64
            return BAD
        return None if math.isnan(value) else value if abs(value) <= REWARD_LIMIT else BAD
    return BAD


def _as_list(out: Any, n: int) -> list | None:
    """The output as ``n`` rewards (:data:`BAD` where one is not a reward), or ``None`` if it is not a
    list of ``n`` (wrong length, not a sequence)."""
    if hasattr(out, "tolist") and not isinstance(out, (list, tuple)):
        out = out.tolist()  # numpy array / torch tensor
    if not isinstance(out, (list, tuple)) or len(out) != n:
        return None
    return [_reward(v) for v in out]


def _not_a_reward(out: Any) -> TypeError:
    return TypeError(f"returned {out!r}; a reward is a finite number, or None for 'no reward'")


def _slice_kwargs(kwargs: dict[str, Any], n: int, i: int) -> dict[str, Any]:
    """Per-sample view: every list/tuple of length ``n`` (prompts, completions, completion_ids, dataset
    columns, environments) is cut to ``[x[i]]``; everything else (``trainer_state``, ``log_metric``, ...)
    is passed unchanged."""
    return {k: [v[i]] if isinstance(v, (list, tuple)) and len(v) == n else v for k, v in kwargs.items()}


def _run_with_timeout(fn: Callable[[], Any], timeout: float | None, name: str = "") -> tuple[str, Any]:
    """``("ok", value)``, ``("error", exc)`` or ``("timeout", None)``.

    With a timeout the call runs in a daemon thread; a call that overruns is *abandoned*, not killed
    (Python cannot kill threads): it keeps its CPU until it returns. Use process isolation (as
    :func:`grae.rewards.verify_math` does) for code that can hang forever.
    """
    if timeout is None:
        try:
            return "ok", fn()
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - sys.exit() in a reward is its failure, not the run's end
            return "error", exc
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001
            box["error"] = exc
        leave_if_copy(name)  # a fork in the call: in the copy, only this thread goes on

    thread = threading.Thread(target=target, daemon=True, name="grae-safe-reward")
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return "timeout", None
    if "error" in box:
        return "error", box["error"]
    return "ok", box.get("value")


class SafeReward:
    """Callable wrapper returned by :func:`safe_reward` (synchronous reward functions)."""

    def __init__(self, fn: Callable, fallback: float | None = None, timeout: float | None = None, name: str | None = None):
        if timeout is not None and timeout <= 0:
            raise ValueError(f"timeout must be > 0 seconds or None, got {timeout}")
        self.fn = fn
        self.fallback = fallback
        self.timeout = timeout
        self.__name__ = name or _callable_name(fn)
        self.failures = 0
        self.timeouts = 0
        #: raise :class:`RewardFunctionError` when a call fails on every sample. A multi-process engine
        #: turns this off and decides on the gathered batch instead (one rank must not stop alone).
        self.raise_on_total_failure = True
        #: (samples, failures, timeouts, first failure) of the last call
        self.last_call: tuple[int, int, int, BaseException | None] = (0, 0, 0, None)
        functools.update_wrapper(self, fn, assigned=("__doc__", "__module__", "__qualname__"), updated=())

    def _count(self, failures: int, timeouts: int, n: int, kwargs: dict[str, Any]) -> None:
        if failures:
            self.failures += failures
            _stats.incr(f"safe_reward/{self.__name__}/failures", failures)
        if timeouts:
            self.timeouts += timeouts
            _stats.incr(f"safe_reward/{self.__name__}/timeouts", timeouts)
        log_metric = kwargs.get("log_metric")
        if callable(log_metric) and n:
            try:
                log_metric(f"{self.__name__}/failure_frac", failures / n)
            except Exception:  # noqa: BLE001 - logging must not break rewards
                pass

    def _finish(self, n: int, failures: int, timeouts: int, first: BaseException | None, kwargs: dict[str, Any]) -> None:
        self._count(failures, timeouts, n, kwargs)
        self.last_call = (n, failures, timeouts, first)
        if failures == n and self.raise_on_total_failure:
            self._raise_all_failed(n, first, timeouts)

    def _from_batch(self, out: Any, n: int, kwargs: dict[str, Any]) -> list[float | None] | None:
        """Rewards from a whole-batch call: bad values (±inf, non-numbers) become ``fallback`` and count
        as failures; ``None`` when the output is not a list of ``n`` (the caller retries per sample)."""
        rewards = _as_list(out, n)
        if rewards is None:
            return None
        bad = [i for i, v in enumerate(rewards) if v is BAD]
        first = _not_a_reward(list(out)[bad[0]]) if bad else None
        self._finish(n, len(bad), 0, first, kwargs)
        return [self.fallback if v is BAD else v for v in rewards]

    def first_failure(self, first: BaseException | None) -> str:
        """The first failure of a call as its error line says it (``first`` None: every failure was a timeout)."""
        return f"{type(first).__name__}: {first}" if first is not None else f"timed out after {self.timeout}s"

    def _raise_all_failed(self, n: int, first: BaseException | None, timeouts: int) -> None:
        what = self.first_failure(first)
        raise RewardFunctionError(
            f"reward function {self.__name__!r} failed on all {n} samples of this call "
            f"({timeouts} timed out); first failure: {what}. A reward function that never works is a bug, "
            "not noise, so training is stopped instead of continuing on fallback rewards."
        ) from first

    def __call__(self, prompts: Any = None, completions: Any = None, **kwargs: Any) -> list[float | None]:
        n = len(completions) if completions is not None else 0
        # a supervised grae train knows which reward runs, and how long it may (samples × timeout, one at a time)
        with reward_call(self.__name__, n * self.timeout if self.timeout is not None else None):
            return self._call(n, {"prompts": prompts, "completions": completions, **kwargs})

    def _call(self, n: int, kwargs: dict[str, Any]) -> list[float | None]:
        if n == 0:
            return []
        if self.timeout is None:  # batch call first; isolate samples only if it fails
            status, out = _run_with_timeout(lambda: self.fn(**kwargs), None)
            rewards = self._from_batch(out, n, kwargs) if status == "ok" else None
            if rewards is not None:
                return rewards
        results: list[float | None] = []
        failures = timeouts = 0
        first: BaseException | None = None
        for i in range(n):
            sample = _slice_kwargs(kwargs, n, i)
            status, out = _run_with_timeout(lambda s=sample: self.fn(**s), self.timeout, self.__name__)
            value = _as_list(out, 1) if status == "ok" else None
            if value is None or value[0] is BAD:
                failures += 1
                timeouts += status == "timeout"
                if first is None and status == "error":
                    first = out
                elif first is None and status == "ok":
                    first = _not_a_reward(out)
                results.append(self.fallback)
            else:
                results.append(value[0])
        self._finish(n, failures, timeouts, first, kwargs)
        return results


class AsyncSafeReward(SafeReward):
    """Callable wrapper returned by :func:`safe_reward` for ``async`` reward functions."""

    async def __call__(self, prompts: Any = None, completions: Any = None, **kwargs: Any) -> list[float | None]:
        n = len(completions) if completions is not None else 0
        with reward_call(self.__name__, self.timeout):  # its samples run concurrently
            return await self._call_async(n, {"prompts": prompts, "completions": completions, **kwargs})

    async def _call_async(self, n: int, kwargs: dict[str, Any]) -> list[float | None]:
        if n == 0:
            return []
        if self.timeout is None:  # batch call first; isolate samples only if it fails
            try:
                out = await self.fn(**kwargs)
            except (Exception, SystemExit):  # noqa: BLE001
                out = None
            rewards = self._from_batch(out, n, kwargs)
            if rewards is not None:
                return rewards

        async def one(i: int) -> tuple[str, Any]:
            try:
                coro = self.fn(**_slice_kwargs(kwargs, n, i))
                out = await (asyncio.wait_for(coro, self.timeout) if self.timeout is not None else coro)
            except asyncio.TimeoutError:
                return "timeout", None
            except (Exception, SystemExit) as exc:  # noqa: BLE001
                return "error", exc
            value = _as_list(out, 1)
            if value is None or value[0] is BAD:
                return "error", _not_a_reward(out)
            return "ok", value[0]

        outcomes = await asyncio.gather(*(one(i) for i in range(n)))
        failures = sum(s != "ok" for s, _ in outcomes)
        timeouts = sum(s == "timeout" for s, _ in outcomes)
        first = next((v for s, v in outcomes if s == "error"), None)
        self._finish(n, failures, timeouts, first, kwargs)
        return [v if s == "ok" else self.fallback for s, v in outcomes]


def safe_reward(
    fn: Callable, fallback: float | None = None, timeout: float | None = None, *, name: str | None = None
) -> SafeReward:
    """Wrap a TRL-style reward function so that failures on some samples do not kill the training step.

    Args:
        fn: reward function ``f(prompts, completions, completion_ids, **columns) -> list[float | None]``
            (sync or ``async``).
        fallback: reward for a sample on which ``fn`` raised, timed out or returned something that is not
            a number/None. ``None`` (default) means "not applicable": TRL turns it into NaN and the sample
            is excluded from that reward's statistics (and from the advantage if every reward is NaN).
        timeout: seconds allowed **per sample**. When set, ``fn`` is called one sample at a time
            (``[x[i]]`` slices of every per-sample argument); a sample that overruns gets ``fallback``
            and its thread is abandoned (threads cannot be killed). When ``None``, ``fn`` is first called
            on the whole batch and only re-run per sample if that call raises or returns a malformed list.
        name: name for logging (default: ``fn.__name__``); TRL logs ``rewards/<name>/mean``.

    Failures are counted on the wrapper (``.failures``, ``.timeouts``), in :func:`grae.rewards.stats`
    (``safe_reward/<name>/failures``), and reported via TRL's ``log_metric`` as ``<name>/failure_frac``.
    If ``fn`` fails on **every** sample of a call, :class:`RewardFunctionError` is raised, naming it.
    """
    cls = AsyncSafeReward if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None)  # noqa: B004  (an object's __call__ method itself: async or not)
    ) else SafeReward
    return cls(fn, fallback=fallback, timeout=timeout, name=name)
