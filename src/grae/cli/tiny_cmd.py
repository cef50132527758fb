"""``grae tiny build``: regenerate the embedded tiny model (deterministic for a seed and thread count)."""

from __future__ import annotations

import typer


def default_build_dir(vlm: bool = False):
    """Where ``grae tiny build`` writes without ``-o``: the cache, so a rebuild never replaces the shipped model."""
    from grae.presets import cache_dir

    return cache_dir() / ("tiny-vlm-build" if vlm else "tiny-build")


def register(app: typer.Typer) -> None:
    tiny = typer.Typer(help="The embedded tiny model.", no_args_is_help=True)

    @tiny.command("build", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
    def build(
        ctx: typer.Context,
        output_dir: str = typer.Option(None, "--output-dir", "-o",
                                       help="Where to write the checkpoint [default: $GRAE_CACHE/tiny-build, never the "
                                            "shipped grae/assets/tiny; name that directory with -o to replace it]."),
        vlm: bool = typer.Option(False, "--vlm", help="Build the tiny vision-language model (the tiny LM + a tiny "
                                                      "ViT as a LLaVA) [default dir: $GRAE_CACHE/tiny-vlm-build]."),
    ) -> None:
        """Train the tokenizer and the tiny Llama from scratch with the shipped recipe (--vlm: the tiny
        VLM on the visual tasks). Further options (--seed, --sft-steps, --threads, --no-eval,
        --set FIELD=VALUE) go to the builder."""
        from grae.tiny import main

        main(["--output-dir", output_dir or str(default_build_dir(vlm)), *(["--vlm"] if vlm else []), *ctx.args])

    @tiny.command("path")
    def path() -> None:
        """Print the directory of the shipped checkpoint."""
        from grae.tiny import tiny_model_path

        typer.echo(str(tiny_model_path()))

    app.add_typer(tiny, name="tiny")
