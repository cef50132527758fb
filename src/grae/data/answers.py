"""How a dataset task (a local file, a hub dataset: :class:`grae.data.rows.RowsTask`) reads answers:
the task parameter ``answer_extraction`` (``grae train --task.params.answer_extraction last_number``).

=================  ==================================================  ==========================================
answer_extraction  the prompt asks                                     the verifier reads
=================  ==================================================  ==========================================
``boxed``          put the final answer within ``\\boxed{}``            the last ``\\boxed{}`` (else ``<answer>``,
                   (default; DeepSeek-R1 / Qwen2.5-Math template)       a final-answer line), math-equal to gold
``last_number``    end with the final answer as a number               the completion's last number, math-equal
``marker``         write the final answer after ``answer_marker``      the rest of the line after the last marker
                   (default ``####``, GSM8K's form)                    (``#### 42``), math-equal to gold
``exact``          reply with the final answer only                    the whole completion, equal to the gold
                                                                       as text (whitespace runs count as one)
=================  ==================================================  ==========================================

"Math-equal" is :func:`grae.rewards.verify_math`'s comparison (exact numbers, then math_verify). The prompt
follows the extraction unless the task's ``instruction`` is given; the gold is the dataset's answer column as
its field mapping reads it (a GSM8K-style ``"… #### 42"`` answer gives ``42``, :mod:`grae.data.fields`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from grae.rewards.extract import extract_after_marker, extract_last_number, extract_math_answer

#: the values of ``answer_extraction``
EXTRACTIONS = ("boxed", "last_number", "marker", "exact")
#: ``answer_marker``'s default: GSM8K's
DEFAULT_MARKER = "####"


def _exact(text: str) -> str | None:
    return " ".join(text.split()) or None


@dataclass(frozen=True)
class AnswerExtraction:
    """One ``answer_extraction`` (with its ``marker``): the instruction the prompt carries, the reader of a
    completion's answer, the completion that states a gold answer, and how it is compared with the gold."""

    mode: str = "boxed"
    marker: str = DEFAULT_MARKER

    @classmethod
    def of(cls, mode: str | None, marker: str | None) -> AnswerExtraction:
        """Checked: an unknown mode, an empty marker or a marker with another mode raise ``ValueError``
        naming the task parameter."""
        mode = mode or "boxed"
        if mode not in EXTRACTIONS:
            raise ValueError(f"task.params.answer_extraction: unknown {mode!r}; one of {', '.join(EXTRACTIONS)}")
        if marker is not None and mode != "marker":
            raise ValueError(f"task.params.answer_marker: only read with answer_extraction marker (it is {mode!r}); "
                             "drop answer_marker or set answer_extraction marker")
        if marker is not None and (not isinstance(marker, str) or not marker.strip()):
            raise ValueError(f"task.params.answer_marker: a non-empty string such as '####', got {marker!r}")
        return cls(mode, marker.strip() if marker is not None else DEFAULT_MARKER)

    @property
    def instruction(self) -> str:
        """What the prompt asks for, after the problem."""
        from grae.data.prompts import MATH_INSTRUCTION

        return {
            "boxed": MATH_INSTRUCTION,
            "last_number": "Please reason step by step, and end your reply with the final answer as a number.",
            "marker": f"Please reason step by step, and write the final answer on the last line after \"{self.marker}\".",
            "exact": "Reply with the final answer only, nothing else.",
        }[self.mode]

    @property
    def reader(self) -> Callable[[str], str | None]:
        """Completion text → the answer the verifier reads (None: none)."""
        if self.mode == "last_number":
            return extract_last_number
        if self.mode == "marker":
            marker = self.marker
            return lambda text: extract_after_marker(text, marker)
        if self.mode == "exact":
            return _exact
        return extract_math_answer

    @property
    def format_pattern(self) -> str:
        """What a well-formed completion holds (:func:`grae.rewards.format_reward`'s ``fmt``): ``boxed``, or a
        regular expression."""
        import re

        return {"boxed": "boxed", "last_number": r"\d", "marker": re.escape(self.marker) + r"[ \t]*\S",
                "exact": r"\S"}[self.mode]

    def describe(self) -> str:
        """``boxed``, ``last_number``, ``marker '####'``, ``exact`` (the dry run's wording)."""
        return f"marker {self.marker!r}" if self.mode == "marker" else self.mode

    def stating(self, gold: str) -> str:
        """A completion that states ``gold`` the way this extraction reads it (the dry run scores it: 1.0
        unless the gold cannot be matched in this form)."""
        if self.mode == "boxed":
            return f"The final answer is \\boxed{{{gold}}}."
        if self.mode == "last_number":
            return f"So the answer is {self._number(gold)}"
        if self.mode == "marker":
            return f"Reasoning.\n{self.marker} {gold}"
        return str(gold)

    def shortest(self, gold: str) -> str:
        """The shortest completion this extraction reads ``gold`` from (the dry run's token-budget check)."""
        if self.mode == "boxed":
            return f"\\boxed{{{gold}}}"
        if self.mode == "marker":
            return f"{self.marker} {gold}"
        if self.mode == "last_number":
            return self._number(gold)
        return str(gold)

    @staticmethod
    def _number(gold: str) -> str:
        """The gold as ``last_number`` reads it (``\\boxed{23}`` → ``23``), or the gold itself when it reads none."""
        return extract_last_number(str(gold)) or str(gold)

    def score(self, completion: Any, gold: Any, timeout: float | None) -> float:
        """1.0 when ``completion``'s answer matches ``gold``: as text for ``exact``, math-equal otherwise."""
        from grae.rewards.extract import completion_text
        from grae.rewards.verify import verify_math

        if self.mode == "exact":
            return float(_exact(completion_text(completion)) == _exact(str(gold)))
        return verify_math(completion, gold, timeout=timeout, extract=self.reader)

    def score_batch(self, completions: list[Any], golds: list[Any], timeout: float | None) -> list[float]:
        """:meth:`score` of each pair; math comparisons on the whole verifier pool at once."""
        from grae.rewards.verify import verify_math_batch

        if self.mode == "exact":
            return [self.score(c, g, timeout) for c, g in zip(completions, golds)]
        return verify_math_batch(completions, golds, timeout=timeout, extract=self.reader)
