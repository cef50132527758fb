"""The tiny-model build's data: the SFT stream and the tokenizer corpus.

Prompts are :mod:`grae.data`'s ``plain`` style; held-out evaluation and rewards are grae.data's task
(``evaluate.py``). The SFT stream is the raw reasoning-gym generator at ``SFT_DATA_SEED``, kept as it
was so that ``grae tiny build`` reproduces the shipped checkpoint bit for bit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: Default task for the shipped checkpoint: reasoning-gym ``chain_sum`` with two
#: terms of 1-2 digits and ``+``/``-`` (answers in [-98, 198]).
DEFAULT_TASK = "chain_sum"
DEFAULT_TASK_KWARGS: dict[str, Any] = dict(min_terms=2, max_terms=2, min_digits=1, max_digits=2)

#: Seeds of the reasoning-gym generators. SFT never trains on a question of grae.data's held-out split
#: nor on the first 1000 questions drawn at ``HELDOUT_SEED`` (the build's original held-out set, still
#: excluded so that the build reproduces the shipped checkpoint).
SFT_DATA_SEED = 1
HELDOUT_SEED = 12345


def format_prompt(question: str) -> str:
    """The ``plain`` prompt style (``grae.data.procedural_prompt``): ``f"{question}\\nAnswer:"``; the
    completion is ``" <answer>" + eos``."""
    from grae.data.prompts import procedural_prompt

    return procedural_prompt(question, "plain")


@dataclass
class TinyTask:
    """The raw reasoning-gym generator behind the SFT stream."""

    name: str = DEFAULT_TASK
    kwargs: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_TASK_KWARGS))

    def dataset(self, size: int, seed: int):
        import reasoning_gym

        return reasoning_gym.create_dataset(self.name, size=size, seed=seed, **self.kwargs)


def tokenizer_corpus(n_per_task: int = 2000, seed: int = 0):
    """Prompt+answer strings from a few small reasoning-gym tasks, for training the BPE tokenizer.

    Several tasks (not only the default one) so the tokenizer stays usable for other
    arithmetic/string tasks.
    """
    import reasoning_gym

    specs = [
        ("chain_sum", dict(min_terms=2, max_terms=3, min_digits=1, max_digits=3)),
        ("basic_arithmetic", dict(min_terms=2, max_terms=3, min_digits=1, max_digits=2)),
        ("products", dict(min_terms=2, max_terms=2, min_digits=1, max_digits=2)),
        ("gcd", dict(min_value=1, max_value=100)),
        ("lcm", dict(max_value=20)),
        ("count_bits", dict(min_n=1, max_n=255)),
        ("spell_backward", dict(min_word_len=3, max_word_len=5)),
    ]
    for name, kw in specs:
        ds = reasoning_gym.create_dataset(name, size=n_per_task, seed=seed, **kw)
        for i in range(n_per_task):
            e = ds[i]
            yield format_prompt(e["question"]) + " " + str(e["answer"])
