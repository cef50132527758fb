"""Policy losses as pure functions over ``[N, T]`` tensors, returning ``(loss, metrics)``.

N sequences (samples), T response tokens (right-padded; ``mask`` marks real tokens). Advantages
may be sequence-level ``[N]`` (broadcast over tokens) or token-level ``[N, T]``. Per-sample
``weights`` ``[N]`` (from :class:`grae.advantage.AdvantageResult`) multiply each sample's loss and
its share of the normaliser, so a weight-0 sample (PSR's wrong samples, DGPO's collapsed groups)
leaves both. Metrics are detached 0-dim tensors (no ``.item()`` here: engines decide when to sync).

* :func:`policy_loss` — PPO clipped surrogate (Schulman et al. 2017) with token-level or
  sequence-level (GSPO, Zheng et al. 2025, arXiv:2507.18071) ratios, asymmetric clip ε_low/ε_high
  (DAPO "clip-higher", Yu et al. 2025, arXiv:2503.14476: 0.2/0.28; NGRPO: 0.16/0.24) and dual clip
  (Ye et al. 2020, arXiv:1912.09729: c = 3).
* :func:`agg_loss` — verl's aggregation modes, weight-aware.
* :func:`kl_penalty` — k1/k2/k3 estimators of KL(π‖π_ref) (Schulman 2020, "Approximating KL").
* :func:`entropy_from_logits` — per-token entropy ``[N, T]`` (aggregate it with :func:`agg_loss`).
"""

from __future__ import annotations

import torch
from torch import Tensor

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
RATIO_LEVELS = ("token", "sequence")
KL_ESTIMATORS = ("k1", "k2", "k3")
#: token-level entropy controls of Cui et al. 2025 (:func:`cov_loss`)
COV_MODES = ("clip_cov", "kl_cov")
#: verl's ``PolicyLossConfig`` defaults (clip_cov_ratio, clip_cov_lb, clip_cov_ub, kl_cov_ratio, ppo_kl_coef)
COV_DEFAULTS = {"ratio": 2e-4, "lb": 1.0, "ub": 5.0, "kl_coef": 0.1}


def agg_loss(
    loss_mat: Tensor,
    mask: Tensor,
    mode: str = "token-mean",
    *,
    weights: Tensor | None = None,
    norm_length: int | None = None,
    denominator: Tensor | float | None = None,
) -> Tensor:
    """Aggregate a per-token loss ``[N, T]`` to a scalar.

    Modes (verl ``agg_loss`` names):

    * ``token-mean``: Σ_{i,t} w_i m_it ℓ_it / Σ_{i,t} w_i m_it (DAPO; TRL ``bnpo``/``dapo``).
    * ``seq-mean-token-mean``: Σ_i w_i (Σ_t m ℓ / Σ_t m) / Σ_i w_i (original GRPO; TRL ``grpo``).
    * ``seq-mean-token-sum``: Σ_i w_i Σ_t m ℓ / Σ_i w_i.
    * ``seq-mean-token-sum-norm``: Σ_i w_i Σ_t m ℓ / (Σ_i w_i · L) with the constant L =
      ``norm_length`` (default T) — Dr. GRPO (TRL ``dr_grpo`` uses L = max_completion_length).

    Args:
        loss_mat: ``[N, T]`` per-token loss.
        mask: ``[N, T]`` 1 for response tokens.
        weights: ``[N]`` per-sample weights (default 1).
        norm_length: L for ``seq-mean-token-sum-norm``.
        denominator: overrides the normaliser (e.g. the global token count across data-parallel
            ranks and gradient-accumulation steps, as TRL's ``dapo`` loss and verl do).
    """
    if mode not in AGG_MODES:
        raise ValueError(f"loss_agg_mode: unknown {mode!r}; valid modes: {', '.join(AGG_MODES)}")
    mask = mask.to(loss_mat.dtype)
    w = (torch.ones(loss_mat.shape[0], dtype=loss_mat.dtype, device=loss_mat.device) if weights is None
         else weights.to(loss_mat.dtype))
    token_w = mask * w[:, None]  # [N, T]
    norm: Tensor | float
    if mode == "token-mean":
        total, norm = (loss_mat * token_w).sum(), token_w.sum()
    elif mode == "seq-mean-token-mean":
        seq = (loss_mat * mask).sum(-1) / mask.sum(-1).clamp(min=1)  # [N]
        total, norm = (seq * w).sum(), w.sum()
    elif mode == "seq-mean-token-sum":
        total, norm = (loss_mat * token_w).sum(), w.sum()
    else:
        length = loss_mat.shape[-1] if norm_length is None else norm_length
        total, norm = (loss_mat * token_w).sum(), w.sum() * length
    if denominator is not None:
        norm = denominator
    return total / (norm.clamp(min=1e-8) if isinstance(norm, Tensor) else max(norm, 1e-8))


def masked_mean(x: Tensor, mask: Tensor) -> Tensor:
    mask = mask.to(x.dtype)
    return (x * mask).sum() / mask.sum().clamp(min=1)


def policy_loss(
    logp: Tensor,
    old_logp: Tensor,
    advantages: Tensor,
    mask: Tensor,
    *,
    weights: Tensor | None = None,
    token_weights: Tensor | None = None,
    clip_low: float = 0.2,
    clip_high: float | None = None,
    dual_clip: float | None = None,
    ratio_level: str = "token",
    agg: str = "token-mean",
    norm_length: int | None = None,
    denominator: Tensor | float | None = None,
    cov: dict | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Clipped policy-gradient loss.

    Per token, with ratio ρ and advantage A::

        ℓ = max(−A·ρ, −A·clip(ρ, 1 − ε_low, 1 + ε_high))
        ℓ = min(ℓ, −A·c)  for A < 0                 (dual clip, when ``dual_clip = c``)

    ``ratio_level="token"``: ρ_it = π_θ(y_t)/π_old(y_t). ``"sequence"`` (GSPO-token, Eq. 13 of
    Zheng et al.): ρ_it = sg[s_i] · π_θ(y_t)/sg[π_θ(y_t)], where s_i = exp(mean_t log(π_θ/π_old)) is
    the length-normalised sequence ratio — its value is s_i on every token and its gradient is
    GSPO's when A is sequence-level. GSPO clips s_i with ε = 3e-4 / 4e-4 and aggregates with
    ``seq-mean-token-mean``.

    Args:
        logp, old_logp: ``[N, T]`` log-probs of the sampled tokens under π_θ and π_old.
        advantages: ``[N]`` or ``[N, T]``.
        mask: ``[N, T]``.
        weights: ``[N]`` per-sample weights (see :func:`agg_loss`).
        token_weights: ``[N, T]`` factors on the per-token loss that do not enter the normaliser,
            e.g. truncated importance weights π_train/π_rollout for vLLM rollouts.
        clip_low, clip_high: ε_low, ε_high (``clip_high=None`` means symmetric).
        dual_clip: c > 1 caps the loss of negative-advantage tokens at −A·c (verl ``clip_ratio_c``).
        ratio_level: ``"token"`` or ``"sequence"``.
        agg, norm_length, denominator: see :func:`agg_loss`.
        cov: Clip-Cov / KL-Cov instead of plain clipping (:func:`cov_loss`): ``{"mode": "clip_cov" |
            "kl_cov", "ratio", "lb", "ub", "kl_coef", "generator"}`` (missing keys: :data:`COV_DEFAULTS`).

    Returns:
        ``(loss, metrics)`` with ``clipfrac`` (tokens where clipping changed the loss),
        ``clipfrac_low`` / ``clipfrac_high`` (ratio below 1−ε_low with A < 0 / above 1+ε_high with
        A > 0), ``seq_clipfrac_low`` / ``seq_clipfrac_high`` (the same per sample, ``[N]``, NaN for
        a sample without tokens), ``dual_clipfrac``, ``approx_kl`` (mean of log π_old − log π_θ), ``ratio_mean``,
        ``ratio_max``.
    """
    if ratio_level not in RATIO_LEVELS:
        raise ValueError(f"ratio_level: unknown {ratio_level!r}; valid: {', '.join(RATIO_LEVELS)}")
    if dual_clip is not None and dual_clip <= 1:
        raise ValueError(f"dual_clip: must be > 1 (verl default 3.0), got {dual_clip}")
    clip_high = clip_low if clip_high is None else clip_high
    mask_f = mask.to(logp.dtype)
    adv = advantages[:, None] if advantages.dim() == 1 else advantages  # [N, 1] or [N, T]

    log_ratio = logp - old_logp  # [N, T]
    if ratio_level == "sequence":
        seq_log_ratio = (log_ratio * mask_f).sum(-1) / mask_f.sum(-1).clamp(min=1)  # [N] log s_i
        log_ratio = logp - logp.detach() + seq_log_ratio.detach()[:, None]
    ratio = torch.exp(log_ratio.clamp(max=20.0))  # [N, T]

    unclipped = -adv * ratio
    clipped = -adv * ratio.clamp(1 - clip_low, 1 + clip_high)
    loss_mat = torch.maximum(unclipped, clipped)  # [N, T]
    dual = torch.zeros_like(mask_f, dtype=torch.bool)
    if dual_clip is not None:
        cap = -adv * dual_clip
        dual = (adv < 0) & (loss_mat > cap)
        loss_mat = torch.where(adv < 0, torch.minimum(loss_mat, cap), loss_mat)
    cov_frac = torch.zeros((), dtype=logp.dtype)
    if cov is not None:
        if ratio_level != "token" or dual_clip is not None:
            raise ValueError("cov: Clip-Cov/KL-Cov are token-level losses; use ratio_level='token' and no dual_clip")
        loss_mat, cov_frac = cov_loss(unclipped, clipped, adv.expand_as(ratio), logp, log_ratio, mask, **cov)
    if token_weights is not None:
        loss_mat = loss_mat * token_weights

    loss = agg_loss(loss_mat, mask, agg, weights=weights, norm_length=norm_length, denominator=denominator)
    with torch.no_grad():
        adv_full = adv.expand_as(ratio)
        metrics = {
            "clipfrac": masked_mean((clipped > unclipped).to(logp.dtype), mask),
            "clipfrac_low": masked_mean(((ratio < 1 - clip_low) & (adv_full < 0)).to(logp.dtype), mask),
            "clipfrac_high": masked_mean(((ratio > 1 + clip_high) & (adv_full > 0)).to(logp.dtype), mask),
            "dual_clipfrac": masked_mean(dual.to(logp.dtype), mask),
            # [N] per sample (NaN for an empty one), for TRL's clip_ratio/low_min and clip_ratio/high_max
            "seq_clipfrac_low": _row_mean(((ratio < 1 - clip_low) & (adv_full < 0)).to(logp.dtype), mask_f),
            "seq_clipfrac_high": _row_mean(((ratio > 1 + clip_high) & (adv_full > 0)).to(logp.dtype), mask_f),
            "approx_kl": masked_mean(old_logp - logp, mask),
            "ratio_mean": masked_mean(ratio, mask),
            "ratio_max": (ratio * mask_f).max() if mask_f.numel() else ratio.new_zeros(()),
            "cov_frac": cov_frac,
        }
    return loss, {k: v.detach() for k, v in metrics.items()}


def cov_loss(unclipped: Tensor, clipped: Tensor, adv: Tensor, logp: Tensor, log_ratio: Tensor, mask: Tensor, *,
             mode: str, ratio: float = COV_DEFAULTS["ratio"], lb: float = COV_DEFAULTS["lb"],
             ub: float = COV_DEFAULTS["ub"], kl_coef: float = COV_DEFAULTS["kl_coef"],
             generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """Clip-Cov and KL-Cov (Cui et al., "The Entropy Mechanism of Reinforcement Learning for Reasoning
    Language Models", arXiv:2505.22617; verl ``compute_policy_loss_clip_cov`` / ``_kl_cov``).

    Entropy changes with the covariance of log π and A, so both act on the tokens of largest
    Cov_t = (A_t − mean A)·(log π_t − mean log π), means over the valid tokens of this (micro-)batch:

    * ``clip_cov``: among tokens whose PPO clip did not act and lb < Cov_t < ub, a random
      max(⌊ratio·N_valid⌋, 1) get no gradient (loss 0); the rest keep the clipped loss max(−Aρ, −A·clip(ρ)).
    * ``kl_cov``: no PPO clipping; the top max(⌊ratio·N_valid⌋, 1) tokens by Cov_t get
      −Aρ + kl_coef·|log ρ|, the others −Aρ.

    Defaults: verl's ``PolicyLossConfig`` (ratio 2e-4, lb 1, ub 5, kl_coef 0.1; the paper's runs use ratio
    2e-4 for Clip-Cov and 2e-3 / 2e-4 for KL-Cov on 7B / 32B). The selection is verl's, token for token
    (``tests/test_cov_loss.py`` compares the loss with verl's functions); ``generator`` seeds Clip-Cov's draw.

    Args: ``[N, T]`` each: ``unclipped`` −Aρ, ``clipped`` −A·clip(ρ), ``adv`` A, ``logp`` log π_θ, ``log_ratio``
    log ρ, ``mask``. Returns the ``[N, T]`` loss matrix and the fraction of valid tokens selected.
    """
    if mode not in COV_MODES:
        raise ValueError(f"cov.mode: unknown {mode!r}; valid: {', '.join(COV_MODES)}")
    if not 0 < ratio <= 1:
        raise ValueError(f"cov.ratio: must be in (0, 1] (verl: 2e-4), got {ratio}")
    valid = mask > 0  # [N, T]
    n_valid = int(valid.sum())
    if n_valid == 0:
        return (torch.maximum(unclipped, clipped) if mode == "clip_cov" else unclipped), logp.new_zeros(())
    count = max(int(ratio * n_valid), 1)
    with torch.no_grad():
        centred_adv = adv - adv[valid].mean()
        cov = centred_adv * (logp - logp[valid].mean())  # [N, T] Cov_t
        chosen = torch.zeros_like(valid)
        if mode == "clip_cov":
            eligible = valid & ~(clipped > unclipped) & (cov > lb) & (cov < ub)
            idx = torch.nonzero(eligible)  # [E, 2]
            if len(idx):
                idx = idx[torch.randperm(len(idx), generator=generator)[:count]]
                chosen[idx[:, 0], idx[:, 1]] = True
        else:
            top = torch.topk(cov[valid], min(count, n_valid)).indices  # over the valid tokens, row-major
            flat = torch.nonzero(valid.reshape(-1), as_tuple=True)[0][top]
            chosen.view(-1)[flat] = True
    if mode == "clip_cov":
        loss_mat = torch.maximum(unclipped, clipped) * (~chosen).to(unclipped.dtype)
    else:
        loss_mat = torch.where(chosen, unclipped + kl_coef * log_ratio.abs(), unclipped)
    return loss_mat, chosen[valid].to(logp.dtype).mean()


def _row_mean(x: Tensor, mask: Tensor) -> Tensor:
    """``[N, T] -> [N]`` masked mean per row; NaN for a row without tokens (TRL's ``masked_seq_mean``)."""
    return (x * mask).sum(-1) / mask.sum(-1)


def kl_penalty(logp: Tensor, ref_logp: Tensor, estimator: str = "k3", *, clamp: float | None = 10.0) -> Tensor:
    """``[N, T]`` per-token estimate of KL(π_θ ‖ π_ref) from samples of π_θ.

    With δ = log π_ref − log π_θ: k1 = −δ (unbiased, high variance), k2 = δ²/2, k3 = e^δ − δ − 1
    (unbiased, non-negative, low variance; verl ``low_var_kl`` clamps it to ±10, TRL's GRPO β-term).
    """
    if estimator not in KL_ESTIMATORS:
        raise ValueError(f"kl_estimator: unknown {estimator!r}; valid: {', '.join(KL_ESTIMATORS)}")
    delta = ref_logp - logp
    if estimator == "k1":
        kl = -delta
    elif estimator == "k2":
        kl = 0.5 * delta**2
    else:
        kl = torch.exp(delta) - delta - 1
    return kl.clamp(-clamp, clamp) if clamp is not None else kl


def entropy_from_logits(logits: Tensor) -> Tensor:
    """``[N, T, V] -> [N, T]``: H = logsumexp(z) − Σ softmax(z)·z, numerically stable."""
    probs = torch.softmax(logits, dim=-1)
    return torch.logsumexp(logits, dim=-1) - (probs * logits).sum(-1)
