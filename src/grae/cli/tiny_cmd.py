"""``grae tiny build``: regenerate the embedded tiny model (deterministic for a seed and thread count)."""

from __future__ import annotations

import typer


def default_build_dir(vlm: bool = False):
    """Where ``grae tiny build`` writes without ``-o``: the cache, so a rebuild never replaces the shipped model."""
    from grae.presets import cache_dir

    return cache_dir() / ("tiny-vlm-build" if vlm else "tiny-build")


def register(app: typer.Typer) -> None:
    tiny = typer.Typer(help="The embedded tiny model.", no_args_is_help=True)

    @tiny.command("build")
    def build(
        output_dir: str | None = typer.Option(None, "--output-dir", "-o",
                                              help="Where to write the checkpoint \\[default: $GRAE_CACHE/tiny-build, "
                                                   "never the shipped grae/assets/tiny; name that directory with -o to "
                                                   "replace it]."),
        vlm: bool = typer.Option(False, "--vlm", help="Build the tiny vision-language model (the tiny LM + a tiny "
                                                      "ViT as a LLaVA) \\[default dir: $GRAE_CACHE/tiny-vlm-build]."),
        recipe: str = typer.Option("v2", "--recipe", help="Named recipe variant (grae.tiny.build.RECIPES): v2 (the "
                                                          "shipped tiny), ladder (regime R2's base, the shipped "
                                                          "tiny-ladder), ladder-const and ladder-carry (the testbed "
                                                          "gate's attempts 1 and 2; the shipped tiny-carry; "
                                                          "docs/tiny.md)."),
        seed: int = typer.Option(0, help="Seed of the recipe (data order, initialisation)."),
        sft_steps: int | None = typer.Option(None, "--sft-steps", help="Supervised warm-up steps \\[default: the recipe's]."),
        threads: int | None = typer.Option(None, help="torch threads; the build is deterministic per thread count "
                                                      "(the shipped one: 1) \\[default: torch's]."),
        no_eval: bool = typer.Option(False, "--no-eval", help="Skip the held-out pass@k of the built model."),
        eval_problems: int = typer.Option(200, "--eval-problems", help="Held-out problems for that pass@k."),
        eval_samples: int = typer.Option(64, "--eval-samples", help="Samples per problem for that pass@k."),
        stage1_from: str | None = typer.Option(None, "--stage1-from", metavar="DIR",
                                               help="A finished stage-1-only build of the same recipe and thread "
                                                    "count: its weights stand for stage 1, only stage 2 runs."),
        set_: list[str] = typer.Option([], "--set", metavar="FIELD=JSON",
                                       help="Override a recipe field (TinyRecipe; TinyVLMRecipe with --vlm), e.g. "
                                            "--set label_noise=0.5; repeatable."),
    ) -> None:
        """Train the tokenizer and the tiny Llama from scratch with the shipped recipe (--vlm: the tiny
        VLM on the visual tasks). Recipe and measurements: docs/tiny.md."""
        from grae.tiny import main

        argv = ["--output-dir", output_dir or str(default_build_dir(vlm)), "--seed", str(seed),
                "--eval-problems", str(eval_problems), "--eval-samples", str(eval_samples)]
        argv += ["--vlm"] * vlm + ["--no-eval"] * no_eval + ["--recipe", recipe] * (recipe != "v2")
        argv += ["--sft-steps", str(sft_steps)] * (sft_steps is not None) + ["--threads", str(threads)] * bool(threads)
        argv += ["--stage1-from", stage1_from] * (stage1_from is not None)
        for field in set_:
            argv += ["--set", field]
        main(argv)

    @tiny.command("path")
    def path() -> None:
        """Print the directory of the shipped checkpoint."""
        from grae.tiny import tiny_model_path

        typer.echo(str(tiny_model_path()))

    app.add_typer(tiny, name="tiny")
