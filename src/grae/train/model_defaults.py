"""Defaults that fit the model and the data.

The tiny base (``configs/chain-sum.yaml``: the tiny model on chain sums, 500 steps at learning rate 2e-5,
completions and held-out answers of at most 8 tokens, 200 held-out problems × 64 samples) is the base of a run
(the first layer of :mod:`grae.train.resolve`) when the model is a tiny one (:func:`is_tiny`: a shipped one, none
named, or a local directory named ``tiny…``); the embedded default (``configs/default.yaml``, the two-modes
testbed) lays its own recipe on it. Any other model starts from grae's dataclass
defaults and TRL's own ``GRPOConfig`` defaults (learning rate 1e-6, 256 completion tokens), with these for a
pretrained model: :data:`PRETRAINED_EVAL` sizes the held-out evaluation and :data:`PRETRAINED_TASK` is the task
(the smollm2 recipe's chain sums in chat form) until a layer names another; held-out answers get the
training's token budget (``trl.max_completion_length``) unless a layer sets ``eval.max_tokens``. A preset with
a recipe (``smollm2``) lays it on this base, whether it is named by a flag or in a YAML file.

Sizes that do not fit a dataset are fitted when they were defaults and refused, naming the key, when they
were given (:func:`fit_sizes`).
"""

from __future__ import annotations

from typing import Any

#: the shipped tiny models: the embedded default's base is theirs
TINY_MODELS = ("tiny", "tiny-vlm", "tiny-ladder", "tiny-carry", "tiny-two-modes")
#: the held-out evaluation of a pretrained model where neither the recipe nor the flags size it
PRETRAINED_EVAL = {"num_problems": 100, "n": 8}
#: what a pretrained model trains on when no task is named: chain sums of 2-3 numbers in chat form, the
#: answer read as the completion's last number (configs/smollm2.yaml's task)
PRETRAINED_TASK = {"name": "chain_sum", "params": {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 2,
                                                   "prompt_style": "chat", "system_prompt": None,
                                                   "plain_answer": "last_number"}}


def is_tiny(model: Any) -> bool:
    """Whether ``model`` is a tiny model: a shipped one (None: the default, the tiny model), or a local directory
    named like one (``tiny…``: ``grae tiny build``'s outputs and copies of the shipped ones)."""
    if model is None or model in TINY_MODELS:
        return True
    from pathlib import Path

    path = Path(str(model)).expanduser()
    return path.name.startswith("tiny") and path.is_dir()


def fit_sizes(cfg: Any, task: Any) -> list[str]:
    """Fit ``cfg.task.train_size`` and ``cfg.eval.num_problems`` to a dataset task whose splits are loaded
    (:class:`grae.data.RowsTask`): a size above what the data has is lowered to all it has, with one line
    saying so (returned), when it was a default; one the user gave (``cfg.explicit_keys``; None: every key)
    is refused with :class:`~grae.train.errors.ConfigError` naming the key. ``cfg`` is changed in place."""
    from grae.data import RowsTask
    from grae.data.band import BandTask
    from grae.train.errors import ConfigError

    if isinstance(task, BandTask):  # the band's size first; the held-out split is the base task's
        return [*fit_band_size(cfg, task), *fit_sizes(cfg, task.base)]
    if not isinstance(task, RowsTask) or task.eval_only:
        return []
    train, held = task.splits()
    explicit = getattr(cfg, "explicit_keys", None)

    def given(key: str) -> bool:
        return explicit is None or key in explicit

    notes = []
    asked = cfg.task.train_size
    if asked is not None and asked > len(train):
        if given("task.train_size"):
            raise ConfigError(f"task.train_size: {asked} training problems asked, but {task.name} has {len(train)} "
                              f"(distinct, {len(held)} more held out); set --task.train_size {len(train)}, or null "
                              "for the whole training split")
        cfg.task.train_size = None
        notes.append(f"training on all {len(train)} training problems of {task.name} (the default task.train_size "
                     f"{asked} asks for more; --task.train_size N sets it)")
    asked = cfg.eval.num_problems
    if cfg.eval.enabled and asked > len(held):
        if given("eval.num_problems") or not held:
            raise ConfigError(f"eval.num_problems: {asked} held-out problems asked, but {task.name} holds out "
                              f"{len(held)}; lower eval.num_problems, hold out more with --task.params.heldout_size N, "
                              "or turn the held-out evaluation off with --eval.enabled false")
        cfg.eval.num_problems = len(held)
        notes.append(f"held-out evaluation on all {len(held)} held-out problems of {task.name} (the default "
                     f"eval.num_problems {asked} asks for more; --task.params.heldout_size N holds out more)")
    return notes


def fit_band_size(cfg: Any, task: Any) -> list[str]:
    """``cfg.task.train_size`` fitted to the problems of a band file (:class:`grae.data.band.BandTask`): a default
    above them becomes null (all of them, one line says so); one the user gave is refused naming the key."""
    from grae.train.errors import ConfigError

    asked, kept = cfg.task.train_size, len(task)
    if asked is None or asked <= kept:
        return []
    explicit = getattr(cfg, "explicit_keys", None)
    if explicit is None or "task.train_size" in explicit:
        raise ConfigError(f"task.train_size: {asked} training problems asked, but the band file {cfg.task.train_subset} "
                          f"keeps {kept}; set --task.train_size {kept} or null (all of them; training cycles over them)")
    cfg.task.train_size = None
    return [f"training on all {kept} problems of the band file {cfg.task.train_subset} (the default task.train_size "
            f"{asked} asks for more)"]
