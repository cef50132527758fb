"""The :class:`Task` interface shared by procedural, Hugging Face and local-file tasks.

An *example* is a plain ``dict`` with at least

* ``question_id`` (str): stable identifier (same task parameters -> same id across runs and machines);
* ``task`` (str): name of the task that produced it (the component name inside a mix);
* ``question`` (str): raw question / problem text;
* ``prompt``: ``str`` (``prompt_style="plain"``) or ``[{"role": ..., "content": ...}, ...]`` (``"chat"``);
* ``answer`` (str): gold answer;
* ``source`` (str): where it came from (``reasoning_gym/<generator>``, a hub repo, a file).
"""

from __future__ import annotations

import hashlib
import itertools
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import datasets

    from grae.rewards.adapters import FormatReward, TaskReward

#: Keys every example has (and every :func:`to_hf_dataset` dataset has as columns).
EXAMPLE_KEYS = ("question_id", "task", "question", "prompt", "answer", "source")


def question_key(text: str) -> str:
    """Deduplication key of a question: whitespace-normalised text (two questions that differ only in
    spacing or line breaks are the same question)."""
    return " ".join(str(text).split())


def text_id(text: str, length: int = 16) -> str:
    """Stable short id derived from a question's dedup key (SHA-1 hex prefix)."""
    return hashlib.sha1(question_key(text).encode("utf-8")).hexdigest()[:length]


class Task(ABC):
    """A source of verifiable questions with a binary scorer.

    Subclasses implement :meth:`iter_train`, :meth:`heldout` and :meth:`score`.

    Attributes:
        name: registry name; written into every example's ``task`` field.
        prompt_style: ``"plain"`` or ``"chat"`` (see :mod:`grae.data.prompts`).
        answer_format: what :func:`grae.rewards.format_reward` checks for this task (``"boxed"``,
            ``"answer_tag"`` or ``"plain"``).
    """

    name: str
    prompt_style: str
    answer_format: str
    #: the verifier accepts only the completions of :meth:`gold_completions` (by default one, the gold answer's
    #: :meth:`answer_completion`), so a problem's pass rate is their summed teacher-forced probability
    #: (:mod:`grae.eval.gold`); answer-set tasks need not say it
    one_gold_completion: bool = False

    # --- splits --------------------------------------------------------------------------------

    @abstractmethod
    def iter_train(self, seed: int = 0) -> Iterator[dict]:
        """Training examples in ``seed``-determined order, deduplicated and disjoint from
        :meth:`heldout`. May be finite (datasets) or very long (procedural generators)."""

    @abstractmethod
    def heldout(self, n: int | None = None) -> list[dict]:
        """The first ``n`` held-out examples (``None``: all of the held-out split). Deterministic: does
        not depend on any seed, so evaluations are comparable across runs."""

    def train(self, n: int | None, seed: int = 0) -> list[dict]:
        """``n`` training examples for ``seed`` (``None``: all of a finite training split).

        Raises ``ValueError`` if fewer than ``n`` distinct training questions exist.
        """
        if n is None:
            return list(self.iter_train(seed))
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        out = list(itertools.islice(self.iter_train(seed), n))
        if len(out) < n:
            raise ValueError(
                f"task {self.name!r} has only {len(out)} distinct training questions available "
                f"(asked for {n}). {self._shortage_hint()}"
            )
        return out

    def _shortage_hint(self) -> str:
        return "Ask for fewer examples."

    #: score a completion cut at the token budget as if it had ended (the reward of :meth:`reward_fn`; default: 0.0)
    score_truncated: bool = False

    # --- scoring -------------------------------------------------------------------------------

    @abstractmethod
    def score(self, completion: Any, example: dict) -> float:
        """1.0 if ``completion`` (str, bytes or TRL message list) answers ``example`` correctly, else 0.0.
        Never raises on hostile completions."""

    def score_batch(self, completions: list[Any], examples: list[dict]) -> list[float]:
        """:meth:`score` of each pair; tasks with a slow verifier override it to verify in parallel."""
        return [self.score(c, e) for c, e in zip(completions, examples)]

    def parse_answer(self, completion: Any) -> str | None:
        """The canonical final answer of ``completion`` as this task's verifier parses it (``None`` when it
        has none): the estimator context's ``answer_id`` (outcome exploration). Extraction by
        :attr:`answer_format` (``boxed``: :func:`grae.rewards.extract_math_answer`; ``answer_tag``: the last
        ``<answer>``; ``plain``: the first line), then :func:`grae.rewards.verify.canonical_answer`."""
        from grae.rewards.extract import completion_text, extract_answer_tag, extract_math_answer
        from grae.rewards.verify import canonical_answer

        text = completion_text(completion)
        if self.answer_format == "answer_tag":
            return canonical_answer(extract_answer_tag(text))
        if self.answer_format == "plain":
            lines = text.strip().splitlines() if isinstance(text, str) else []
            return canonical_answer(lines[0] if lines else None)
        return canonical_answer(extract_math_answer(text))

    def reward_fn(self, name: str | None = None, *, score_truncated: bool | None = None) -> TaskReward:
        """TRL reward function scoring with :meth:`score` (see :func:`grae.rewards.make_reward_fn`); a completion cut
        at the token budget scores 0.0 unless ``score_truncated`` (default: the task's :attr:`score_truncated`)."""
        from grae.rewards.adapters import TaskReward

        return TaskReward(self, name, score_truncated=self.score_truncated if score_truncated is None else score_truncated)

    def format_reward_fn(self, name: str = "format_reward") -> FormatReward:
        """TRL reward: 1.0 when the completion has a well-formed answer in :attr:`answer_format`."""
        from grae.rewards.adapters import FormatReward

        return FormatReward(self.answer_format, name)

    # --- finite answer sets (exact evaluation) -------------------------------------------------

    def answer_set(self) -> list[str] | None:
        """Every answer this task's problems can have, as answer strings, when that set is finite and
        small enough to enumerate (None otherwise). :mod:`grae.eval.exact` teacher-forces each one."""
        return None

    def answer_completion(self, answer: str) -> str:
        """The completion stating ``answer`` as this task's verifier accepts it (without EOS; see
        :func:`grae.data.prompts.answer_completion`)."""
        from grae.data.prompts import answer_completion

        return answer_completion(answer, self.answer_format)

    def gold_completions(self, example: dict) -> list[str]:
        """Every completion (without EOS) the verifier accepts for ``example`` that :mod:`grae.eval.gold` sums the
        teacher-forced probability of: by default the one completion stating the gold answer. A task whose verifier
        accepts several (``chain_trace`` with ``strategies="two"``) returns them all; they must differ as texts."""
        return [self.answer_completion(str(example["answer"]).strip())]

    # --- export --------------------------------------------------------------------------------

    def to_hf_dataset(self, examples: Sequence[dict]) -> datasets.Dataset:
        """See :func:`to_hf_dataset`."""
        return to_hf_dataset(examples)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r} prompt_style={self.prompt_style!r}>"


def to_hf_dataset(examples: Iterable[dict]) -> datasets.Dataset:
    """A ``datasets.Dataset`` for TRL's ``GRPOTrainer`` from grae examples.

    Columns: ``prompt`` (str or chat messages; TRL detects the conversational format from it),
    ``answer``, ``question_id``, ``task``, ``question``, ``source``, plus any other key that every example
    has with a scalar value. TRL passes every column except ``prompt`` to reward functions as a keyword
    argument (``answer=[...]``, ``question_id=[...]``, ...).
    """
    import datasets

    rows = list(examples)
    if not rows:
        raise ValueError("to_hf_dataset needs at least one example")
    for i, row in enumerate(rows):
        missing = [k for k in EXAMPLE_KEYS if k not in row]
        if missing:
            raise ValueError(f"example {i} lacks {missing}; build examples with a grae task (task.train / heldout)")
    kinds = {type(r["prompt"]).__name__ for r in rows}
    if len(kinds) > 1:
        raise ValueError(f"examples mix prompt types {sorted(kinds)}; use one prompt_style per dataset")
    scalar = (str, int, float, bool, type(None))
    extra = [
        k
        for k in rows[0]
        if k not in EXAMPLE_KEYS and all(k in r and isinstance(r[k], scalar) for r in rows)
    ]
    columns = list(EXAMPLE_KEYS) + extra
    return datasets.Dataset.from_list([{k: r[k] for k in columns} for r in rows])
