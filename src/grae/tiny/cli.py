"""``grae tiny build``'s builder entry point (:func:`grae.tiny.main`): the tiny LM (:mod:`grae.tiny.build`)
or, with ``--vlm``, the tiny VLM (:mod:`grae.tiny.vlm`). A module of its own, above both: vlm builds on
build, so build cannot import vlm to dispatch to it."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from .build import RECIPES, build_tiny
from .vlm import build_tiny_vlm


def main(argv: Sequence[str] | None = None) -> Path:
    """``grae tiny build`` entry point: ``main(["--output-dir", DIR, "--seed", "0", ...])``; ``--vlm``
    builds the tiny vision-language model (:mod:`grae.tiny.vlm`) instead."""
    p = argparse.ArgumentParser(prog="grae tiny build", description=build_tiny.__doc__)
    p.add_argument("--output-dir", "-o", required=True)
    p.add_argument("--vlm", action="store_true", help="build the tiny vision-language model (grae.tiny.vlm)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--recipe", default="v2", choices=sorted(RECIPES),
                   help="named TinyRecipe variant: v2 (the shipped tiny), ladder (regime R2's base, tiny-ladder), "
                        "ladder-const, ladder-carry (the gate's attempts 1 and 2; tiny-carry)")
    p.add_argument("--sft-steps", type=int, default=None)
    p.add_argument("--stage1-from", default=None, metavar="DIR",
                   help="a finished stage-1-only build of the same recipe and thread count: run stage 2 only")
    p.add_argument("--threads", type=int, default=None, help="torch threads (determinism holds per thread count)")
    p.add_argument("--no-eval", action="store_true")
    p.add_argument("--eval-problems", type=int, default=200)
    p.add_argument("--eval-samples", type=int, default=64)
    p.add_argument("--set", action="append", default=[], metavar="FIELD=JSON",
                   help="override a TinyRecipe (TinyVLMRecipe with --vlm) field, e.g. --set label_noise=0.5")
    a = p.parse_args(argv)
    overrides = {}
    for kv in a.set:
        k, v = kv.split("=", 1)
        try:
            overrides[k] = json.loads(v)
        except json.JSONDecodeError:
            overrides[k] = v
    if a.vlm:
        if a.sft_steps is not None:
            overrides["sft_steps"] = a.sft_steps
        return build_tiny_vlm(a.output_dir, seed=a.seed, evaluate=not a.no_eval, eval_problems=a.eval_problems,
                              eval_samples=a.eval_samples, num_threads=a.threads, **overrides)
    return build_tiny(a.output_dir, seed=a.seed, sft_steps=a.sft_steps, evaluate=not a.no_eval,
                      eval_problems=a.eval_problems, eval_samples=a.eval_samples,
                      num_threads=a.threads, recipe_name=a.recipe, stage1_from=a.stage1_from, **overrides)
