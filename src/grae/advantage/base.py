"""Estimator protocol, input policy and the string-keyed registry.

Every estimator is called the same way::

    est = get_estimator("agrae", alpha=1.0)
    out = est(rewards, group_ids)       # rewards [N] float, group_ids [N] int
    out.advantages                      # [N] sequence-level advantages
    out.weights                         # [N] 0 for samples the algorithm drops, else 1
    out.metrics                         # dict[str, float]

An estimator that needs more than rewards declares it in ``requires`` (a subset of
:data:`CONTEXT_FIELDS`) and is called with ``est(rewards, group_ids, context={...})``; the base
validates the declared fields (``[N]`` each) and passes exactly those to ``compute`` as keywords.
Estimators that declare nothing are called, and compute, exactly as before.

Input policy (the same for every estimator, see docs/estimators.md):

* ``NaN`` reward = "missing / not applicable" (TRL turns a reward function's ``None`` into NaN):
  the sample is excluded from every statistic and gets advantage 0 and weight 0;
  ``metrics["n_missing_rewards"]`` counts them.
* ``±inf`` rewards, non-1-D or mismatched shapes, non-integer group ids: ``ValueError`` naming
  the field and the fix.
* Huge finite rewards: ``|r| > REWARD_LIMIT`` (1e30) is refused like ``±inf``. Training runs in
  float32 (max ≈ 3.4e38): a reward near it overflows to inf on conversion, in a group sum (RLOO's
  leave-one-out mean) or in a variance (GRPO's std, whose inf would silently give the group advantage
  0). Below the limit every estimator computes in float64 and returns finite advantages in float32
  (``tests/test_integrity_run.py::test_huge_finite_rewards_give_finite_advantages``).
  :func:`grae.rewards.safe_reward` treats such a value as a contained fault, as it does ±inf.
* Rewards outside [0, 1] are an error for estimators that read the group mean as a success
  rate p (A-GRAE, the focused variants), rewards other than 0 and 1 for those that optimise
  pass@k over pass/fail outcomes (``passk``); every other estimator accepts any finite reward.
* Groups need not be contiguous nor of equal size. A group with one valid sample has no
  group-relative baseline: mean-centred estimators give it advantage 0 (verl instead returns the
  raw reward there).
* An empty batch returns empty tensors.
"""

from __future__ import annotations

import inspect
import math
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np
import torch
from torch import Tensor

from grae.groups import Groups
from grae.metrics import batch_diagnostics

#: Per-sample context an engine may supply besides (rewards, group_ids); every field is ``[N]``.
CONTEXT_FIELDS: dict[str, str] = {
    "logprob_sum": "Σ_t log π_old(y_t | x, y_<t): the sequence log-prob under the rollout policy",
    "logprob_mean": "logprob_sum / |y|: the length-normalised sequence log-prob",
    "answer_id": "the verifier's canonical parsed answer as an integer id, −1 when unparsable",
    "prompt_key": "a stable integer key of the prompt, the same at every step (state across steps)",
}
_INT_FIELDS = frozenset({"answer_id", "prompt_key"})


def check_context_supported(estimator: Any, supplied: frozenset[str] | set[str], engine: str) -> None:
    """Raise one ``ValueError`` at construction when ``engine`` cannot supply what ``estimator`` (an
    estimator object or class, or :func:`describe`'s dict) ``requires``."""
    if isinstance(estimator, dict):  # describe(name)
        requires, name = estimator["requires"], estimator["name"]
    else:
        requires, name = getattr(estimator, "requires", frozenset()), getattr(estimator, "name", type(estimator).__name__)
    missing = sorted(set(requires) - set(supplied))
    if missing:
        raise ValueError(
            f"estimator: {name!r} requires context "
            f"{', '.join(missing)}, which {engine} does not supply (it supplies: "
            f"{', '.join(sorted(supplied)) or 'none'}); choose an estimator that needs only rewards."
        )


@dataclass(frozen=True)
class AdvantageResult:
    """What every estimator returns.

    Attributes:
        advantages: ``[N]`` sequence-level advantages (broadcast over a sample's tokens by the loss).
        weights: ``[N]`` per-sample loss weights; 0 drops a sample from the loss and its normaliser.
        metrics: diagnostics (common ones, see :func:`grae.metrics.batch_diagnostics`, plus the
            estimator's own under ``"<name>/..."``).
    """

    advantages: Tensor
    weights: Tensor
    metrics: dict[str, float] = field(default_factory=dict)


@runtime_checkable
class EstimatorLike(Protocol):
    """What ``GraeTrainer(estimator=…)`` and the verl adapter accept besides a registry name: every
    :class:`Estimator`, a :class:`~grae.advantage.CorrectedEstimator`, or an object of your own with

    * ``est(rewards, group_ids)`` — rewards ``[N]`` (NaN = missing), integer group ids ``[N]`` →
      :class:`AdvantageResult` (``advantages [N]``, ``weights [N]``, ``metrics``);
    * ``state_dict()`` / ``load_state_dict(state)`` — JSON-able state carried in checkpoints (``{}`` and
      a no-op for a stateless estimator);
    * ``name`` (logs, checkpoints) and ``params`` (its constructor parameters).
    """

    @property
    def name(self) -> str: ...

    @property
    def params(self) -> dict[str, Any]: ...

    def __call__(self, rewards: Any, group_ids: Any) -> AdvantageResult: ...

    def state_dict(self) -> dict[str, Any]: ...

    def load_state_dict(self, state: dict[str, Any]) -> None: ...


#: the largest reward magnitude an estimator accepts (module docstring: huge finite rewards)
REWARD_LIMIT = 1e30


class Estimator:
    """Base class. Subclasses implement :meth:`compute`; the base owns validation and metrics."""

    name: ClassVar[str] = ""
    #: True when the group mean is read as a success rate p ∈ [0, 1] (√p and √(1−p) appear).
    requires_unit_interval: ClassVar[bool] = False
    #: True when rewards must be pass/fail, 0 or 1 (pass@k objectives).
    requires_binary: ClassVar[bool] = False
    #: Context fields (keys of :data:`CONTEXT_FIELDS`) this estimator reads; passed to ``compute``.
    requires: ClassVar[frozenset[str]] = frozenset()

    def __call__(self, rewards: Any, group_ids: Any, context: dict[str, Any] | None = None) -> AdvantageResult:
        rewards, group_ids = _validate(rewards, group_ids)
        ctx = _validate_context(self, context, rewards.shape[0])
        out_dtype = rewards.dtype if rewards.is_floating_point() else torch.float32
        valid = ~torch.isnan(rewards)  # [N]
        r = torch.where(valid, rewards, torch.zeros_like(rewards)).to(torch.float64)  # [N]
        if self.requires_unit_interval and bool(((r < 0) | (r > 1))[valid].any()):
            bad = rewards[valid & ((r < 0) | (r > 1))][0].item()
            raise ValueError(
                f"rewards: estimator {self.name!r} reads the group mean as a success rate p in [0, 1] "
                f"(it uses sqrt(p) and sqrt(1-p)), but got a reward of {bad}. Rescale rewards to "
                f"[0, 1] (e.g. binary accuracy), or use an estimator without this assumption "
                f"(grpo, dr_grpo, rloo, ngrpo, dgpo, ...)."
            )
        if self.requires_binary and bool(((r != 0) & (r != 1))[valid].any()):
            bad = rewards[valid & (r != 0) & (r != 1)][0].item()
            raise ValueError(
                f"rewards: estimator {self.name!r} optimises pass@k and needs pass/fail rewards (0 or 1), but got "
                f"{bad}. Use a binary verifier reward, or an estimator for graded rewards (grpo, rloo, pkpo, ...)."
            )
        if r.numel() == 0:
            empty = torch.zeros(0, dtype=out_dtype, device=rewards.device)
            return AdvantageResult(empty, empty.clone(), {"n_samples": 0.0})

        groups = Groups(group_ids, valid)
        advantages, weights, own_metrics = self.compute(r, groups, **ctx)  # [N], [N] | None, dict
        weights = torch.ones_like(r) if weights is None else weights.to(torch.float64)
        advantages = torch.where(valid, advantages, torch.zeros_like(advantages))
        weights = torch.where(valid, weights, torch.zeros_like(weights))
        advantages = advantages * (weights > 0)  # a dropped sample never carries an advantage

        metrics = batch_diagnostics(r, groups, advantages, weights)
        metrics["n_missing_rewards"] = float((~valid).sum())
        metrics.update({f"{self.name}/{k}": float(v) for k, v in own_metrics.items()})
        return AdvantageResult(advantages.to(out_dtype), weights.to(out_dtype), metrics)

    def compute(self, rewards: Tensor, groups: Groups) -> tuple[Tensor, Tensor | None, dict]:
        """Advantages ``[N]``, weights ``[N]`` (or None = all ones) and own metrics.

        ``rewards`` is float64 with missing entries set to 0 and marked invalid in ``groups``;
        an estimator with ``requires`` also takes those fields as keyword arguments (``[N]`` each).
        """
        raise NotImplementedError

    # -- state (for estimators that adapt across steps) ---------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        _require_mapping(self, state)
        if state:
            raise ValueError(f"estimator {self.name!r} is stateless; got state keys {sorted(state)}")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Every estimator's own ``load_state_dict`` first checks that it was handed a mapping."""
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("load_state_dict")
        if own is not None and not getattr(own, "_checks_mapping", False):
            cls.load_state_dict = _takes_a_mapping(own)  # type: ignore[method-assign]

    @property
    def params(self) -> dict[str, Any]:
        """The constructor parameters this estimator was built with."""
        return {p: getattr(self, p) for p in _param_names(type(self))}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params.items())
        return f"{type(self).__name__}({args})"


def _require_mapping(estimator: Any, state: Any) -> None:
    """One ``ValueError`` line for a state that is not a mapping (None, a list, a path), instead of a
    ``TypeError: 'NoneType' object is not iterable`` from inside ``load_state_dict``."""
    from collections.abc import Mapping

    if not isinstance(state, Mapping):
        raise ValueError(f"state_dict: expected the mapping that {type(estimator).__name__}.state_dict() returns, "
                         f"got {type(state).__name__}")


def _takes_a_mapping(load):
    """``load_state_dict`` that first checks its state with :func:`_require_mapping`."""
    import functools

    @functools.wraps(load)
    def checked(self, state):
        _require_mapping(self, state)
        return load(self, state)

    checked._checks_mapping = True  # type: ignore[attr-defined]
    return checked


def check(condition: bool, field_name: str, message: str) -> None:
    """Raise ``ValueError`` naming the offending parameter when ``condition`` is false."""
    if not condition:
        raise ValueError(f"{field_name}: {message}")


def _validate_context(est: Estimator, context: dict[str, Any] | None, n: int) -> dict[str, Tensor]:
    """The declared context fields as ``[N]`` tensors (float64 log-probs, int64 ids)."""
    out: dict[str, Tensor] = {}
    for key in sorted(est.requires):
        if context is None or key not in context or context[key] is None:
            raise ValueError(f"context.{key}: estimator {est.name!r} requires it ({CONTEXT_FIELDS[key]}); "
                             f"pass context={{'{key}': [N] tensor, ...}}.")
        x = _as_tensor(context[key], f"context.{key}")
        if tuple(x.shape) != (n,):
            raise ValueError(f"context.{key}: shape {tuple(x.shape)} does not match rewards ({n},); one value per sample.")
        if key in _INT_FIELDS:
            if x.is_floating_point() and not bool((x == x.round()).all()):
                raise ValueError(f"context.{key}: must be integers, got non-integer values.")
            x = x.long()
        else:
            x = x.to(torch.float64)
            if not bool(torch.isfinite(x).all()):
                raise ValueError(f"context.{key}: contains NaN or ±inf; log-probs must be finite.")
        out[key] = x
    return out


def _validate(rewards: Any, group_ids: Any) -> tuple[Tensor, Tensor]:
    rewards = _as_tensor(rewards, "rewards")
    group_ids = _as_tensor(group_ids, "group_ids")
    if rewards.dim() != 1:
        raise ValueError(f"rewards: expected a 1-D tensor [N] of sequence rewards, got shape {tuple(rewards.shape)}; "
                         "sum token-level rewards over the response first (rewards.sum(-1)).")
    if group_ids.shape != rewards.shape:
        raise ValueError(f"group_ids: shape {tuple(group_ids.shape)} does not match rewards {tuple(rewards.shape)}; "
                         "pass one group id per sample.")
    if rewards.is_complex():  # a cast would drop the imaginary part with a mere warning
        raise ValueError(f"rewards: expected real numbers, got dtype {rewards.dtype}; a reward is one real score per "
                         "sample (take .real or abs() in the reward function if that is what it means)")
    if not rewards.is_floating_point():
        rewards = rewards.to(torch.float32)
    if bool(torch.isinf(rewards).any()):
        raise ValueError("rewards: contain ±inf. Clip or fix the reward function; use NaN (or None in TRL) "
                         "for 'no reward', which grae excludes from the statistics.")
    if bool((rewards.abs() > REWARD_LIMIT).any()):
        raise ValueError(f"rewards: contain {rewards[rewards.abs() > REWARD_LIMIT][0].item():g}, beyond ±{REWARD_LIMIT:g} "
                         "(training runs in float32, where such values overflow). Rescale or clip the reward "
                         "function; use NaN (or None in TRL) for 'no reward'.")
    if group_ids.dtype == torch.bool or group_ids.is_complex():
        raise ValueError(f"group_ids: expected integer ids, got dtype {group_ids.dtype}.")
    if group_ids.is_floating_point():
        if not bool(torch.isfinite(group_ids).all()) or not bool((group_ids == group_ids.round()).all()):
            raise ValueError("group_ids: must be integers (one id per prompt); got non-integer values. "
                             "Map prompts to ids first, e.g. torch.unique(keys, return_inverse=True)[1].")
        group_ids = group_ids.long()
    return rewards, group_ids


def _as_tensor(x: Any, field_name: str) -> Tensor:
    if isinstance(x, Tensor):
        if x.is_meta:  # shape only: any arithmetic on it raises deep inside torch
            raise ValueError(f"{field_name}: a tensor on the meta device has a shape but no values; pass one with "
                             "data (on the cpu or a GPU)")
        return x.detach()
    try:
        arr = np.asarray([np.nan if v is None else v for v in x] if isinstance(x, (list, tuple)) else x)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{field_name}: cannot convert {type(x).__name__} to a tensor ({err}).") from None
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{field_name}: expected numbers, got values of dtype {arr.dtype} ({type(x).__name__}).")
    return torch.from_numpy(np.ascontiguousarray(arr))


# -- registry ---------------------------------------------------------------------------------

_REGISTRY: dict[str, type[Estimator]] = {}


def register(name: str):
    """Class decorator: make an :class:`Estimator` subclass available as ``get_estimator(name)``."""

    def deco(cls: type[Estimator]) -> type[Estimator]:
        if name in _REGISTRY:
            raise ValueError(f"estimator {name!r} is already registered ({_REGISTRY[name].__name__})")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


def names() -> list[str]:
    """Registered estimator names, sorted."""
    return sorted(_REGISTRY)


def get_estimator(name: str, **params: Any) -> Estimator:
    """Build the estimator registered as ``name`` with keyword ``params``.

    Raises:
        KeyError: unknown name (the message lists the registered ones).
        TypeError: unknown parameter (the message lists the estimator's parameters and defaults).
        ValueError: a parameter out of range (the message names it).
    """
    if name not in _REGISTRY:
        raise KeyError(f"unknown estimator {name!r}; registered estimators: {', '.join(names())}")
    cls = _REGISTRY[name]
    unknown = sorted(set(params) - set(_param_names(cls)))
    if unknown:
        raise TypeError(
            f"estimator {name!r} has no parameter(s) {', '.join(unknown)}; "
            f"its parameters are: {describe(name)['signature']}"
        )
    defaults = describe(name)["defaults"]
    numeric = [key for key in params if isinstance(defaults[key], (int, float)) and not isinstance(defaults[key], bool)]
    for key in numeric:  # a parameter whose default is a number takes a number ...
        if not isinstance(params[key], (int, float)) or isinstance(params[key], bool):
            raise TypeError(f"{key}: expected a number (default {defaults[key]!r}), got {params[key]!r}")
    estimator = cls(**params)  # ... in the constructor's range (its message names the rule) ...
    for key in numeric:  # ... and finite, where the constructor does not say so itself
        if not math.isfinite(params[key]):
            raise ValueError(f"{key}: must be a finite number, got {params[key]!r}")
    return estimator


def describe(name: str) -> dict[str, Any]:
    """Name, class, parameter defaults and the summary (the docstring's first paragraph, on one line) of a
    registered estimator."""
    cls = _REGISTRY[name]
    defaults = {p.name: p.default for p in inspect.signature(cls).parameters.values()}
    return {
        "name": name,
        "class": cls.__name__,
        "defaults": defaults,
        "signature": ", ".join(f"{k}={v!r}" for k, v in defaults.items()) or "(none)",
        "summary": _plain(inspect.cleandoc(cls.__doc__ or "").split("\n\n")[0]),
        "requires": sorted(cls.requires),
    }


def _plain(text: str) -> str:
    """reST as plain text on one line: ``:mod:`x``` and ````x```` become ``x``."""
    return " ".join(re.sub(r":\w+:`([^`]+)`", r"\1", text).replace("``", "").split())


def _param_names(cls: type) -> list[str]:
    return list(inspect.signature(cls).parameters)  # the constructor's, without self
