"""Prompt styles and templates.

* ``"plain"``: a raw string for base / from-scratch models without a chat template. Procedural tasks use
  ``f"{question}\\nAnswer:"`` and expect the completion `` <answer>`` followed by EOS (the tiny model's
  format); math tasks use the math instruction below as plain text.
* ``"chat"``: TRL conversational prompt, a list of messages. Procedural tasks: reasoning-gym's
  ``"default"`` system prompt (answer inside ``<answer>...</answer>``) + the question as user message;
  math tasks: a single user message ``"{problem}\\nPlease reason step by step, and put your final answer
  within \\\\boxed{}."`` (the DeepSeek-R1 / Qwen2.5-Math evaluation template).
"""

from __future__ import annotations

from typing import Any, Literal

PromptStyle = Literal["plain", "chat"]
PROMPT_STYLES: tuple[str, ...] = ("plain", "chat")

#: Instruction appended to every math problem (DeepSeek-R1 and Qwen2.5-Math evaluation template).
MATH_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
#: Suffix of plain procedural prompts; the completion is expected to be `` <answer>`` then EOS.
PLAIN_ANSWER_SUFFIX = "\nAnswer:"


def check_style(style: str) -> str:
    if style not in PROMPT_STYLES:
        raise ValueError(f"unknown prompt_style {style!r}; expected one of {', '.join(PROMPT_STYLES)}")
    return style


def math_prompt(problem: str, style: PromptStyle = "chat", instruction: str = MATH_INSTRUCTION) -> Any:
    """``f"{problem}\\n{instruction}"`` as one user message (``chat``) or as a string (``plain``)."""
    text = f"{problem}\n{instruction}" if instruction else problem
    return [{"role": "user", "content": text}] if check_style(style) == "chat" else text


def procedural_prompt(question: str, style: PromptStyle = "plain", system_prompt: str | None = None) -> Any:
    """``f"{question}\\nAnswer:"`` (``plain``) or ``[system?, user]`` messages (``chat``)."""
    if check_style(style) == "plain":
        return f"{question}{PLAIN_ANSWER_SUFFIX}"
    messages = [{"role": "system", "content": system_prompt}] if system_prompt else []
    messages.append({"role": "user", "content": question})
    return messages


def answer_completion(answer: str, answer_format: str) -> str:
    """The completion that states ``answer`` in ``answer_format``, exactly as the verifier accepts it (EOS
    not included): ``plain`` -> ``" {answer}"`` (the tiny model's SFT target), ``answer_tag`` ->
    ``"<answer>{answer}</answer>"``, ``boxed`` -> ``"\\boxed{{answer}}"``. Used by the exact evaluation
    (:mod:`grae.eval.exact`), which teacher-forces every candidate answer."""
    if answer_format == "plain":
        return f" {answer}"
    if answer_format == "answer_tag":
        return f"<answer>{answer}</answer>"
    if answer_format == "boxed":
        return "\\boxed{" + str(answer) + "}"
    raise ValueError(f"answer_format {answer_format!r}: one of plain, answer_tag, boxed")
