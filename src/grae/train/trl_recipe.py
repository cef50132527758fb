"""A ``trl grpo`` recipe's keys that are not ``GRPOConfig`` fields, in grae's spelling — or refused in one line
naming what to write instead.

``trl grpo --config recipe.yaml`` (TRL 1.16, ``trl/scripts/grpo.py``) parses four dataclasses:
``GRPOScriptArguments`` (``dataset_name``, ``dataset_config``, ``dataset_train_split``, ``reward_funcs``, …),
``GRPOConfig``, ``ModelConfig`` (``model_name_or_path``, ``dtype``, ``attn_implementation``, ``use_peft`` and
``lora_*``, quantization) and ``DatasetMixtureConfig`` (``datasets``); keys none of them knows go to
``accelerate launch`` (``num_processes``, ``accelerate_config``), and ``env`` sets environment variables.
GRPOConfig fields are grae's ``trl`` section (:mod:`grae.train.config`); the rest is mapped here:

* ``model_name_or_path`` → ``model``; ``use_peft: true`` with ``lora_*``, ``use_rslora``, ``use_dora`` →
  ``peft`` (TRL's ``get_peft_config``; ``lora_*`` count only with ``use_peft``, as in TRL);
* ``dtype`` (``torch_dtype``, its older name), ``attn_implementation``, ``model_revision`` →
  ``trl.model_init_kwargs`` (``dtype``, ``attn_implementation``, ``revision``), which grae applies when it
  loads the model, as grpo.py builds them; ``trust_remote_code`` is a GRPOConfig field, applied the same way;
* ``dataset_name`` (+ ``dataset_config``, ``dataset_train_split``, ``dataset_test_split``) → ``task``
  (:func:`grae.data.hub.recipe_task`: a registered task or ``hf:<org/name>``; the whole training split,
  ``task.train_size: null``, as TRL trains on it); a grae task name is taken as it is;
* a key grae cannot honour (:data:`REFUSED`) is refused unless it holds TRL's default (then it does nothing
  in TRL either and is dropped).
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any

#: ModelConfig keys with a grae spelling (LoRA ones only with ``use_peft: true``)
RENAMED = {"model_name_or_path": "model"}
LORA_KEYS = {"lora_r": "r", "lora_alpha": "lora_alpha", "lora_dropout": "lora_dropout",
             "lora_target_modules": "target_modules", "lora_target_parameters": "target_parameters",
             "lora_modules_to_save": "modules_to_save", "lora_task_type": "task_type", "use_rslora": "use_rslora",
             "use_dora": "use_dora"}
#: TRL's ModelConfig LoRA defaults, which ``use_peft: true`` starts from
LORA_DEFAULTS = {"r": 16, "lora_alpha": 32, "lora_dropout": 0.05}
#: ModelConfig keys → ``trl.model_init_kwargs`` keys (``trl/scripts/grpo.py`` builds the same dict)
MODEL_INIT_KEYS = {"dtype": "dtype", "torch_dtype": "dtype", "attn_implementation": "attn_implementation",
                   "model_revision": "revision"}
DATASET_KEYS = ("dataset_name", "dataset_config", "dataset_train_split", "dataset_test_split")
#: ``from_pretrained`` dtypes TRL accepts (``trl.trainer.utils.create_model_from_path``)
DTYPES = ("auto", "bfloat16", "float16", "float32")

_LAUNCH = "launch it with accelerate: accelerate launch --num_processes N [--config_file FILE] $(which grae) train CONFIG"
_QUANT = "grae loads the model unquantized; drop it (a LoRA adapter without quantization: use_peft: true)"
_WHOLE = "grae reads the dataset whole (it draws task.train_size prompts and holds problems out); drop it"
#: keys grae cannot honour → what to write instead (refused unless at TRL's default, see :func:`trl_default`)
REFUSED = {
    "reward_model_name_or_path": "grae trains on reward functions, not a reward model; list them in reward_funcs "
                                 "('task', TRL's accuracy_reward, or module:function)",
    "load_in_4bit": _QUANT, "load_in_8bit": _QUANT, "bnb_4bit_quant_type": _QUANT, "use_bnb_nested_quant": _QUANT,
    "bnb_4bit_quant_storage": _QUANT,
    "dataset_streaming": _WHOLE, "streaming": _WHOLE,
    "datasets": "grae trains on one dataset: write dataset_name: ORG/NAME (with dataset_config, dataset_train_split)",
    "test_split_size": "grae holds out eval.num_problems problems itself (task.params.heldout_size sets a carved "
                       "split's size); drop it",
    "ignore_bias_buffers": "a DDP setting of TRL's SFT/DPO scripts that GRPO does not use; drop it",
    "num_processes": _LAUNCH, "accelerate_config": _LAUNCH, "config_file": _LAUNCH,
    "env": "set the variables in the shell before grae train (export NAME=VALUE); drop env",
}
#: launcher keys' defaults (not dataclass fields): one process is what grae train runs anyway
_LAUNCH_DEFAULTS = {"num_processes": 1}


class RecipeError(ValueError):
    """A recipe key grae cannot take, with the key first and what to write instead."""


@functools.cache
def _script_defaults() -> dict[str, Any]:
    """Defaults of the non-GRPOConfig dataclasses ``trl grpo`` parses (installed TRL)."""
    from trl import DatasetMixtureConfig, ModelConfig
    from trl.scripts.grpo import GRPOScriptArguments

    out: dict[str, Any] = {}
    for cls in (GRPOScriptArguments, ModelConfig, DatasetMixtureConfig):
        for f in dataclasses.fields(cls):
            if f.default is not dataclasses.MISSING:
                out.setdefault(f.name, f.default)
            elif f.default_factory is not dataclasses.MISSING:
                out.setdefault(f.name, f.default_factory())
    return out


def trl_default(key: str) -> Any:
    """TRL's default of a refusable recipe key; a fresh object (equal to no value) when it has none."""
    defaults = {**_script_defaults(), **_LAUNCH_DEFAULTS}
    return defaults.get(key, object())


def recipe_assignments(raw: dict[str, Any]) -> dict[str, Any]:
    """Pop every ``trl grpo`` script key (see the module docstring) from ``raw`` and return grae's dotted
    assignments (``{"model": …, "task.name": …, "trl.model_init_kwargs.dtype": …}``). Raises
    :class:`RecipeError` for a key grae cannot honour, naming what to write instead."""
    out: dict[str, Any] = {}
    for key in [k for k in raw if k in REFUSED]:
        value = raw.pop(key)
        if value != trl_default(key):
            raise RecipeError(f"{key}: {REFUSED[key]}")
    use_peft = raw.pop("use_peft", None)
    if use_peft is not None and not isinstance(use_peft, bool):
        raise RecipeError(f"use_peft: expected true or false, got {use_peft!r}")
    lora = {LORA_KEYS[key]: raw.pop(key) for key in [k for k in raw if k in LORA_KEYS]}
    if use_peft:  # as in TRL, lora_* without use_peft train no adapter
        out["peft"] = {**LORA_DEFAULTS, **lora}
    for key, target in RENAMED.items():
        if key in raw:
            out[target] = raw.pop(key)
    for key in [k for k in raw if k in MODEL_INIT_KEYS]:
        target = MODEL_INIT_KEYS[key]
        if f"trl.model_init_kwargs.{target}" in out:
            raise RecipeError(f"{key}: {target} is given twice (dtype and torch_dtype are one setting); keep dtype")
        out[f"trl.model_init_kwargs.{target}"] = raw.pop(key)
    dataset = {key: raw.pop(key) for key in DATASET_KEYS if key in raw}
    if dataset:
        out.update(dataset_assignments(dataset))
    return out


def dataset_assignments(keys: dict[str, Any]) -> dict[str, Any]:
    """``dataset_name`` and its companions as ``task.*`` assignments: a hub id through
    :func:`grae.data.hub.recipe_task` (training on the whole split), a grae task name as it is."""
    name = keys.get("dataset_name")
    others = {key: value for key, value in keys.items() if key != "dataset_name" and value is not None}
    if not isinstance(name, str) or not name.strip():
        first = next(iter(others), "dataset_name")
        raise RecipeError(f"{first}: goes with a hub dataset_name; add dataset_name: ORG/NAME (or name a grae task: "
                          "task.name)")
    if not is_hub_id(name):
        if {k: v for k, v in others.items() if not (k == "dataset_train_split" and v == "train")}:
            raise RecipeError(f"{next(iter(others))}: only for a hub dataset_name (ORG/NAME); {name!r} is a grae task, "
                              "whose settings go in task.params")
        return {"task.name": name}
    from grae.data.hub import recipe_task

    task, params = recipe_task(name, config=keys.get("dataset_config"), split=keys.get("dataset_train_split") or "train",
                               test_split=keys.get("dataset_test_split"))
    return {"task.name": task, "task.train_size": None, **{f"task.params.{k}": v for k, v in params.items()}}


def is_hub_id(name: str) -> bool:
    """Whether ``name`` reads as a hub dataset id (``org/name``) rather than a grae task or a local file."""
    from grae.data import task_names
    from grae.data.registry import LOCAL_SUFFIXES

    return (name.count("/") == 1 and ":" not in name and name not in task_names() and not name.startswith((".", "/", "~"))
            and not name.lower().endswith(LOCAL_SUFFIXES) and not Path(name).exists())


def check_model_init_kwargs(kwargs: Any) -> dict[str, Any]:
    """``trl.model_init_kwargs`` as grae applies them: a mapping (TRL also takes it as a JSON string) whose
    ``dtype`` TRL accepts, whose ``attn_implementation`` transformers knows, and without the placement keys
    grae decides itself. Raises ``ValueError`` naming the key and the fix."""
    import json

    if isinstance(kwargs, str):
        try:
            kwargs = json.loads(kwargs)
        except ValueError:
            raise ValueError(f"trl.model_init_kwargs: not a mapping or JSON object: {kwargs!r}") from None
    if kwargs is None:
        return {}
    if not isinstance(kwargs, dict):
        raise ValueError(f"trl.model_init_kwargs: expected a mapping of from_pretrained arguments, got {kwargs!r}")
    for key in ("device_map", "quantization_config"):
        if key in kwargs:
            raise ValueError(f"trl.model_init_kwargs.{key}: grae places and loads the model itself (unquantized, on "
                             "the trainer's device); drop it")
    dtype = kwargs.get("dtype")
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"dtype: {dtype!r} is not one of {', '.join(DTYPES)} (TRL's model dtypes)")
    attn = kwargs.get("attn_implementation")
    if attn is not None:
        why = attention_problem(attn)
        if why:
            raise ValueError(f"attn_implementation: {why}")
    return kwargs


def attention_problem(name: Any) -> str | None:
    """Why transformers would refuse ``attn_implementation=name`` here (an unknown name, flash attention
    without a CUDA GPU), or None; a hub kernel (``org/repo``) is left to transformers."""
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    if not isinstance(name, str):
        return f"expected a name, got {name!r}"
    if "/" in name:
        return None
    known = ["eager", *ALL_ATTENTION_FUNCTIONS.valid_keys()]
    if name not in known:
        return f"{name!r} is not one transformers knows: {', '.join(known)}"
    if "flash_attention" in name:
        import torch

        if not torch.cuda.is_available():
            return f"{name} needs a CUDA GPU; on this machine use sdpa (transformers' default) or eager"
    return None


def model_load_kwargs(trl: dict[str, Any]) -> dict[str, Any]:
    """``from_pretrained`` keyword arguments of a run: ``trl.model_init_kwargs`` with ``trust_remote_code`` from
    ``trl.trust_remote_code`` (as TRL does), and float32 unless a dtype is given (TRL's default too)."""
    import torch

    kwargs = dict(check_model_init_kwargs(trl.get("model_init_kwargs")))
    kwargs.setdefault("trust_remote_code", bool(trl.get("trust_remote_code", False)))
    dtype = kwargs.get("dtype", "float32")
    kwargs["dtype"] = dtype if dtype == "auto" else getattr(torch, dtype)
    return kwargs


def processor_load_kwargs(trl: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments the tokenizer, processor and model config load with: the model's ``revision``
    and ``trust_remote_code`` (TRL: "the revision value is also used when loading processing classes")."""
    kwargs = model_load_kwargs(trl)
    return {key: kwargs[key] for key in ("revision", "trust_remote_code") if key in kwargs}
