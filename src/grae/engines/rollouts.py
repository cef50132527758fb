"""GraeTrainer's rollouts on grae's sampling loop (:mod:`grae.eval.decode`) instead of transformers' ``generate``.

TRL's plain generation path (not vLLM, not continuous batching) calls
``unwrapped_model.generate(input_ids=, attention_mask=, generation_config=)`` once per generation batch, each
prompt repeated ``num_generations`` times in a row. :func:`decoding_generate` shadows that one instance's
``generate`` for the duration of TRL's ``_generate_single_turn`` (the way :func:`~grae.engines.rollout_logps.
recording_generate` does), so TRL's code around it — unwrapping, gradient-checkpointing toggles, the EOS
cut — runs unchanged, and the vLLM path is never touched. The loop draws the tokens ``generate`` draws for the
same seed (the proof and its tests: :mod:`grae.eval.decode`, ``tests/test_decode.py``) with grouped-query
decoding, the top-k nucleus, each prompt prefilled once for its group, and finished rows leaving the batch.

A ``generate`` that is not transformers' own ``GenerationMixin.generate`` (the user's, set on the instance or
overridden in the model's class, or a test's patch of ``GenerationMixin.generate`` itself) is never bypassed:
GraeTrainer then runs TRL's path unchanged, calling it, and says so once (:func:`transformers_generate`).

Anything else goes to ``generate`` as before: multimodal inputs (extra keyword arguments), a generation config
the loop does not reproduce (:func:`grae.eval.decode.plan_of`), a model it cannot drive
(:func:`~grae.eval.decode.decodes_itself`: PEFT wrappers, encoder-decoders), and a model in training mode
with an active dropout module (its random masks would make shared prefills and narrowed batches another
process).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

#: generate's keyword arguments the loop takes (TRL's plain path passes exactly these)
_PLAIN_INPUTS = {"input_ids", "attention_mask", "generation_config"}


@dataclass(frozen=True)
class RolloutOptions:
    """How GraeTrainer samples on TRL's plain ``generate`` path, and how its loss pass is shaped: each group's
    prompt once, each micro-batch cut to its own longest completion (``grae train``: ``rollouts:``)."""

    #: decode with grae's sampling loop (grouped-query decoding, top-k nucleus); False: transformers' generate
    grae_decoding: bool = True
    #: prefill each prompt once for its copies (same tokens either way)
    share_prefill: bool = True
    #: rows that have ended leave the batch (same tokens either way)
    rows_leave: bool = True
    #: the loss and log-prob passes compute each group's prompt once, forward and backward
    #: (grae.engines.trl.prompt_forward): the same log-probs and gradients up to float rounding. Each prompt's
    #: rows then fill micro-batches together where the loss does not depend on the split (as group_by_length);
    #: off with beta != 0 (the reference and loss passes must agree bit for bit). Off by default in GraeTrainer,
    #: which then trains bit for bit as stock TRL; ``grae train`` turns it on
    shared_prompt_pass: bool = False
    #: each loss micro-batch drops the completion columns that are padding in all of its rows (rows that ended
    #: early), so its forward and backward run over its own longest completion instead of the generation
    #: batch's: the same loss and gradients up to float rounding. Off by default in GraeTrainer (bit for bit
    #: stock TRL); ``grae train`` turns it on
    trim_padding: bool = False
    #: the generation batch's rows fill the loss micro-batches in order of completion length (HF's
    #: ``group_by_length``, applied to rollouts), so that with ``trim_padding`` each micro-batch is cut to rows
    #: of similar length. Only where the loss does not depend on how rows are split into micro-batches (TRL's
    #: token-sum and per-row loss types, grae's loss modes; not bnpo, vespo, an entropy bonus or quantile,
    #: Clip-Cov/KL-Cov, an auxiliary loss: there it stays off and says why). The same update up to float
    #: rounding; per-micro-batch metrics (entropy, clip ratios) average other groupings. Off by default in
    #: GraeTrainer; ``grae train`` turns it on
    group_by_length: bool = False


def rollout_options(value: RolloutOptions | dict[str, Any] | None) -> RolloutOptions:
    """``value`` as :class:`RolloutOptions`; an unknown key is refused naming the valid ones."""
    if value is None:
        return RolloutOptions()
    if isinstance(value, RolloutOptions):
        return value
    fields = set(RolloutOptions.__dataclass_fields__)
    unknown = sorted(set(value) - fields)
    if unknown:
        raise ValueError(f"rollouts: unknown key {unknown[0]!r}; valid: {', '.join(sorted(fields))}")
    bad = [key for key, flag in value.items() if not isinstance(flag, bool)]
    if bad:
        raise ValueError(f"rollouts.{bad[0]}: expected true or false, got {value[bad[0]]!r}")
    return RolloutOptions(**value)


def _resolved_generate(model: Any) -> Any:
    """The function ``model.generate`` runs: the instance's own attribute, else its class's."""
    generate = vars(model).get("generate") or getattr(type(model), "generate", None)
    return getattr(generate, "__func__", generate)


def transformers_generate(model: Any) -> bool:
    """Whether ``model.generate`` is transformers' own ``GenerationMixin.generate`` function; False for a user's
    override (on the instance or in the class) or a patched (mocked) one."""
    import inspect

    generate = _resolved_generate(model)
    return (inspect.isfunction(generate) and generate.__module__ == "transformers.generation.utils"
            and generate.__qualname__ == "GenerationMixin.generate")


def describe_generate(model: Any) -> str:
    """``module.qualname`` of the function ``model.generate`` runs (for the one-line notice)."""
    generate = _resolved_generate(model)
    return f"{getattr(generate, '__module__', '?')}.{getattr(generate, '__qualname__', type(generate).__name__)}"


def _dropout_active(model: Any) -> bool:
    import torch

    return model.training and any(isinstance(m, torch.nn.Dropout) and m.p > 0 for m in model.modules())


@contextlib.contextmanager
def decoding_generate(model: Any, options: RolloutOptions) -> Iterator[None]:
    """Within the block ``model.generate`` decodes with grae's loop where it applies (module docstring). A
    ``logits_processor=`` of :class:`~grae.engines.rollout_logps.RolloutLogprobRecorder` alone (GraeTrainer's
    recorder, added by ``recording_generate`` around this) is served by the loop's own record."""
    from grae.engines.rollout_logps import RolloutLogprobRecorder, shadowed_generate
    from grae.eval.decode import decode, decodes_itself, plan_of

    if not options.grae_decoding:
        yield
        return

    def grae_generate(generate: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        processors = list(kwargs.get("logits_processor") or [])
        recorders = [p for p in processors if isinstance(p, RolloutLogprobRecorder)]
        plain = {key: value for key, value in kwargs.items() if key != "logits_processor"}
        plan = None
        if (not args and set(plain) <= _PLAIN_INPUTS and "input_ids" in plain and len(recorders) == len(processors) <= 1
                and decodes_itself(model) and not _dropout_active(model)):
            plan = plan_of(model, plain.get("generation_config"))
        if plan is None:
            return generate(*args, **kwargs)
        ids = plain["input_ids"]  # [B, P] left padded
        mask = plain.get("attention_mask")
        decoded = decode(model, ids, mask if mask is not None else ids.new_ones(ids.shape), plan.sampling,
                         max_new_tokens=plan.max_new_tokens, eos_token_ids=plan.eos_token_ids,
                         pad_token_id=plan.pad_token_id, share_prefill=options.share_prefill,
                         rows_leave=options.rows_leave,
                         record_temperature=recorders[0].temperature if recorders else None)
        if recorders:
            recorders[0].take(decoded.logps)
        return decoded.sequences

    with shadowed_generate(model, lambda generate: functools.partial(grae_generate, generate)):
        yield
