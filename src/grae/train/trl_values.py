"""The values TRL accepts for its enumerated ``GRPOConfig`` fields, read from the installed TRL and
transformers, so ``grae train`` refuses ``--loss_type bogus`` in one line before a model loads.

TRL checks most of these only while training (``loss_type`` at the first loss, ``scale_rewards`` at the
first advantage, ``report_to`` when the Trainer is built), minutes after the run directory is claimed.
Nothing here is a copy of TRL's lists:

* a field with ``metadata["choices"]`` (``log_level``, ``train_sampling_strategy``, …) uses those;
* a plain-``str`` field that TRL documents as an enumeration (:data:`DOCUMENTED_ENUMS`) takes the quoted
  names of its ``metadata["help"]`` ("Supported values are 'grpo', 'dr_grpo', …"), less other fields'
  names and ``key='value'`` examples; its default is always among them;
* ``cache_implementation`` and ``torch_compile_mode`` take transformers' and torch's own lists
  (:data:`LIBRARY_ENUMS`);
* ``report_to`` takes transformers' ``INTEGRATION_TO_CALLBACK`` names plus ``all``/``none``, and an
  integration whose package is not installed is refused too (the Trainer would raise on building it).

* a field typed by an ``Enum`` (``lr_scheduler_type``, ``optim``, ``save_strategy``, …) takes the enum's values
  (``GRPOConfig`` checks them too, but its error names the value, not the key).
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any

#: GRPOConfig's plain-``str`` fields whose help text lists every accepted value; ``bools`` maps the
#: booleans TRL also takes for a field to the value they stand for (None: booleans are not accepted)
DOCUMENTED_ENUMS: dict[str, dict[bool, str] | None] = {
    "loss_type": None,
    "scale_rewards": {True: "group", False: "none"},
    "importance_sampling_level": None,
    "multi_objective_aggregation": None,
    "vllm_mode": None,
    "vllm_importance_sampling_mode": None,
    "vllm_model_impl": None,
    "include_num_input_tokens_seen": {True: "all", False: "no"},
}

_QUOTED = re.compile(r"(=)?[`']+([a-z][a-z0-9_]*)[`']+")


def trl_fields() -> dict[str, dataclasses.Field]:
    """``trl.GRPOConfig``'s fields by name (the TRL section's schema)."""
    from trl import GRPOConfig

    return {f.name: f for f in dataclasses.fields(GRPOConfig)}


@functools.cache
def trl_annotations() -> dict[str, Any]:
    """GRPOConfig's declared field types. Not ``Field.type``: transformers' ``HfArgumentParser`` (TRL's
    ``TrlParser``) rewrites it in place once any parser is built on GRPOConfig in the process
    (``include_num_input_tokens_seen: str | bool`` becomes ``bool``), the class's annotations stay."""
    import typing

    from trl import GRPOConfig

    return typing.get_type_hints(GRPOConfig)


@functools.cache
def documented_values(name: str) -> tuple[str, ...]:
    """The values GRPOConfig's help for field ``name`` names (quoted), in order, its default included."""
    fields = trl_fields()
    spec = fields[name]
    names: list[str] = []
    for assigned, word in _QUOTED.findall(spec.metadata.get("help", "")):
        if not assigned and word not in fields and word not in names:
            names.append(word)
    if isinstance(spec.default, str) and spec.default not in names:
        names.append(spec.default)
    return tuple(names)


def _cache_implementations() -> tuple[str, ...]:
    from transformers.generation.configuration_utils import ALL_CACHE_IMPLEMENTATIONS

    return tuple(ALL_CACHE_IMPLEMENTATIONS)


def _compile_modes() -> tuple[str, ...]:
    from torch._inductor import list_mode_options

    return tuple(list_mode_options())


#: GRPOConfig's free-text fields whose values another library enumerates (transformers' generation
#: caches, torch.compile's modes); they fail only when generation or compilation starts
LIBRARY_ENUMS = {"cache_implementation": _cache_implementations, "torch_compile_mode": _compile_modes}


def enum_values() -> dict[str, tuple[str, ...]]:
    """GRPOConfig's fields typed by an ``Enum`` (``SchedulerType | str``, …) → the enum's values."""
    import enum
    import typing

    out = {}
    for name, hint in trl_annotations().items():
        enums = [o for o in typing.get_args(hint) or (hint,) if isinstance(o, type) and issubclass(o, enum.Enum)]
        if enums:
            out[name] = tuple(str(member.value) for member in enums[0])
    return out


@functools.cache
def allowed_values() -> dict[str, tuple[str, ...]]:
    """Every enumerated GRPOConfig field → the values TRL accepts."""
    out = enum_values()
    out.update({f.name: tuple(f.metadata["choices"]) for f in trl_fields().values() if f.metadata.get("choices")})
    out.update({name: documented_values(name) for name in DOCUMENTED_ENUMS})
    for name, values in LIBRARY_ENUMS.items():
        try:
            out[name] = values()
        except (ImportError, AttributeError):  # another version keeps them elsewhere: TRL's own check stands
            pass
    return out


def check_enumerations(trl: dict[str, Any]) -> str | None:
    """The first ``trl.<key>: …`` problem among the enumerated values given in ``trl``, or None."""
    allowed = allowed_values()
    for key, value in trl.items():
        if key == "report_to":
            why = report_to_problem(value)
            if why:
                return why
            continue
        if key not in allowed or value is None:
            continue
        bools = DOCUMENTED_ENUMS.get(key)
        if isinstance(value, bool) and bools is not None:
            continue
        if not isinstance(value, str) or value not in allowed[key]:
            also = " or true/false" if bools else ""
            return f"trl.{key}: {value!r} is not one of {', '.join(allowed[key])}{also} (TRL {_trl_version()})"
    return None


def report_to_problem(value: Any) -> str | None:
    """Why ``trl.report_to`` would fail when TRL builds the Trainer (an unknown or uninstalled
    integration), or None. ``value`` is a name, a list of names, ``all``, ``none`` or None."""
    from transformers.integrations.integration_utils import INTEGRATION_TO_CALLBACK, get_available_reporting_integrations

    names = [value] if isinstance(value, str) else value
    if names is None or names in (["all"], ["none"]):
        return None
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return f"trl.report_to: expected an integration name or a list of names, got {value!r}"
    known = ", ".join(["all", "none", *INTEGRATION_TO_CALLBACK])
    for name in names:
        if name in ("all", "none"):
            return f"trl.report_to: {name!r} stands alone, not in a list with {[n for n in names if n != name]}"
        if name not in INTEGRATION_TO_CALLBACK:
            return f"trl.report_to: {name!r} is not an integration transformers knows; one of {known}"
    installed = set(get_available_reporting_integrations()) | {"flyte", "kubeflow"}  # those two check themselves
    missing = [n for n in names if n not in installed]
    if missing:
        return (f"trl.report_to: {', '.join(missing)} is not installed here (pip install {' '.join(missing)}), "
                "or report to 'none'")
    return None


def _trl_version() -> str:
    import trl

    return trl.__version__
