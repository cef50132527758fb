"""Tasks over a fixed set of math problems (Hugging Face datasets, local files).

Split policy:

* with a dedicated held-out source (e.g. MATH train -> MATH-500), the held-out split is that source
  (deduplicated) and the training split is the training source minus duplicates and minus every
  question that also occurs in the held-out split;
* without one (``heldout_size`` carve-out), the deduplicated pool is ordered by a hash of each question
  (independent of file order) and the first ``heldout_size`` questions are held out;
* ``eval_only`` tasks (benchmarks such as AIME) have only a held-out split; ``train`` raises.

``train(n, seed)`` returns the first ``n`` of a ``random.Random(seed)`` permutation of the training
split; ``heldout(n)`` the first ``n`` held-out questions in source order.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from grae.data.answers import AnswerExtraction
from grae.data.base import Task, question_key, text_id
from grae.data.prompts import check_style, math_prompt
from grae.rewards.verify import DEFAULT_TIMEOUT


def dedup_rows(rows: Sequence[Mapping[str, Any]], exclude: set[str] | None = None) -> list[dict]:
    """Rows with distinct question keys (first occurrence kept), skipping keys in ``exclude``."""
    seen: set[str] = set(exclude or ())
    out = []
    for row in rows:
        key = question_key(row["question"])
        if key not in seen:
            seen.add(key)
            out.append(dict(row))
    return out


def _hash_order(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: hashlib.sha1(question_key(r["question"]).encode("utf-8")).hexdigest())


class RowsTask(Task):
    """Base class for math tasks over a fixed set of ``{"question", "answer", "id"}`` rows.

    Subclasses implement :meth:`load_train_rows` and :meth:`load_heldout_rows` (``None`` = carve out).

    Args:
        name: task name (examples' ``task`` field); ``id_prefix`` defaults to it.
        prompt_style: ``"chat"`` (user message: the problem, then the instruction) or ``"plain"`` (same text
            as a string).
        answer_extraction: how a completion's answer is read, and what the prompt asks for:
            ``"boxed"`` (default), ``"last_number"``, ``"marker"`` (after ``answer_marker``, default
            ``"####"``) or ``"exact"`` (:mod:`grae.data.answers`).
        answer_marker: the marker of ``answer_extraction="marker"``.
        instruction: text appended to each problem (default: the one ``answer_extraction`` asks for; ``""``
            appends nothing).
        heldout_size: carve-out size when there is no dedicated held-out source.
        eval_only: only a held-out split (benchmarks).
        timeout: per-completion timeout of :func:`grae.rewards.verify_math` in :meth:`score`.
        score_truncated: score a completion cut at the token budget as if it had ended (default False: its reward
            is 0.0, :class:`grae.rewards.TaskReward`).
        source: provenance string written into examples.
    """

    answer_format = "boxed"

    def __init__(
        self,
        name: str,
        *,
        prompt_style: str = "chat",
        answer_extraction: str | None = None,
        answer_marker: str | None = None,
        instruction: str | None = None,
        heldout_size: int | None = None,
        eval_only: bool = False,
        timeout: float | None = DEFAULT_TIMEOUT,
        source: str = "",
        id_prefix: str | None = None,
        score_truncated: bool = False,
    ):
        self.name = name
        if not isinstance(score_truncated, bool):
            raise ValueError(f"task.params.score_truncated: true or false, got {score_truncated!r}")
        self.score_truncated = score_truncated
        self.prompt_style = check_style(prompt_style)
        #: how answers are read (:class:`grae.data.answers.AnswerExtraction`)
        self.extraction = AnswerExtraction.of(answer_extraction, answer_marker)
        if instruction is not None and not isinstance(instruction, str):
            raise ValueError(f"task.params.instruction: expected text appended to each problem, got {instruction!r}")
        self.instruction = self.extraction.instruction if instruction is None else instruction
        self.heldout_size = heldout_size
        self.eval_only = eval_only
        self.timeout = timeout
        self.source = source or name
        self.id_prefix = id_prefix or name
        self._splits: tuple[list[dict], list[dict]] | None = None

    # --- to implement --------------------------------------------------------------------------

    def load_train_rows(self) -> list[dict]:
        raise NotImplementedError

    def load_heldout_rows(self) -> list[dict] | None:
        return None

    def default_heldout_size(self, pool_size: int) -> int:
        """Carve-out size when ``heldout_size`` is not given: 10% of the pool, at most 500."""
        return min(500, pool_size // 10)

    # --- splits --------------------------------------------------------------------------------

    def _example(self, row: Mapping[str, Any]) -> dict:
        rid = row.get("id") or text_id(row["question"])
        return {
            "question_id": f"{self.id_prefix}/{rid}",
            "task": self.name,
            "question": row["question"],
            "prompt": math_prompt(row["question"], self.prompt_style, self.instruction),
            "answer": str(row["answer"]),
            "source": self.source,
        }

    def splits(self) -> tuple[list[dict], list[dict]]:
        """``(train_examples, heldout_examples)``, loaded once and cached."""
        if self._splits is None:
            if self.eval_only:
                heldout_rows = self.load_heldout_rows()
                heldout = dedup_rows(heldout_rows if heldout_rows is not None else self.load_train_rows())
                train: list[dict] = []
            else:
                dedicated = self.load_heldout_rows()
                if dedicated is not None:
                    heldout = dedup_rows(dedicated)
                    keys = {question_key(r["question"]) for r in heldout}
                    train = dedup_rows(self.load_train_rows(), exclude=keys)
                else:
                    pool = _hash_order(dedup_rows(self.load_train_rows()))
                    k = self.heldout_size if self.heldout_size is not None else self.default_heldout_size(len(pool))
                    if not 0 <= k <= len(pool):
                        raise ValueError(f"{self.name}: heldout_size={k} but only {len(pool)} distinct questions")
                    heldout, train = pool[:k], pool[k:]
            self._splits = ([self._example(r) for r in train], [self._example(r) for r in heldout])
        return self._splits

    def iter_train(self, seed: int = 0) -> Iterator[dict]:
        if self.eval_only:
            raise ValueError(f"{self.name} is an evaluation-only benchmark: it has no training split")
        train = list(self.splits()[0])
        random.Random(seed).shuffle(train)
        return iter(train)

    def heldout(self, n: int | None = None) -> list[dict]:
        held = self.splits()[1]
        if n is not None and n > len(held):
            raise ValueError(f"{self.name}: heldout({n}) but the held-out split has {len(held)} questions")
        return list(held if n is None else held[:n])

    def _shortage_hint(self) -> str:
        return f"The training split has {len(self.splits()[0])} questions after deduplication."

    # --- scoring -------------------------------------------------------------------------------

    def score(self, completion: Any, example: Mapping[str, Any]) -> float:
        """``completion``'s answer, read by :attr:`extraction`, against ``example["answer"]``
        (:func:`grae.rewards.verify_math`'s comparison; as text for ``exact``)."""
        return self.extraction.score(completion, example.get("answer"), self.timeout)

    def score_batch(self, completions: list[Any], examples: list[Mapping[str, Any]]) -> list[float]:
        """:meth:`score` of each pair: the whole worker pool at once, identical pairs once."""
        return self.extraction.score_batch(completions, [e.get("answer") for e in examples], self.timeout)

    def extract_answer(self, completion: Any) -> str | None:
        """The answer :meth:`score` reads from ``completion`` (None: none), as written."""
        from grae.rewards.extract import completion_text

        return self.extraction.reader(completion_text(completion))

    def format_reward_fn(self, name: str = "format_reward"):
        """TRL reward: 1.0 when the completion holds an answer where :attr:`extraction` reads it."""
        from grae.rewards.adapters import FormatReward

        return FormatReward(self.extraction.format_pattern, name)

    def parse_answer(self, completion: Any) -> str | None:
        """:meth:`extract_answer` in canonical form (:func:`grae.rewards.verify.canonical_answer`): the
        estimator context's ``answer_id``."""
        from grae.rewards.verify import canonical_answer

        return canonical_answer(self.extract_answer(completion))


class RowListTask(RowsTask):
    """A :class:`RowsTask` over in-memory rows (tests, programmatic datasets)."""

    def __init__(self, name: str, train_rows: Sequence[Mapping[str, Any]],
                 heldout_rows: Sequence[Mapping[str, Any]] | None = None, **kwargs: Any):
        super().__init__(name, **kwargs)
        self._train_rows = [dict(r) for r in train_rows]
        self._heldout_rows = None if heldout_rows is None else [dict(r) for r in heldout_rows]

    def load_train_rows(self) -> list[dict]:
        return self._train_rows

    def load_heldout_rows(self) -> list[dict] | None:
        return self._heldout_rows
