"""grae's sampling loop: the tokens transformers' ``generate(do_sample=True)`` draws, computed with less work.

Used by ``grae eval``'s HF backend (:class:`~grae.eval.backends.HFSampler`) and GraeTrainer's rollouts on
TRL's plain ``generate`` path. Against ``generate`` it saves three things:

1. **Grouped-query decoding** (:mod:`grae.eval.gqa`) and the **top-k nucleus** (:mod:`grae.eval.nucleus`),
   switched on by the same rules as ``grae eval``: the first for a text model on SDPA with fewer key/value
   heads than query heads, the second whenever top-p < 1.
2. **Shared prefill** (:mod:`grae.eval.prefill`): each run of identical prompts is prefilled once.
3. **Finished rows leave the batch**: once a quarter (:data:`LEAVE_FRACTION`) of the rows still in the batch
   have ended, the model stops computing them (their cache rows are dropped, ``Cache.batch_select_indices``).

**The same random numbers.** ``generate`` draws each step's tokens with one ``torch.multinomial`` over
``[B, V]`` probabilities (``GenerationMixin._sample``), ended rows included (their token is then replaced
by the pad). The draw of a row depends only on its own probabilities and on the random numbers of its
place in the tensor, whose count depends on the shape only (PyTorch draws ``q ~ Exp(1)`` for every entry
and takes ``argmax(p / q)``, ``aten/src/ATen/native/Distributions.cpp``). So this loop samples at full
width ``[B, V]`` every step — rows that left hold a one-hot on the pad token — and every row still running
gets exactly the token ``generate`` gives it for the same seed. What differs is float rounding only
(a forward over fewer rows may round differently), which can move a draw that sits on a boundary.

**The same logits processors.** The processors are the ones ``generate`` builds for the settings of
:class:`Sampling` on the same batch: transformers' own ``GenerationMixin._get_logits_processor`` builds them
(:meth:`Sampling.processors`), so their classes, order and arguments are the installed version's (5.10:
repetition penalty, temperature, top-k, top-p, min-p; 5.23 adds the rows' left padding to the repetition
penalty, ``prompt_ignore_length``: a pad token in the prompt's padding is no longer penalised). The loop
swaps the top-p warper for the top-k nucleus and narrows a processor's per-row state when rows leave
(:func:`_narrowed`); a processor it does not know, or a transformers outside :data:`VERIFIED_TRANSFORMERS`,
keeps the caller on ``generate`` (:func:`plan_of`, said once), as does any other setting.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

logger = logging.getLogger(__name__)

#: rows still in the batch that must have ended before they leave it (each leave copies the cache)
LEAVE_FRACTION = 0.25

#: the transformers releases this loop is verified to draw ``generate``'s tokens on, [first, end): the ``train``
#: extra's bound in pyproject.toml (tests/test_decode.py holds the two equal; CI runs the parity tests on the
#: first and the newest). Outside it the callers keep ``generate`` (:func:`plan_of`, said once)
VERIFIED_TRANSFORMERS = ("5.10", "5.24")

#: transformers' processors whose work this loop reproduces, by class name (each row-independent but for the
#: repetition penalty's ``prompt_ignore_length``, narrowed by :func:`_narrowed`)
_KNOWN_PROCESSORS = {"RepetitionPenaltyLogitsProcessor", "TemperatureLogitsWarper", "TopKLogitsWarper",
                     "TopPLogitsWarper", "MinPLogitsWarper"}

#: the GenerationConfig fields this loop reproduces; any other field changed from transformers' defaults
#: (``GenerationConfig._get_default_generation_params``) sends the call to ``generate``
_SUPPORTED = {"temperature", "top_k", "top_p", "min_p", "repetition_penalty", "do_sample", "max_new_tokens",
              "pad_token_id", "eos_token_id", "bos_token_id", "max_length", "use_cache", "disable_compile",
              "cache_implementation"}
#: fields whose value changes nothing this loop does (bookkeeping, or beam search only)
_IGNORED = {"transformers_version", "_from_model_config", "decoder_start_token_id", "is_assistant",
            "num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold",
            "length_penalty", "early_stopping", "compile_config", "return_legacy_cache", "generation_kwargs"}


@dataclass(frozen=True)
class Sampling:
    """What one decoding step does to the logits. ``temperature == 0``: greedy (argmax, no random numbers)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float | None = None
    repetition_penalty: float = 1.0

    def generation_config(self) -> Any:
        """These settings as a transformers ``GenerationConfig`` (sampling unless greedy)."""
        from transformers import GenerationConfig

        if self.temperature == 0:
            return GenerationConfig(do_sample=False, repetition_penalty=self.repetition_penalty)
        return GenerationConfig(do_sample=True, temperature=self.temperature, top_k=self.top_k, top_p=self.top_p,
                                min_p=self.min_p, repetition_penalty=self.repetition_penalty)

    def processors(self, model: Any, attention_mask, fast_nucleus: bool = True) -> list[Callable]:
        """``f(input_ids [B, L], scores [B, V]) -> scores``: the processors ``model.generate`` applies with these
        settings to the batch of ``attention_mask`` (``[B, P]``), built by transformers' own
        ``_get_logits_processor`` (its classes, order and arguments); top-p through the top-k nucleus unless
        ``fast_nucleus`` is False. Raises :class:`UnknownProcessor` for a processor this loop does not know."""
        from .nucleus import nucleus_filter

        built = model._get_logits_processor(generation_config=self.generation_config(),
                                            input_ids_seq_length=attention_mask.shape[1], device=attention_mask.device,
                                            model_kwargs={"attention_mask": attention_mask})
        steps: list[Callable] = []
        for step in built:
            name = type(step).__name__
            if name not in _KNOWN_PROCESSORS:
                raise UnknownProcessor(f"transformers' generate applies {name} for {self}: grae's sampling loop does "
                                       "not reproduce it")
            if name == "TopPLogitsWarper" and fast_nucleus and step.min_tokens_to_keep == 1:
                steps.append(lambda ids, scores, top_p=step.top_p: nucleus_filter(scores, top_p))
            else:
                steps.append(step)
        return steps


class UnknownProcessor(ValueError):
    """``generate`` applies a logits processor that grae's sampling loop does not reproduce."""


def _narrowed(step: Callable, keep) -> Callable:
    """``step`` for the rows ``keep`` (``[A']`` positions in its batch) of the batch it was built for: the
    repetition penalty's per-row ``prompt_ignore_length`` (transformers ≥ 5.23) taken at those rows; every other
    known processor is row-independent."""
    import torch

    ignore = getattr(step, "prompt_ignore_length", None)
    if not isinstance(ignore, torch.Tensor):
        return step
    narrowed = copy.copy(step)
    narrowed.prompt_ignore_length = ignore.to(keep.device)[keep]
    return narrowed


def transformers_verified() -> bool:
    """Whether the installed transformers is one this loop is verified on (:data:`VERIFIED_TRANSFORMERS`)."""
    import transformers
    from packaging.version import Version

    first, end = (Version(v).release for v in VERIFIED_TRANSFORMERS)
    return first <= Version(transformers.__version__).release < end  # a 5.24 pre-release is outside


#: what :func:`_say_once` has said in this process
_said: set[str] = set()


def _say_once(message: str) -> None:
    if message not in _said:
        _said.add(message)
        logger.warning(message)


@dataclass(frozen=True)
class Plan:
    """One ``generate`` call as this loop runs it."""

    sampling: Sampling
    max_new_tokens: int
    eos_token_ids: tuple[int, ...]
    pad_token_id: int


def plan_of(model: Any, generation_config: Any) -> Plan | None:
    """What ``model.generate(generation_config=...)`` would do, or None when it does something this loop
    does not (beams, a penalty other than repetition, ``min_new_tokens``, a static cache, ...); greedy when
    ``do_sample`` is off. The
    effective config is merged as ``generate`` merges it (``_prepare_generation_config``: the model's own
    ``generation_config``, then transformers' defaults, fill the fields left unset)."""
    import torch
    import transformers
    from transformers import GenerationConfig

    if not transformers_verified():
        _say_once(f"grae: transformers {transformers.__version__} is outside the versions grae's sampling loop is "
                  f"verified to draw generate's tokens on ({VERIFIED_TRANSFORMERS[0]} to before "
                  f"{VERIFIED_TRANSFORMERS[1]}); sampling with transformers' generate instead")
        return None
    try:
        effective, _ = model._prepare_generation_config(generation_config)
        defaults = {**GenerationConfig().to_dict(), **GenerationConfig._get_default_generation_params()}
    except (AttributeError, TypeError, ValueError):
        return None
    changed = {key for key, value in effective.to_dict().items() if key not in _SUPPORTED | _IGNORED
               and value != defaults.get(key) and not (value in (None, False) and defaults.get(key) in (None, False))}
    if changed or effective.cache_implementation not in (None, "dynamic") or not effective.max_new_tokens:
        return None
    eos = effective.eos_token_id
    eos = () if eos is None else tuple(eos) if isinstance(eos, (list, tuple)) else (int(eos),)
    pad = effective.pad_token_id if effective.pad_token_id is not None else (eos[0] if eos else None)
    if pad is None:
        return None
    penalty = float(effective.repetition_penalty)
    sampling = (Sampling(temperature=0.0, repetition_penalty=penalty) if not effective.do_sample else
                Sampling(temperature=float(effective.temperature), top_p=float(effective.top_p),
                         top_k=int(effective.top_k or 0), min_p=effective.min_p, repetition_penalty=penalty))
    try:
        sampling.processors(model, torch.ones((1, 1), dtype=torch.long))
    except UnknownProcessor as err:
        _say_once(f"grae: {err}; sampling with transformers' generate instead")
        return None
    return Plan(sampling, int(effective.max_new_tokens), eos, int(pad))


def decodes_itself(model: Any) -> bool:
    """Whether this loop can run ``model``: a decoder-only text model whose forward takes a cache and
    position ids (else the caller keeps ``generate``)."""
    import inspect

    config = getattr(model, "config", None)
    if config is None or getattr(config, "is_encoder_decoder", False) or getattr(config, "vision_config", None):
        return False
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False
    return {"past_key_values", "position_ids", "attention_mask"} <= set(params)


@dataclass
class Decoded:
    """``sequences [B, P + T]`` as ``generate`` returns them (pad after a row's end); ``logps [B, T]``:
    log_softmax(logits / T_record)[token] of each drawn token (0 after a row's end), when asked for."""

    sequences: Any
    logps: Any = None


def decode(model: Any, input_ids, attention_mask, sampling: Sampling, *, max_new_tokens: int,
           eos_token_ids: Sequence[int], pad_token_id: int, share_prefill: bool = True, rows_leave: bool = True,
           fast: bool = True, record_temperature: float | None = None,
           on_step: Callable[[int, int, int], None] | None = None) -> Decoded:
    """Sample up to ``max_new_tokens`` tokens after each left-padded prompt (``input_ids``, ``attention_mask``:
    ``[B, P]``), as ``generate`` samples them (module docstring). Call it under ``torch.no_grad()`` with the
    seed set. ``fast=False`` turns grouped-query decoding and the top-k nucleus off (transformers' paths);
    ``record_temperature`` records the drawn tokens' log-probs at that temperature (before any processor);
    ``on_step(tokens_drawn, max_new_tokens, B)`` runs after every step."""
    import torch

    from .gqa import gqa_decoding
    from .prefill import forward_kwargs, prefill

    batch, width = input_ids.shape
    device = input_ids.device
    steps = sampling.processors(model, attention_mask, fast_nucleus=fast)
    eos = torch.tensor(list(eos_token_ids), device=device)
    drawn = torch.full((batch, max_new_tokens), pad_token_id, dtype=torch.long, device=device)  # [B, T_max]
    logps = torch.zeros((batch, max_new_tokens), device=device) if record_temperature else None  # [B, T_max]
    running = torch.ones(batch, dtype=torch.bool, device=device)  # [B] not ended
    rows = torch.arange(batch, device=device)  # [A] the rows still in the batch
    extra = forward_kwargs(model)
    with gqa_decoding(model) if fast else contextlib.nullcontext(False):
        logits, cache, positions = prefill(model, input_ids, attention_mask, share=share_prefill)  # [B, V]
        mask, position = attention_mask, positions[:, -1:]  # [A, P + t], [A, 1]
        done = 0
        for t in range(max_new_tokens):
            ids = torch.cat([input_ids[rows], drawn[rows, :t]], dim=1)  # [A, P + t]
            scores = logits
            for step in steps:
                scores = step(ids, scores)  # [A, V]
            token = _draw(scores, rows, batch, pad_token_id, greedy=sampling.temperature == 0)  # [A]
            alive = running[rows]  # [A]
            token = torch.where(alive, token, pad_token_id)
            drawn[rows, t] = token
            if logps is not None:
                picked = torch.log_softmax(logits / record_temperature, dim=-1).gather(1, token[:, None])[:, 0]  # [A]
                logps[rows, t] = torch.where(alive, picked, 0.0)
            running[rows] = alive & ~torch.isin(token, eos)
            done = t + 1
            if on_step is not None:
                on_step(done, max_new_tokens, batch)
            live = running[rows]  # [A]
            if done == max_new_tokens or not bool(live.any()):
                break
            if rows_leave and int((~live).sum()) >= max(1, LEAVE_FRACTION * rows.numel()):
                keep = live.nonzero().squeeze(1)  # [A'] positions within the batch
                cache.batch_select_indices(keep)
                rows, mask, position, token = rows[keep], mask[keep], position[keep], token[keep]
                steps = [_narrowed(step, keep) for step in steps]
            mask = torch.cat([mask, mask.new_ones(mask.shape[0], 1)], dim=1)  # [A, P + t + 1]
            position = position + 1  # [A, 1]
            out = model(input_ids=token[:, None], attention_mask=mask, position_ids=position, past_key_values=cache,
                        **extra)
            cache = out.past_key_values
            logits = out.logits[:, -1, :].to(copy=True, dtype=torch.float32)  # [A, V]
    sequences = torch.cat([input_ids, drawn[:, :done]], dim=1)  # [B, P + T]
    return Decoded(sequences, None if logps is None else logps[:, :done])


def _draw(scores, rows, batch: int, pad_token_id: int, *, greedy: bool):
    """``[A]`` tokens for the rows ``rows`` (``[A]`` of ``batch``): argmax, or one ``torch.multinomial`` over
    the full ``[batch, V]`` probabilities with a one-hot on the pad where a row has left."""
    import torch

    if greedy:
        return scores.argmax(dim=-1)
    probs = scores.softmax(dim=-1)  # [A, V]
    if rows.numel() < batch:
        full = probs.new_zeros(batch, probs.shape[1])  # [B, V]
        full[:, pad_token_id] = 1.0
        full[rows] = probs
        probs = full
    return torch.multinomial(probs, num_samples=1).squeeze(1)[rows if rows.numel() < batch else slice(None)]
