"""A prompt that does not fit in the model's context with its completion budget: the dry run measures the longest
training and held-out prompt in the model's tokens as the run tokenizes them (the chat template applied), says it
in its plan, and stops (exit 1) naming the key to lower when one does not fit; ``grae train`` refuses the same
before anything is claimed or trained (exit 2)."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import pytest

pytest.importorskip("trl", reason="the train extra; `make test` installs it")
from typer.testing import CliRunner  # noqa: E402

#: the tiny model's context (tests/tiny_model.py: max_position_embeddings)
CONTEXT = 128
CHAT_TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")
#: the training file's line whose prompt is the longest
LONG_LINE = 7


def _app():
    import typer

    from grae.cli import train_cmd

    app = typer.Typer()
    train_cmd.register(app)
    app.command("unused")(lambda: None)  # two commands: "train" stays a subcommand
    return app


def _invoke(*args: str) -> tuple[int, list[str]]:
    result = CliRunner().invoke(_app(), ["train", *args])
    return result.exit_code, [line for line in result.output.splitlines() if line.strip()]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A tiny model (named ``tiny…``: the tiny defaults) with a chat template and a 128-token context, a training
    file of 24 short problems and one long one (line 7), and a held-out file of 8 short ones."""
    from transformers import AutoTokenizer

    from tiny_model import build_random_tiny

    root = tmp_path_factory.mktemp("context")
    model = build_random_tiny(str(root / "tiny-short"))
    tokenizer = AutoTokenizer.from_pretrained(model)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(model)
    rows = [{"question": f"What is {a} + {a % 7}?", "answer": str(a + a % 7)} for a in range(24)]
    rows[LONG_LINE - 1] = {"question": "What is 6 + 6? Think of six apples and six more apples.",
                           "answer": "12"}
    train, held = root / "train.jsonl", root / "held.jsonl"
    train.write_text("".join(json.dumps(row) + "\n" for row in rows))
    held.write_text("".join(json.dumps({"question": f"What is {a} + 2?", "answer": str(a + 2)}) + "\n"
                            for a in range(30, 38)))
    args = ["--model", model, "--task.name", str(train), "--task.params.heldout_path", str(held)]
    return SimpleNamespace(root=root, model=model, train=train, held=held, args=args)


def _trl_lengths(model: str, prompts: list) -> list[int]:
    """The prompts' lengths as TRL's own ``GRPOTrainer._tokenize_prompts`` tokenizes them."""
    from transformers import AutoTokenizer
    from trl import GRPOTrainer

    trainer = SimpleNamespace(processing_class=AutoTokenizer.from_pretrained(model), _is_vlm=False,
                              environment_factories=None, tools=None, chat_template=None, chat_template_kwargs={})
    return [len(ids) for ids in GRPOTrainer._tokenize_prompts(trainer, prompts)[0]]


def _longest(setup) -> tuple[int, int]:
    """The longest training prompt (TRL's tokens) and the longest held-out prompt (the evaluation's tokens)."""
    from transformers import AutoTokenizer

    from grae.data import get_task

    task = get_task(str(setup.train), heldout_path=str(setup.held))
    tokenizer = AutoTokenizer.from_pretrained(setup.model)
    held = [tokenizer.apply_chat_template(e["prompt"], tokenize=False, add_generation_prompt=True)
            for e in task.heldout(None)]
    return (max(_trl_lengths(setup.model, [e["prompt"] for e in task.train(None)])),
            max(len(ids) for ids in tokenizer(held)["input_ids"]))


def test_prompts_are_measured_as_trl_tokenizes_them(setup):
    from transformers import AutoTokenizer

    from grae.train.context_check import training_prompt_lengths

    tokenizer = AutoTokenizer.from_pretrained(setup.model)
    chat = [[{"role": "user", "content": f"What is {a} + {a}?" * (a % 3 + 1)}] for a in range(9)]
    plain = [f"What is {a} + {a}?\nAnswer:" * (a % 3 + 1) for a in range(9)]
    for prompts in (chat, plain):
        assert training_prompt_lengths(tokenizer, prompts) == _trl_lengths(setup.model, prompts)


def test_a_prompt_too_long_for_its_budget_stops_the_dry_run_naming_the_keys(setup):
    train, held = _longest(setup)
    assert train + 8 <= CONTEXT < train + 32 and held + 64 > CONTEXT > held + 32  # what the budgets below test
    code, lines = _invoke(*setup.args, "--trl.max_completion_length", "32", "--eval.max_tokens", "64", "--dry-run")
    assert code == 1, "\n".join(lines)
    verdict = (f"error: dry run: training here would stop: context: 1 of 24 training prompts do not fit with "
               f"trl.max_completion_length 32 in the model's context of {CONTEXT} tokens "
               f"(config.max_position_embeddings): the longest (problem {setup.train}:{LONG_LINE}) takes {train} "
               f"tokens with the chat template, {train} + 32 = {train + 32}; lower trl.max_completion_length to "
               f"{CONTEXT - train}, or shorten the prompts (task.params, or shorter problems); context: 8 of 8 "
               f"held-out prompts do not fit with eval.max_tokens 64")
    for line in (lines[0], lines[-1]):
        assert line.startswith(verdict), line
        assert f"lower eval.max_tokens to {CONTEXT - held}," in line, line
    row = next(line for line in lines if line.strip().startswith("context "))
    assert f"longest training prompt {train} tokens (problem {setup.train}:{LONG_LINE})" in row, row


def test_prompts_that_fit_dry_run_as_before_with_the_longest_in_the_plan(setup):
    train, held = _longest(setup)
    code, lines = _invoke(*setup.args, "--trl.max_completion_length", "12", "--eval.max_tokens", "12", "--dry-run")
    assert code == 0, "\n".join(lines)
    assert lines[-1].startswith("dry run: the config is valid and nothing seen here stops the run")
    row = next(line for line in lines if line.strip().startswith("context "))
    assert re.sub(r"\s+", " ", row).strip() == (
        f"context longest training prompt {train} tokens (problem {setup.train}:{LONG_LINE}) + "
        f"trl.max_completion_length 12 = {train + 12} of {CONTEXT}; longest held-out prompt {held} tokens (problem "
        f"{setup.held}:1) + eval.max_tokens 12 = {held + 12} of {CONTEXT}; the model's context {CONTEXT} tokens "
        "(config.max_position_embeddings); prompts measured with the chat template as the run tokenizes them")


def test_the_run_refuses_a_prompt_too_long_before_step_1(setup):
    out = setup.root / "run"
    flags = [*setup.args, "--trl.max_completion_length", "32", "--output-dir", str(out)]
    code, lines = _invoke(*flags)
    assert code == 2, "\n".join(lines)
    refusal = [line for line in lines if line.startswith("error:")]
    assert len(refusal) == 1 and lines[-1] == refusal[0], "\n".join(lines)
    assert refusal[0].startswith("error: context: 1 of 24 training prompts do not fit with trl.max_completion_length "
                                 f"32 in the model's context of {CONTEXT} tokens"), refusal[0]
    assert not out.exists()  # nothing claimed, nothing trained
    _, dry = _invoke(*flags, "--dry-run")
    assert dry[0] == "error: dry run: training here would stop: " + refusal[0].removeprefix("error: ")
