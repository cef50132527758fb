"""How ``grae train`` resolves a run's configuration: one pipeline of layers, each a function of the last.

    model defaults  →  preset recipe  →  file  →  flags  →  validation

Every source is first read into one form, :func:`assignments`: dotted keys and their values
(``trl.learning_rate: 2e-5``), a nested mapping read as its leaves, a GRPOConfig field given flat
(``learning_rate``) moved under ``trl``, a ``trl grpo`` recipe's script keys mapped to grae's
(``model_name_or_path`` → ``model``, ``dataset_name`` → ``task``; :mod:`grae.train.trl_recipe`). So the same
keys are the same assignments whether they come as ``--trl.x`` flags, as a YAML file nested under ``trl:``
or flat. The layers are then laid one on another by :func:`apply_layer`, whatever their source:

1. **model defaults** (:func:`model_defaults`): the run's model — the one the flags name, else the file,
   else the tiny model — picks the base. A tiny model's is the tiny base (``configs/chain-sum.yaml``: the tiny
   model on chain sums); any other model's is grae's dataclass defaults and TRL's own, with
   :data:`~grae.train.model_defaults.PRETRAINED_TASK` and :data:`~grae.train.model_defaults.PRETRAINED_EVAL`.
2. **preset recipe**: a preset with a recipe of its own (``smollm2``, ``tiny-vlm``:
   :data:`grae.presets.PRESET_RECIPES`) lays it on top, however the preset was named (a flag, a YAML key,
   ``model_name_or_path``).
3. **file**: the CONFIG file (a path or a packaged recipe name); without one, the embedded default
   (``configs/default.yaml``, the two-modes testbed) unless the flags name a model or a task
   (:func:`runs_default_recipe`): ``grae train --task.name gcd`` is the tiny base on gcd.
4. **flags**: the ``--key value`` overrides.
5. **validation**: :func:`derived_defaults` (``eval.max_tokens``, where no layer gives it, is the training's
   token budget ``trl.max_completion_length``), then the dataclasses and every check
   (:func:`grae.train.config.validate`).

A layer replaces each key it gives; mappings merge key by key (an empty mapping ``{}`` clears one). A layer that
names the task (``task.name``) starts ``task.params`` from ``{}``, and one that names the estimator starts
``estimator_params`` from ``{}``: parameters written for another task or estimator never carry over (a default's
or a preset's, silently; the user's own, with a note naming the keys dropped: :attr:`Resolution.notes`). The command
line restating the task or estimator the layers below name (``--task.name gcd`` over a file that trains gcd, or over
the tiny base's chain_sum) keeps its parameters; a CONFIG file naming the task starts them anew over the
defaults (a file is a whole recipe).
:func:`resolved_lines` prints every resolved key (``grae train --dry-run``), so two runs can be diffed.
"""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

from grae.train.config_files import CONFIG_DIR, MANAGED_TRL_KEYS, read_yaml, resolve_config_path
from grae.train.errors import ConfigError
from grae.train.trl_values import trl_fields

#: the pipeline's layers, in order (the dry run and the docs name them)
LAYERS = ("model defaults", "preset recipe", "file", "flags")
#: the packaged recipe ``grae train`` runs without a CONFIG (``configs/default.yaml``: the embedded default)
DEFAULT_RECIPE = "default"
#: the packaged recipe every tiny model's run starts from (layer 1): the tiny model on chain sums
TINY_BASE = "chain-sum"


@dataclasses.dataclass
class Resolution:
    """The layers of one run's configuration (dotted assignments each) and their merge."""

    #: (layer name, where it came from, dotted assignments), in the order applied
    layers: list[tuple[str, str, dict[str, Any]]]
    #: the merged nested configuration, before the dataclasses
    raw: dict[str, Any]
    #: the dotted keys (and their parent sections) the user gave in a file of their own or on the command line
    explicit: frozenset[str]
    #: one line per layer that named another task or estimator and so dropped parameters (which, from where)
    notes: tuple[str, ...] = ()


def resolve(source: str | Path | None, overrides: dict[str, Any] | None, grae_keys: frozenset[str]) -> Resolution:
    """The pipeline up to validation: ``source`` (a YAML path, a packaged recipe name, or None) and the
    command-line ``overrides`` (dotted keys as given, dashes allowed) read as layers and merged. ``grae_keys``
    are grae's own top-level keys (the fields of :class:`grae.train.config.TrainConfig`)."""
    from grae.presets import PRESET_RECIPES

    flags = assignments(_underscored(overrides or {}), "command line", grae_keys)
    file_layer: dict[str, Any] = {}
    where = ""
    if source is None and runs_default_recipe(flags):
        source = DEFAULT_RECIPE
    if source is not None:
        path = resolve_config_path(source)
        where = str(path)
        file_layer = assignments(read_yaml(path), where, grae_keys)
    model = flags.get("model", file_layer.get("model", "tiny"))
    layers = [("model defaults", f"model {model}", model_defaults(model, grae_keys))]
    if isinstance(model, str) and model in PRESET_RECIPES:
        preset = resolve_config_path(PRESET_RECIPES[model])
        layers.append(("preset recipe", str(preset), assignments(read_yaml(preset), str(preset), grae_keys)))
    if source is not None:
        layers.append(("file", where, file_layer))
    if flags:
        layers.append(("flags", "command line", flags))
    raw: dict[str, Any] = {}
    notes: list[str] = []
    written: set[str] = set()  # the keys a CONFIG file or the flags gave so far: only their dropping is noted
    for name, where_from, layer in layers:
        raw = apply_layer(raw, layer, notes, f"the {name} ({where_from})", frozenset(written), name == "flags")
        if name in ("file", "flags"):
            written.update(layer)
    derived_defaults(raw)
    user_file = source is not None and resolve_config_path(source).parent != CONFIG_DIR
    given = [*(file_layer if user_file else {}), *flags]
    explicit = frozenset(prefix for key in given for prefix in _prefixes(key))
    return Resolution(layers, raw, explicit, tuple(notes))


def runs_default_recipe(flags: dict[str, Any]) -> bool:
    """Whether a run without a CONFIG is the embedded default's: its flags name no model and no task. A run that
    names one is not that recipe (its band file, held-out strata and exact evaluation are the testbed's) and starts
    from its model's defaults, as a CONFIG file naming that model would (``grae train`` is the testbed's recipe;
    ``--model tiny-two-modes`` alone is that model on the tiny base's task)."""
    return "model" not in flags and "task.name" not in flags


def model_defaults(model: Any, grae_keys: frozenset[str]) -> dict[str, Any]:
    """Layer 1: the base of a run of ``model``: the tiny base's assignments for a tiny model
    (:func:`grae.train.model_defaults.is_tiny`), the pretrained defaults for any other."""
    from grae.train.model_defaults import PRETRAINED_EVAL, PRETRAINED_TASK, is_tiny

    if is_tiny(model):
        return assignments(read_yaml(resolve_config_path(TINY_BASE)), "the tiny base", grae_keys)
    return {**_leaves("task", copy.deepcopy(PRETRAINED_TASK)), **_leaves("eval", dict(PRETRAINED_EVAL))}


def derived_defaults(raw: dict[str, Any]) -> None:
    """Keys that follow others where no layer gives them: ``eval.max_tokens`` is the training's token budget
    (``trl.max_completion_length``, TRL's default where none is given). ``raw`` is changed in place."""

    heldout, trl = raw.get("eval"), raw.get("trl")
    if not isinstance(heldout, dict) or "max_tokens" in heldout:
        return  # a bad section is named by the dataclasses
    budget = trl.get("max_completion_length") if isinstance(trl, dict) else None
    heldout["max_tokens"] = budget if budget is not None else trl_fields()["max_completion_length"].default


def apply_layer(raw: dict[str, Any], layer: dict[str, Any], notes: list[str] | None = None,
                where: str = "a layer", written: frozenset[str] = frozenset(), restates: bool = False) -> dict[str, Any]:
    """``raw`` with ``layer``'s dotted assignments laid on it (a copy): naming the task starts ``task.params`` from
    ``{}`` and naming the estimator starts ``estimator_params`` from ``{}``, unless it names the same one as ``raw``
    and ``restates`` (the command line) or the user's file or flags (``written``) named it already (the dropped keys
    among ``written``, those the user's file or flags gave, appended to ``notes`` as one line, ``where`` saying which
    layer; a default's parameters are dropped without a word); each other key is set."""
    out = copy.deepcopy(raw)
    section = out.get("task") if isinstance(out.get("task"), dict) else {}
    if "task.name" in layer and (layer["task.name"] != section.get("name") or not (restates or "task.name" in written)):
        _dropped(notes, "task.params", section.get("params"), layer, f"task {layer['task.name']!r}",
                 f"task {section.get('name')!r}", where, written)
        out["task"] = {**section, "params": {}}
    if "estimator" in layer and (layer["estimator"] != out.get("estimator") or not (restates or "estimator" in written)):
        _dropped(notes, "estimator_params", out.get("estimator_params"), layer, f"estimator {layer['estimator']!r}",
                 f"estimator {out.get('estimator')!r}", where, written)
        out["estimator_params"] = {}
    for key, value in layer.items():
        set_dotted(out, key, copy.deepcopy(value))
    return out


def _dropped(notes: list[str] | None, section: str, params: Any, layer: dict[str, Any], new: str, old: str,
             where: str, written: frozenset[str]) -> None:
    """Note the parameters of ``section`` that the user wrote and a layer naming ``new`` drops (those it does not
    give again itself)."""
    if notes is None or not isinstance(params, dict):
        return
    keys = sorted(key for key in params if f"{section}.{key}" not in layer
                  and (f"{section}.{key}" in written or section in written))
    if keys:
        notes.append(f"{section}: {where} names {new}, not {old}, so the parameters written for {old} are dropped "
                     f"({', '.join(keys)}); give them again under {section} if {new} takes them")


def set_dotted(raw: dict, key: str, value: Any) -> None:
    """Set ``raw[a][b][c] = value`` for ``key`` ``a.b.c``; a section that is null becomes a mapping."""
    parts = key.split(".")
    node = raw
    for part in parts[:-1]:
        if node.get(part) is None:
            node[part] = {}
        node = node[part]
        if not isinstance(node, dict):
            raise ConfigError(f"{key}: {part!r} is not a section")
    node[parts[-1]] = value


def assignments(raw: dict[str, Any], where: str, grae_keys: frozenset[str]) -> dict[str, Any]:
    """One source's keys (a YAML file's top level, or the command line's dotted keys) as dotted assignments:
    nested mappings as their leaves, GRPOConfig fields given flat under ``trl``, ``trl grpo`` script keys in
    grae's spelling (:func:`grae.train.trl_recipe.recipe_assignments`), ``reward_funcs: a,b`` as a list. One
    setting given under two spellings in the same source is refused (the later would drop the earlier)."""
    from grae.train.trl_recipe import RecipeError, recipe_assignments

    raw = dict(raw)
    _refuse_keys_not_named(raw, "", where)
    given = list(raw)
    try:
        recipe = recipe_assignments(raw)
    except RecipeError as err:
        raise ConfigError(f"{err} ({where})") from None
    spelled: list[tuple[str, str]] = []
    own: dict[str, Any] = {}
    for key, value in raw.items():
        target = _flat_key(key, grae_keys)
        for leaf, leaf_value in _leaves(target, value).items():
            spelled.append((leaf if target == key else key, leaf))
            own[leaf] = leaf_value
    _refuse_two_spellings([*spelled, *_recipe_sources(given, recipe)], "on the command line"
                          if where == "command line" else f"in {where}")
    out: dict[str, Any] = {}
    for key, value in recipe.items():
        if key == "task.train_size" and "task.train_size" in own:
            continue  # the whole split only where no size is given
        out.update(_leaves(key, value))
    out.update(own)  # grae's own peft section wins over use_peft's defaults
    if isinstance(out.get("reward_funcs"), str):  # trl grpo --reward_funcs a,b; one name is a list of one
        out["reward_funcs"] = [name.strip() for name in out["reward_funcs"].split(",") if name.strip()]
    return out


def _refuse_keys_not_named(raw: dict[str, Any], section: str, where: str) -> None:
    """Refuse a mapping key that is not a string (YAML's ``1: 2``, ``~: 3``, ``true: x``) anywhere in ``raw``: no
    setting has such a name."""
    for key, value in raw.items():
        if not isinstance(key, str):
            under = f" under {section}" if section else ""
            raise ConfigError(f"{section or 'config'}: the key {key!r}{under} ({where}) is not a name: every config key "
                              f"is text; quote it ('{key}': …) if a name was meant, or remove it")
        if isinstance(value, dict):
            _refuse_keys_not_named(value, f"{section}.{key}" if section else key, where)


def _leaves(key: str, value: Any) -> dict[str, Any]:
    """``{key: value}`` with a non-empty mapping ``value`` read as its leaves (``trl: {lr: 1}`` → ``trl.lr``)."""
    if not isinstance(value, dict) or not value:
        return {key: value}
    out: dict[str, Any] = {}
    for sub, sub_value in value.items():
        out.update(_leaves(f"{key}.{sub}", sub_value))
    return out


def _prefixes(key: str) -> list[str]:
    parts = key.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _underscored(overrides: dict[str, Any]) -> dict[str, Any]:
    """Command-line keys with the dashes of their first part as underscores (``--max-steps``, ``--dataset-name``)."""
    out: dict[str, Any] = {}
    for key, value in overrides.items():
        head, dot, rest = key.partition(".")
        out[head.replace("-", "_") + dot + rest] = value
    return out


def _flat_key(key: str, grae_keys: frozenset[str]) -> str:
    """A key as grae spells it: ``learning_rate`` → ``trl.learning_rate`` (a GRPOConfig field given flat, as
    TRL's own scripts take it); grae's own keys and dotted ones as they are."""

    head = key.split(".")[0]
    if head in grae_keys:
        if head in trl_fields() and head not in MANAGED_TRL_KEYS:
            raise ConfigError(f"{key}: ambiguous, both a grae key and a trl.GRPOConfig field; "
                              f"write --{head} for grae's or --trl.{head} for TRL's")
        return key
    if head in trl_fields():
        return f"trl.{key}"
    return key


def _recipe_sources(given: list[str], recipe: dict[str, Any]) -> list[tuple[str, str]]:
    """``(key as given, dotted key it sets)`` for the ``trl grpo`` script keys among ``given`` whose assignment
    is in ``recipe`` (:func:`grae.train.trl_recipe.recipe_assignments`)."""
    from grae.train.trl_recipe import MODEL_INIT_KEYS, RENAMED

    targets = {**RENAMED, **{key: f"trl.model_init_kwargs.{target}" for key, target in MODEL_INIT_KEYS.items()},
               "dataset_name": "task.name"}
    return [(key, targets[key]) for key in given if key in targets and targets[key] in recipe]


def _refuse_two_spellings(pairs: list[tuple[str, str]], where: str) -> None:
    """Refuse one setting given under two names (``model`` and ``model_name_or_path``, ``learning_rate`` and
    ``trl.learning_rate``): ``pairs`` are ``(key as given, dotted key it sets)``."""
    seen: dict[str, str] = {}
    for key, target in pairs:
        if target in seen and seen[target] != key:
            raise ConfigError(f"{target}: given twice {where}, as {seen[target]} and as {key}; one setting takes one "
                              "spelling: keep one of them")
        seen.setdefault(target, key)


def resolved_lines(config: dict[str, Any]) -> list[str]:
    """Every resolved key of ``config`` (``to_dict(TrainConfig)``) as ``key: value`` (JSON values), one a line,
    top-level keys in the schema's order, the keys of each section sorted (the order a file or the flags give them
    in changes nothing): what ``grae train --dry-run`` prints so that two runs can be diffed. ``trl`` keys
    not listed are at TRL's GRPOConfig defaults."""
    return [f"{leaf}: {json.dumps(value, sort_keys=True, default=str)}"
            for key, section in config.items() for leaf, value in sorted(_leaves(key, section).items())]
