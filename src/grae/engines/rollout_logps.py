"""The rollout policy's per-token log-probs, recorded while ``transformers`` generates.

GraeTrainer needs each completion's sequence log-prob for estimators that declare ``logprob_sum`` /
``logprob_mean`` (``unlikeliness``). With TRL's plain ``model.generate`` path and steps aligned with
generation, TRL computes no log-probs at all, and a separate no-grad forward pass over prompt +
completion cost +25.4 % step time on the tiny model. The forward pass is avoidable: ``generate``
already computes every step's logits. :class:`RolloutLogprobRecorder` is a
``transformers.LogitsProcessor`` that reads them as generation proceeds.

**Which distribution.** The recorded value of completion token ``y_t`` is

    log π_T(y_t | x, y_<t) = log_softmax(z_t / T)[y_t],      z_t = the policy's logits (fp32), T = temperature

with no top-k / top-p / min-p truncation: exactly what TRL's ``_get_per_token_logps_and_entropies``
computes (``selective_log_softmax(logits / temperature)``), i.e. the same quantity as GraeTrainer's
forward-pass fallback, and what TRL's loss calls ``old_per_token_logps``. (Under bf16, ``generate`` upcasts
the logits to fp32 before any processor, so the record is the fp32 log-softmax of the bf16 logits, where
TRL's forward pass takes it in bf16: they differ by that rounding.)

**Where it runs in transformers' processor list.** ``GenerationMixin._get_logits_processor`` (5.10 to 5.23)
builds the non-warper processors (repetition penalty, bad words, min length, suppressed tokens, ...),
then appends the custom ``logits_processor=`` list, *then* the sampling warpers (temperature, top-k,
top-p, min-p, typical, ε/η). So a custom processor sees the raw fp32 logits, not yet divided by T
nor truncated — unless the generation config switches on a non-warper processor, which modifies the
logits *before* it. The recorder therefore divides by T itself, ignores the warpers that
follow it, and is used only when :func:`logit_modifiers` finds no non-warper processor (else the
caller falls back to the forward pass). It returns ``scores`` unchanged: sampling is untouched.

**The last token.** At step t the processor sees ``input_ids`` ending in the token sampled at step
t − 1, so it gathers the previous step's log-softmax at that token; the final sampled token is
gathered in :meth:`RolloutLogprobRecorder.finish` from the returned sequences.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import torch
from transformers import LogitsProcessor, LogitsProcessorList

#: GenerationConfig fields for which transformers (5.10 to 5.23) adds a logits processor *ahead of* a custom one
#: (``_get_logits_processor``), each with the predicate "adds none". Any other value changes the logits
#: a custom processor sees, so the recorder would not return log π_T.
_NEUTRAL: dict[str, Any] = {
    "guidance_scale": lambda v: v is None or v == 1,
    "sequence_bias": lambda v: v is None,
    "encoder_repetition_penalty": lambda v: v is None or v == 1.0,
    "repetition_penalty": lambda v: v is None or v == 1.0,
    "no_repeat_ngram_size": lambda v: v is None or v <= 0,
    "encoder_no_repeat_ngram_size": lambda v: v is None or v <= 0,
    "bad_words_ids": lambda v: v is None,
    "min_length": lambda v: v is None or v <= 0,
    "min_new_tokens": lambda v: v is None or v <= 0,
    "forced_bos_token_id": lambda v: v is None,
    "forced_eos_token_id": lambda v: v is None,
    "remove_invalid_values": lambda v: v is not True,
    "exponential_decay_length_penalty": lambda v: v is None,
    "suppress_tokens": lambda v: v is None,
    "begin_suppress_tokens": lambda v: v is None,
}


def logit_modifiers(generation_config: Any, model_generation_config: Any = None) -> list[str]:
    """The fields of the *effective* generation config that make transformers modify the logits before
    a custom logits processor runs (empty: the recorder sees the raw logits). Effective as transformers
    merges it: a field the passed config leaves ``None`` is taken from the model's ``generation_config``."""
    found = []
    for name, neutral in _NEUTRAL.items():
        value = getattr(generation_config, name, None)
        if value is None and model_generation_config is not None:
            value = getattr(model_generation_config, name, None)
        if not neutral(value):
            found.append(name)
    return found


def vllm_logprob_modifiers(args: Any) -> list[str]:
    """The sampling settings of ``args`` (TRL's ``GRPOConfig``) under which vLLM's sampling log-probs are not
    log_softmax(z / T)[y_t] (empty: they are). TRL asks vLLM for ``logprobs_mode="processed_logprobs"`` (colocate
    mode; its ``trl vllm-serve`` sets the same), which vLLM documents as "the values after applying all
    processors, including temperature and top_k/top_p" (vLLM engine arguments, ``--logprobs-mode``): with a
    truncation or a penalty on they are log-probs of the truncated, renormalised (or penalised) distribution,
    while the recorder and TRL's own forward pass give the untruncated π_T. GraeTrainer then takes the
    estimator's log-probs from TRL's ``old_per_token_logps`` or its own no-grad forward pass instead, so
    every engine feeds an estimator the same quantity."""
    checks = {
        "top_p": getattr(args, "top_p", None) not in (None, 1, 1.0),
        "top_k": getattr(args, "top_k", None) not in (None, 0, -1),
        "min_p": bool(getattr(args, "min_p", None)),
        "repetition_penalty": getattr(args, "repetition_penalty", None) not in (None, 1, 1.0),
        "generation_kwargs": bool(getattr(args, "generation_kwargs", None)),  # may set other vLLM sampling params
        "vllm_structured_outputs_regex": bool(getattr(args, "vllm_structured_outputs_regex", None)),
    }
    return [name for name, on in checks.items() if on]


class RolloutLogprobRecorder(LogitsProcessor):
    """Records log_softmax(z_t / T)[y_t] for every sampled token (see the module docstring).

    Args:
        temperature: T of the log-probs (TRL's ``temperature``; the fallback divides by the same).
    """

    def __init__(self, temperature: float):
        self.temperature = float(temperature)
        self._token_logps: list[torch.Tensor] = []  # each [B]
        self._last: torch.Tensor | None = None  # [B, V] log π_T of the step whose token is not seen yet

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self._last is not None:  # input_ids ends in the token sampled from the previous step
            self._token_logps.append(self._last.gather(1, input_ids[:, -1:])[:, 0])  # [B]
        self._last = torch.log_softmax(scores.float() / self.temperature, dim=-1)  # [B, V]
        return scores

    def take(self, logps: torch.Tensor) -> None:
        """Hand over ``[B, T_gen]`` log-probs recorded by a sampling loop that ran instead of ``generate``
        (:func:`grae.engines.rollouts.decoding_generate`); :meth:`finish` returns them."""
        self._token_logps, self._last = list(logps.unbind(dim=1)), None

    def finish(self, sequences: torch.Tensor) -> torch.Tensor:
        """``[B, T_gen]`` log-probs of the generated tokens of ``sequences`` (``[B, P + T_gen]``, as
        ``generate`` returns them), the last token's from the final step's scores. Every position of a
        row after its EOS holds the log-prob of the pad token generate appended: mask it."""
        if self._last is not None:
            self._token_logps.append(self._last.gather(1, sequences[:, -1:])[:, 0])  # [B]
            self._last = None
        if not self._token_logps:
            return sequences.new_zeros((sequences.size(0), 0), dtype=torch.float32)
        return torch.stack(self._token_logps, dim=1)  # [B, T_gen]


@contextlib.contextmanager
def recording_generate(model: Any, recorder: RolloutLogprobRecorder,
                       sink: list[torch.Tensor]) -> Iterator[None]:
    """Within the block, ``model.generate(...)`` runs with ``logits_processor=[recorder]`` added and
    appends ``recorder.finish(sequences)`` (``[B, T_gen]``) to ``sink``; on exit ``generate`` is the
    model's own again. Done by shadowing ``generate`` on this one instance (not the class), so the
    caller's code — TRL's ``_generate_single_turn`` — runs unchanged."""
    def with_recorder(generate: Callable[..., Any]) -> Callable[..., Any]:
        def generate_with_recorder(*args: Any, **kwargs: Any) -> Any:
            extra = kwargs.pop("logits_processor", None) or []  # TRL passes none; any other runs after the recorder
            output = generate(*args, logits_processor=LogitsProcessorList([recorder, *extra]), **kwargs)
            sequences = output if isinstance(output, torch.Tensor) else output.sequences  # [B, P + T_gen]
            sink.append(recorder.finish(sequences))
            return output

        return generate_with_recorder

    with shadowed_generate(model, with_recorder):
        yield


@contextlib.contextmanager
def shadowed_generate(model: Any, wrap: Callable[[Callable[..., Any]], Callable[..., Any]]) -> Iterator[None]:
    """Within the block ``model.generate`` is ``wrap(generate)``, ``generate`` being the one it shadows; set on
    this one instance (not the class), and on exit ``generate`` is what it was (an instance-level one included)."""
    own = vars(model).get("generate")  # an instance-level generate already there (rare): restored on exit
    model.generate = wrap(model.generate)
    try:
        yield
    finally:
        if own is None:
            del model.generate
        else:
            model.generate = own
