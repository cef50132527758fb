"""The advantage half of the verl plugin: verl's estimator call → grae estimator → verl's return.

verl 0.9.1 calls a registered estimator (generic branch of
``verl.trainer.ppo.ray_trainer.compute_advantage``) as::

    advantages, returns = fn(token_level_rewards=[bs, T], response_mask=[bs, T],
                             config=<algorithm config>, index=<np.ndarray of uid strings>)

on the driver, once per training step (per ``_step_once`` in the v1 trainer). This module

1. reads the estimator's parameters from ``config.grae`` (Hydra: ``+algorithm.grae.alpha=0.5``),
2. reduces ``token_level_rewards`` to sequence rewards by summing over the response (as verl's own
   outcome estimators do: ``scores = token_level_rewards.sum(-1)``); a row whose ``response_mask`` is
   all zero is verl's batch padding (the v1 trainer pads to a multiple of lcm(dp size, mini-batch × n)
   with rows that share one uid and reward 0, ``padding_utils.upsample_batch_to_divisible_size``): its
   reward is *missing*, so it never enters a batch statistic (A-GRAE's ω, AVSPO's ACR and τ, DGPO's
   weights) and gets advantage 0,
3. maps the ``uid`` strings to integer group ids (first-appearance order),
4. calls the cached grae estimator (one object per name + parameters, so stateful estimators keep
   their state across steps in the driver process),
5. handles dropped samples (grae weight 0), see :func:`drop_renorm_factor`,
6. returns ``A_i · response_mask`` as both advantages and returns (verl's outcome-estimator contract).

Options under ``algorithm.grae`` besides the estimator's own parameters:

* ``drop_renorm``: ``auto`` (default) | ``none`` | a verl ``loss_agg_mode``. See :func:`drop_renorm_factor`.
* ``reward_correction``: ``{mode: backward|forward, rho0: …, rho1: …}`` (noisy-verifier correction,
  :func:`grae.advantage.with_reward_correction`).
* ``metrics_path``: append one JSON line of estimator metrics per call to this file (verl gives an
  estimator no way to log metrics).
* ``resume_state``: ``require`` (default) | ``fresh``: what a stateful estimator does when verl
  resumes from a checkpoint that holds no grae state.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import time
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import Tensor

from grae.advantage import check_context_supported, describe, get_estimator, with_reward_correction
from grae.engines import STATE_FILE  # the estimator state file in verl's global_step_N/, as in TRL's
from grae.io import append_jsonl, atomic_write_json

logger = logging.getLogger("grae.engines.verl")

#: Estimator context verl supplies: none. verl 0.9.1's generic branch passes an estimator only
#: token_level_rewards, response_mask, index (a per-batch uuid, not a stable prompt key) and config.
VERL_CONTEXT: frozenset[str] = frozenset()
#: keys of ``algorithm.grae`` that are adapter options, not estimator parameters.
OPTION_KEYS = ("drop_renorm", "reward_correction", "metrics_path", "resume_state")
#: verl 0.9.1 ``agg_loss`` modes.
VERL_AGG_MODES = ("token-mean", "token-sum", "seq-mean-token-sum", "seq-mean-token-sum-norm", "seq-mean-token-mean")
RESUME_STATES = ("require", "fresh")

#: estimator cache: key (name + params + correction, JSON) → estimator object.
CACHE: dict[str, Any] = {}
#: estimator states read from a checkpoint, waiting for their estimator's first call: key → state.
PENDING_STATE: dict[str, dict] = {}
#: set by GraeCheckpointCallback: the checkpoint folder verl resumes from (None when starting fresh) and
#: the folder of per-step state snapshots (see :func:`write_snapshot`).
RESUME: dict[str, Any] = {"callback": False, "folder": None, "file_found": False, "snapshot_dir": None}
#: the state file format (checkpoint file and per-step snapshots)
STATE_FORMAT = 1
#: per-step snapshots kept (the newest ones; a checkpoint needs only its own step's)
SNAPSHOTS_KEPT = 3
#: metrics of the latest call (``grae.engines.verl.last_metrics()``).
LAST_METRICS: dict[str, Any] = {}
_warned: set[str] = set()


def reset() -> None:
    """Forget every cached estimator, pending state and resume record (tests, a new run)."""
    CACHE.clear()
    PENDING_STATE.clear()
    LAST_METRICS.clear()
    RESUME.update(callback=False, folder=None, file_found=False, snapshot_dir=None)
    _warned.clear()


# -- estimator state ----------------------------------------------------------------------------


def snapshot(global_step: int | None) -> dict[str, Any] | None:
    """The state of every stateful cached estimator (None when there is none), keyed by name + params."""
    estimators = {key: {"name": getattr(est, "name", ""), "state": est.state_dict()}
                  for key, est in CACHE.items() if est.state_dict()}
    return {"format": STATE_FORMAT, "global_step": global_step, "estimators": estimators} if estimators else None


def snapshot_path(global_step: int) -> str:
    return os.path.join(RESUME["snapshot_dir"], f"global_step_{global_step}.json")


def write_snapshot(global_step: int | None) -> None:
    """Write the states after step N's advantage call to ``<snapshot_dir>/global_step_N.json``.

    verl writes ``latest_checkpointed_iteration.txt`` *before* it calls the checkpoint callback's
    ``on_save``; a crash between the two leaves a checkpoint that verl resumes from but that holds no
    estimator state. The advantage call of step N precedes step N's checkpoint, so this snapshot
    exists before verl's tracker names step N, and the resume reads it when the checkpoint has no
    state file (:func:`grae.engines.verl.checkpoint.load_state`).
    """
    if global_step is None:
        return
    atomic_write_json(snapshot_path(global_step), snapshot(global_step))
    steps = sorted(int(name[len("global_step_"):-len(".json")]) for name in os.listdir(RESUME["snapshot_dir"])
                   if name.startswith("global_step_") and name.endswith(".json"))
    for old in steps[:-SNAPSHOTS_KEPT]:
        with contextlib.suppress(FileNotFoundError):
            os.remove(snapshot_path(old))


# -- options ------------------------------------------------------------------------------------


def _plain(value: Any) -> Any:
    """OmegaConf containers / verl BaseConfig / Mappings → plain Python."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(value, (DictConfig, ListConfig)):
            return OmegaConf.to_container(value, resolve=True)
    except ImportError:  # pragma: no cover - omegaconf ships with verl
        pass
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items() if k != "_target_"}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def read_options(name: str, config: Any) -> dict[str, Any]:
    """Split ``config.grae`` into estimator params and adapter options; validate both.

    Raises ``ValueError``/``TypeError`` naming the key and listing the valid ones.
    """
    section = None
    if config is not None:
        section = config.get("grae", None) if hasattr(config, "get") else getattr(config, "grae", None)
    raw = _plain(section) or {}
    if not isinstance(raw, dict):
        raise ValueError(f"algorithm.grae: expected a mapping of parameters, got {type(raw).__name__} ({raw!r})")
    params = {k: v for k, v in raw.items() if k not in OPTION_KEYS}
    check_context_supported(describe(name), VERL_CONTEXT, "verl's advantage call")
    defaults = describe(name)["defaults"]
    unknown = sorted(set(params) - set(defaults))
    if unknown:
        raise TypeError(
            f"algorithm.grae.{unknown[0]}: estimator {name!r} (verl name grae_{name}) has no parameter(s) "
            f"{', '.join(unknown)}; its parameters are: {describe(name)['signature']}; adapter options: {', '.join(OPTION_KEYS)}"
        )
    drop_renorm = raw.get("drop_renorm", "auto")
    if drop_renorm is None or drop_renorm is False:
        drop_renorm = "none"
    if drop_renorm not in ("auto", "none", *VERL_AGG_MODES):
        raise ValueError(f"algorithm.grae.drop_renorm: {drop_renorm!r}; valid: auto, none, {', '.join(VERL_AGG_MODES)}")
    correction = raw.get("reward_correction")
    if correction is not None and not isinstance(correction, dict):
        raise ValueError(f"algorithm.grae.reward_correction: expected {{mode, rho0, rho1}}, got {correction!r}")
    resume_state = raw.get("resume_state", "require")
    if resume_state not in RESUME_STATES:
        raise ValueError(f"algorithm.grae.resume_state: {resume_state!r}; valid: {', '.join(RESUME_STATES)}")
    return {"params": params, "drop_renorm": drop_renorm, "reward_correction": correction or None,
            "metrics_path": raw.get("metrics_path"), "resume_state": resume_state}


def cache_key(name: str, params: dict, correction: dict | None) -> str:
    return json.dumps({"name": name, "params": params, "reward_correction": correction}, sort_keys=True, default=str)


def get_cached_estimator(name: str, params: dict, correction: dict | None = None, *, resume_state: str = "require"):
    """The process-wide estimator for (name, params, correction); built, and restored from a
    pending checkpoint state, on first use."""
    key = cache_key(name, params, correction)
    est = CACHE.get(key)
    if est is not None:
        return est, key
    est = get_estimator(name, **params)
    if correction:
        est = with_reward_correction(est, **correction)
    stateful = bool(est.state_dict())
    if key in PENDING_STATE:
        est.load_state_dict(PENDING_STATE.pop(key))
        logger.info("grae: restored %s state from %s", name, RESUME["folder"])
    elif stateful and RESUME["folder"] is not None and resume_state == "require":
        where = os.path.join(RESUME["folder"], STATE_FILE)
        detail = (f"{where} holds state for other estimators/parameters ({', '.join(sorted(PENDING_STATE)) or 'none'})"
                  if RESUME["file_found"] else f"{where} does not exist (the checkpoint was not written with "
                  "trainer.checkpoint_callback_class=grae.engines.verl.checkpoint.GraeCheckpointCallback)")
        raise FileNotFoundError(
            f"resuming stateful estimator grae_{name} ({params}) from {RESUME['folder']}, but {detail}. "
            "Set +algorithm.grae.resume_state=fresh to restart its state from the defaults."
        )
    elif stateful and not RESUME["callback"] and "callback" not in _warned:
        _warned.add("callback")
        logger.warning(
            "grae: estimator grae_%s is stateful but trainer.checkpoint_callback_class is not "
            "grae.engines.verl.checkpoint.GraeCheckpointCallback: its state lives in this process only and "
            "restarts from the defaults when verl resumes from a checkpoint.", name)
    CACHE[key] = est
    return est, key


# -- the conversion -------------------------------------------------------------------------------


def group_ids_from_index(index: Any, n: int) -> Tensor:
    """verl's ``uid`` array (``np.ndarray`` of uuid strings, one per response) → ``LongTensor [n]``
    of group ids, numbered in order of first appearance."""
    if index is None:
        raise ValueError(
            "index: verl passed no 'uid' for this batch; grae estimators are group-relative and need the group of "
            "every response (verl's RL dataset sets non_tensor_batch['uid'] per prompt before rollout.n repeats)"
        )
    if isinstance(index, Tensor):
        index = index.tolist()
    values = list(np.asarray(index, dtype=object).reshape(-1))
    if len(values) != n:
        raise ValueError(f"index: {len(values)} uids for {n} responses")
    ids: dict[Any, int] = {}
    return torch.tensor([ids.setdefault(v, len(ids)) for v in values], dtype=torch.long)


def drop_renorm_factor(weights: Tensor, response_mask: Tensor, mode: str) -> float:
    """The factor that makes verl's loss normaliser count only the kept (weight > 0) samples.

    grae drops a sample (weight 0: PSR's wrong samples, NSR's correct ones, DGPO's collapsed groups,
    missing rewards) from the loss *and its normaliser*. A verl estimator can only return
    advantages, and verl's loss divides by all response tokens of the mini-batch (``token-mean``) or
    all sequences (``seq-mean-*``). Scaling every kept sample's advantage by

        token-mean:   Σ_i n_i / Σ_i w_i n_i         (n_i = response tokens of sample i)
        seq-mean-*:   #{i: n_i > 0} / Σ_i w_i [n_i > 0]
        token-sum:    1

    over the whole step's batch turns verl's normaliser into grae's (the clipped PPO loss is
    positively homogeneous in A, so the factor passes through the clip unchanged). It is exact when a
    step is one mini-batch (``ppo_mini_batch_size == train_batch_size``); with several mini-batches
    verl normalises each separately and the batch-level factor is exact only on average. The DGPO
    authors' released code does the same (``zero_mask_ratio``).
    """
    w = weights.to(torch.float64)
    n = response_mask.to(torch.float64).sum(-1)  # [bs]
    if mode == "token-sum":
        return 1.0
    per_sample = n if mode == "token-mean" else (n > 0).to(torch.float64)
    kept = float((w * per_sample).sum())
    total = float(per_sample.sum())
    return total / kept if kept > 0 else 1.0


def resolve_drop_renorm(mode: str, config: Any) -> tuple[str, str]:
    """``auto`` → the actor's ``loss_agg_mode`` read from the root of the Hydra config (the
    ``algorithm`` node verl passes keeps its parent); returns (mode, where it came from)."""
    if mode != "auto":
        return mode, "algorithm.grae.drop_renorm"
    root = None
    get_root = getattr(config, "_get_root", None)
    if callable(get_root):
        try:
            root = get_root()
        except Exception:  # pragma: no cover - defensive: not an OmegaConf node after all
            root = None
    if root is not None and root is not config:
        try:
            from omegaconf import OmegaConf

            value = OmegaConf.select(root, "actor_rollout_ref.actor.loss_agg_mode", default=None)
        except Exception:  # pragma: no cover
            value = None
        if value in VERL_AGG_MODES:
            return value, "actor_rollout_ref.actor.loss_agg_mode"
    return "token-mean", "default (verl's loss_agg_mode default; actor config not reachable from algorithm config)"


def current_step() -> int | None:
    """verl's global step on the driver (``SkipManager.step``, set by both trainers each step), or None."""
    try:
        from verl.utils.skip import SkipManager
    except Exception:
        return None
    step = getattr(SkipManager, "step", -1)
    return int(step) if step is not None and step >= 0 else None


def compute_grae_advantage(
    name: str,
    token_level_rewards: Tensor,
    response_mask: Tensor,
    index: Any = None,
    config: Any = None,
) -> tuple[Tensor, Tensor]:
    """``(advantages, returns)``, both ``[bs, T]`` = grae's ``A_i`` broadcast over the response and
    masked by ``response_mask`` (scaled by :func:`drop_renorm_factor` when samples are dropped)."""
    opts = read_options(name, config)
    est, key = get_cached_estimator(name, opts["params"], opts["reward_correction"], resume_state=opts["resume_state"])

    bs = token_level_rewards.shape[0]
    rewards = token_level_rewards.detach().sum(dim=-1).float().cpu()  # [bs], verl: scores = token_level_rewards.sum(-1)
    padding = response_mask.detach().cpu().sum(dim=-1) == 0  # [bs] verl's batch padding: no response token
    rewards[padding] = torch.nan  # missing: out of every statistic, advantage 0
    group_ids = group_ids_from_index(index, bs)  # [bs]
    result = est(rewards, group_ids)
    advantages = result.advantages  # [bs] float32
    if RESUME["snapshot_dir"] is not None and est.state_dict():
        write_snapshot(current_step())

    factor, mode, source = 1.0, "none", ""
    if opts["drop_renorm"] != "none" and bool((result.weights[~padding] != 1).any()):
        mode, source = resolve_drop_renorm(opts["drop_renorm"], config)
        factor = drop_renorm_factor(result.weights, response_mask.detach().cpu(), mode)
        advantages = (advantages.to(torch.float64) * result.weights.to(torch.float64) * factor).to(advantages.dtype)
        if source.startswith("default") and "renorm" not in _warned:
            _warned.add("renorm")
            logger.warning("grae: grae_%s dropped samples; renormalising advantages for verl loss_agg_mode=token-mean, "
                           "the %s. Set +algorithm.grae.drop_renorm=<your actor.loss_agg_mode> to be explicit.", name, source)

    mask = response_mask.to(device=token_level_rewards.device)
    dtype = token_level_rewards.dtype
    scores = advantages.to(device=token_level_rewards.device, dtype=dtype).unsqueeze(-1) * mask.to(dtype)

    step = current_step()
    metrics = {k: float(v) for k, v in result.metrics.items()}
    metrics["n_missing_rewards"] -= float(padding.sum())  # padding is not a missing reward
    metrics["verl/padding_rows"] = float(padding.sum())
    metrics["verl/drop_renorm_factor"] = factor
    LAST_METRICS.clear()
    LAST_METRICS.update({"estimator": f"grae_{name}", "step": step, "drop_renorm": mode, **metrics})
    if opts["metrics_path"]:
        _append_jsonl(opts["metrics_path"], {"time": time.time(), **LAST_METRICS})
    logger.debug("grae_%s step=%s %s", name, step, metrics)
    return scores, scores


def _append_jsonl(path: str, record: dict) -> None:
    append_jsonl(path, [{k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in record.items()}])


def make_estimator_fn(name: str):
    """The function registered in verl as ``grae_<name>`` (verl's estimator signature)."""

    def fn(token_level_rewards: Tensor, response_mask: Tensor, index: Any = None, config: Any = None, **kwargs: Any):
        return compute_grae_advantage(name, token_level_rewards, response_mask, index=index, config=config)

    fn.__name__ = f"compute_grae_{name}_advantage"
    fn.__qualname__ = fn.__name__
    fn.__doc__ = f"grae estimator {name!r} in verl (grae.engines.verl.advantage.compute_grae_advantage)."
    fn.__grae__ = name
    return fn
