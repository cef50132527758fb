"""Pure field mappings: raw dataset row -> ``{"question", "answer", "id"}`` (or ``None`` to skip the row).

Kept free of I/O so they can be tested on hand-made rows; :mod:`grae.data.hub` applies them to rows from
``datasets.load_dataset`` and :mod:`grae.data.local` to rows of local files. ``id`` is the source's own
identifier when it has one (else ``None``: grae derives a stable id from the question text).
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

from grae.rewards.extract import clean_answer, extract_after_marker, extract_boxed

Row = dict  # {"question": str, "answer": str, "id": str | None}

#: Field names tried, in order, for the problem text and the gold answer of generic / local rows.
PROBLEM_FIELDS = ("problem", "question", "Problem", "Question", "prompt")
ANSWER_FIELDS = ("answer", "final_answer", "Answer", "expected_answer", "gold", "ground_truth")
SOLUTION_FIELDS = ("solution", "Solution")
ID_FIELDS = ("id", "unique_id", "ID", "problem_id", "idx")


class DataFormatError(ValueError):
    """A data row lacks a required field or has an unusable value."""


def answer_to_str(value: Any) -> str | None:
    """Gold answer value -> string: integral floats lose ``.0`` (``72.0`` -> ``"72"``, some hubs store
    AMC/AIME answers as float64), lists (OlympiadBench ``final_answer``) are joined with ``", "``, math
    delimiters (``$...$``) are stripped. ``None``/NaN/empty -> ``None``. Anything else (a mapping such as
    ``{"a": 1}``, bytes, a set) raises :class:`DataFormatError`: its Python repr is no gold answer."""
    if value is None:
        return None
    if not isinstance(value, (str, numbers.Real, list, tuple)):
        kind = "an object" if isinstance(value, Mapping) else f"a {type(value).__name__}"
        raise DataFormatError(f"gold answer {_short(value)} is {kind}, not a number or text (or a list of them); "
                              "write the answer as a number or a string")
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, numbers.Integral):
        return str(int(value))
    if isinstance(value, numbers.Real):
        f = float(value)
        if math.isnan(f) or math.isinf(f):
            return None
        return str(int(f)) if f.is_integer() else repr(f)
    if isinstance(value, (list, tuple)):
        parts = [answer_to_str(v) for v in value]
        parts = [p for p in parts if p]
        return ", ".join(parts) if parts else None
    text = clean_answer(str(value))
    return text or None


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def boxed_answer(solution: Any) -> str | None:
    """Gold answer of a worked solution: its last ``\\boxed{}`` (MATH convention)."""
    if not isinstance(solution, str):
        return None
    return extract_boxed(solution)


def solution_gold(solution: Any) -> str | None:
    """Gold answer of a ``solution`` column: its last ``\\boxed{}``; else, when it is one line, the line itself
    (TRL's convention: ``trl-lib/DeepMath-103K``'s ``solution`` is ``"$42$"``, the column TRL's
    ``accuracy_reward`` parses as the gold). A multi-line solution without a box gives None."""
    boxed = boxed_answer(solution)
    if boxed or not isinstance(solution, str) or "\n" in solution.strip():
        return boxed
    return answer_to_str(solution)


def _first(row: Mapping[str, Any], fields: Sequence[str]) -> tuple[str | None, Any]:
    for f in fields:
        if f in row and row[f] is not None and row[f] != "":
            return f, row[f]
    return None, None


def _id(row: Mapping[str, Any], fields: Sequence[str] = ID_FIELDS) -> str | None:
    _, value = _first(row, fields)
    return None if value is None else str(value)


def last_user_message(messages: Any) -> str | None:
    """The text of the last user message of chat ``messages`` (a list of ``{"role", "content"}``; a message
    without a role counts as the user's), or None."""
    if not isinstance(messages, (list, tuple)):
        return None
    users = [m.get("content") for m in messages if isinstance(m, Mapping) and m.get("role", "user") == "user"]
    return users[-1] if users and isinstance(users[-1], str) else None


def map_math_row(row: Mapping[str, Any]) -> Row | None:
    """MATH (``DigitalLearningGmbH/MATH-lighteval``, ``EleutherAI/hendrycks_math``): ``problem``;
    gold = last ``\\boxed{}`` of ``solution``. Rows without a box are skipped."""
    answer = boxed_answer(row.get("solution"))
    if not row.get("problem") or not answer:
        return None
    return {"question": row["problem"], "answer": answer, "id": _id(row)}


def map_math500_row(row: Mapping[str, Any]) -> Row | None:
    """MATH-500 (``HuggingFaceH4/MATH-500``): ``problem``, ``answer`` (fallback: box of ``solution``),
    id ``unique_id`` (e.g. ``test/precalculus/807.json``)."""
    answer = answer_to_str(row.get("answer")) or boxed_answer(row.get("solution"))
    if not row.get("problem") or not answer:
        return None
    return {"question": row["problem"], "answer": answer, "id": _id(row, ("unique_id", "id"))}


def gsm8k_gold(answer_text: Any) -> str | None:
    """GSM8K gold: the text after the last ``####``, thousands separators removed (``"1,200"`` -> ``"1200"``)."""
    if not isinstance(answer_text, str) or "####" not in answer_text:
        return None
    return extract_after_marker(answer_text, "####")


def answer_column_gold(value: Any) -> str | None:
    """The gold of an answer column's value (:func:`answer_to_str`); a worked GSM8K-style answer
    (``"… so 5 + 7 = 12.\n#### 12"``) gives the text after its last ``####``, as ``openai/gsm8k`` is read."""
    return gsm8k_gold(value) or answer_to_str(value)


def map_gsm8k_row(row: Mapping[str, Any]) -> Row | None:
    """GSM8K (``openai/gsm8k``, config ``main``): ``question``; gold after ``####`` in ``answer``."""
    answer = gsm8k_gold(row.get("answer"))
    if not row.get("question") or not answer:
        return None
    return {"question": row["question"], "answer": answer, "id": _id(row)}


def map_deepscaler_row(row: Mapping[str, Any]) -> Row | None:
    """DeepScaleR (``agentica-org/DeepScaleR-Preview-Dataset``): ``problem``, ``answer`` (``solution``
    as fallback)."""
    answer = answer_to_str(row.get("answer")) or boxed_answer(row.get("solution"))
    if not row.get("problem") or not answer:
        return None
    return {"question": row["problem"], "answer": answer, "id": _id(row)}


#: DAPO-Math-17k wraps each problem in this instruction (first paragraph) and reminder (last paragraph).
DAPO_PREFIX_START = "Solve the following math problem step by step."
DAPO_SUFFIX_START = "Remember to put your answer on its own line after"


def strip_dapo_template(content: str) -> str:
    """The bare problem inside a DAPO-Math-17k prompt: drops the leading instruction paragraph (up to the
    first blank line) and the trailing ``Remember to put your answer ...`` paragraph, when present."""
    text = content.strip()
    if text.startswith(DAPO_PREFIX_START) and "\n\n" in text:
        text = text.split("\n\n", 1)[1]
    cut = text.rfind(DAPO_SUFFIX_START)
    if cut > 0:
        text = text[:cut]
    return text.strip()


def map_dapo_row(row: Mapping[str, Any]) -> Row | None:
    """DAPO-Math-17k (``BytedTsinghua-SIA/DAPO-Math-17k``, verl format): the user message of ``prompt``
    (template stripped); gold ``reward_model["ground_truth"]``; id ``extra_info["index"]``. The source
    repeats each problem many times; grae's deduplication keeps one copy."""
    prompt = row.get("prompt")
    content = prompt if isinstance(prompt, str) else last_user_message(prompt)
    reward_model = row.get("reward_model") or {}
    answer = answer_to_str(reward_model.get("ground_truth") if isinstance(reward_model, Mapping) else None)
    if not isinstance(content, str) or not answer:
        return None
    extra = row.get("extra_info") or {}
    index = extra.get("index") if isinstance(extra, Mapping) else None
    return {"question": strip_dapo_template(content), "answer": answer, "id": None if index is None else str(index)}


def is_verl_row(row: Mapping[str, Any]) -> bool:
    """Whether a row has verl's RL schema: ``prompt`` a list of chat messages and a ``reward_model`` mapping."""
    return isinstance(row.get("prompt"), (list, tuple)) and isinstance(row.get("reward_model"), Mapping)


def verl_gold(ground_truth: Any) -> str | None:
    """Gold answer of ``reward_model.ground_truth``: a string/number/list, or a mapping (``{"target": ...}``
    as in verl's MATH/AIME files, ``answer``/``ground_truth`` keys, or a ``solution`` with ``\\boxed{}``)."""
    if isinstance(ground_truth, Mapping):
        for key in ("target", "answer", "ground_truth"):
            gold = answer_to_str(ground_truth.get(key))
            if gold:
                return gold
        return boxed_answer(ground_truth.get("solution"))
    return answer_to_str(ground_truth)


def map_verl_row(row: Mapping[str, Any], *, where: str = "row") -> Row | None:
    """verl's RL schema (``data_source``, ``prompt`` as chat messages, ``reward_model.ground_truth``,
    ``extra_info``), as ``grae data export --format verl`` and verl recipes write it.

    question: ``extra_info.question`` (grae's exports: the bare question) or ``ground_truth.question``,
    else the last user message; gold: :func:`verl_gold`; id: ``extra_info.question_id`` or ``index``.
    A row whose ground truth is empty (verl's MATH train has one: ``\\boxed{}``, target ``""``) is None
    (skipped, and counted by the loader); a row without a question raises :class:`DataFormatError`."""
    extra = row.get("extra_info") if isinstance(row.get("extra_info"), Mapping) else {}
    truth = row["reward_model"].get("ground_truth")
    question = extra.get("question") or (truth.get("question") if isinstance(truth, Mapping) else None)
    if not isinstance(question, str) or not question.strip():
        question = last_user_message(row["prompt"])
    if not question or not question.strip():
        raise DataFormatError(f"{where}: verl row without a user message in 'prompt' (present fields: {sorted(row)})")
    try:
        answer = verl_gold(truth)
    except DataFormatError as err:
        raise DataFormatError(f"{where}: reward_model.ground_truth: {err}") from None
    if not answer:
        return None
    ident = extra.get("question_id", extra.get("index"))
    return {"question": question, "answer": answer, "id": None if ident is None else str(ident)}


def _row_gold(row: Mapping[str, Any], answer_field: str | None) -> str | None:
    """The gold of a generic row (see :func:`map_generic_row`), None when it has none."""
    if answer_field:
        answer = answer_column_gold(row.get(answer_field))
        if answer is None and answer_field in SOLUTION_FIELDS:
            answer = boxed_answer(row.get(answer_field))
        return answer
    answer = answer_column_gold(_first(row, ANSWER_FIELDS)[1])
    return answer if answer is not None else solution_gold(_first(row, SOLUTION_FIELDS)[1])


def map_generic_row(
    row: Mapping[str, Any],
    problem_field: str | None = None,
    answer_field: str | None = None,
    *,
    where: str = "row",
) -> Row | None:
    """Generic schema (local files, AIME/AMC/Minerva/OlympiadBench mirrors); a verl RL-schema row
    (:func:`is_verl_row`) without explicit fields goes to :func:`map_verl_row`.

    problem: ``problem_field`` or the first of ``problem``, ``question``, ``Problem``, ``Question``,
    ``prompt`` (chat messages, TRL's conversational format: the last user message); answer: ``answer_field``
    or the first of ``answer``, ``final_answer``, ``Answer``, ``expected_answer``, ``gold``, ``ground_truth``
    (:func:`answer_column_gold`: a GSM8K-style ``"… #### 42"`` gives ``42``), else ``solution`` (:func:`solution_gold`).

    Raises :class:`DataFormatError` naming the missing field (``where`` says which row of which file).
    """
    if not isinstance(row, Mapping):
        raise DataFormatError(f"{where}: expected a JSON object, got {type(row).__name__}")
    if problem_field is None and answer_field is None and is_verl_row(row):
        return map_verl_row(row, where=where)
    p_fields = (problem_field,) if problem_field else PROBLEM_FIELDS
    _, problem = _first(row, p_fields)
    if isinstance(problem, (list, tuple)):  # TRL's conversational prompt: chat messages
        problem = last_user_message(problem)
    if not isinstance(problem, str) or not problem.strip():
        raise DataFormatError(
            f"{where}: no problem text; expected a non-empty string field "
            f"{' or '.join(repr(f) for f in p_fields)} (present fields: {sorted(row)}). "
            "Rename the column or pass problem_field=<name>."
        )
    try:
        answer = _row_gold(row, answer_field)
    except DataFormatError as err:
        raise DataFormatError(f"{where}: {err}") from None
    if not answer:
        fields = (answer_field,) if answer_field else ANSWER_FIELDS + SOLUTION_FIELDS
        raise DataFormatError(
            f"{where}: no gold answer; expected field {' or '.join(repr(f) for f in fields)} "
            "(a 'solution' must contain \\boxed{...} or be one line) "
            f"(present fields: {sorted(row)}). Add an 'answer' column or pass answer_field=<name>."
        )
    return {"question": problem, "answer": answer, "id": _id(row)}
