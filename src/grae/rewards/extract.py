"""Final-answer extraction from model completions.

Everything here is pure string processing (no sympy), linear in the input length, and never raises on
any ``str``; inputs longer than :data:`MAX_SCAN_CHARS` are cut to their *tail* first (the final answer
is at the end).

Extraction rules (documented in docs/tasks.md):

* math (:func:`extract_math_answer`): the **last** top-level ``\\boxed{...}`` / ``\\fbox{...}`` (braces
  matched properly, ``\\{``/``\\}`` are literal; ``\\boxed 5`` also works). If the text contains a box at
  all, the last one decides, and a last box that never closes (truncated completion) yields ``None``
  rather than an earlier, possibly intermediate, box. Without a box: the last ``<answer>...</answer>``,
  else the last final-answer line (``#### x``, ``The final answer is x``, ``The answer is x``,
  ``Answer: x``).
* procedural (:func:`extract_procedural_answer`): ``<answer>...</answer>`` if present, else the last box,
  else (plain ``"...\\nAnswer:"`` prompts of the tiny model) the first number/token of the completion.

One final answer, in every mode (the grammar of numbers and its hedges: :mod:`grae.rewards.numbers`):

* a final answer that holds a hedge word (``or``, ``nor``, ``not``, ``vs``, ``versus``: ``#### 5 or 6``,
  ``\\boxed{3 \\text{ or } 5}``) is no answer;
* a final-answer line ends at its first sentence (``#### 5. Note that 6 is wrong.`` states 5); a number after a
  stated number answer — later on its line, or after the box or line — must be that number (a check such as
  ``7 + 5 = 12`` ending on it), else there is no answer. Text after an answer that is not a number (``\\sqrt{2}``,
  ``x + 1``) is not read;
* ``last_number`` reads the last number of a completion that states no final answer; one that does (a box, an
  ``<answer>`` tag, a final-answer line) is read from that statement under the rule above, and a statement that
  names no number with no number after it (``x = 5, y = 7. The answer is x.``) is no answer;
* a last ``\\boxed{`` that never closes (a cut completion) is no answer in any mode;
* the plain reader's leading number is no answer when another number follows it as a hedge or list
  (`` 104 or 105``, `` 104\\n105``, `` 104, 105``).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from grae.rewards.numbers import last_number, read_number

#: Completions longer than this are cut to their last ``MAX_SCAN_CHARS`` characters before extraction
#: (~32k tokens of reasoning; answers live at the end). Bounds the work on 1 MB hostile outputs.
MAX_SCAN_CHARS = 131_072

_BOX_RE = re.compile(r"\\(?:boxed|fbox)(?![A-Za-z])")
# escaped brace or escaped backslash (skipped as one token) | structural brace
_BRACE_RE = re.compile(r"\\[{}\\]|[{}]")
_BARE_TOKEN_RE = re.compile(r"[^\s$}]+")
_WS = " \t\r\n"


def completion_text(completion: Any) -> str:
    """The text of one completion as TRL hands it to reward functions.

    * ``str`` (plain-text prompts) is returned as is;
    * ``bytes`` are decoded as UTF-8 with ``errors="replace"``;
    * a conversational completion ``[{"role": "assistant", "content": ...}, ...]`` gives the assistant
      contents joined by newlines (content may also be a list of ``{"type": "text", "text": ...}`` parts);
    * ``None`` and anything else give ``""`` (never raises).
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, (bytes, bytearray)):
        return bytes(completion).decode("utf-8", errors="replace")
    if isinstance(completion, dict):
        completion = [completion]
    if isinstance(completion, (list, tuple)):
        parts = []
        for msg in completion:
            if not isinstance(msg, dict) or msg.get("role", "assistant") != "assistant":
                continue
            content = msg.get("content")
            if isinstance(content, (list, tuple)):
                content = "".join(
                    str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type", "text") == "text"
                )
            if isinstance(content, (bytes, bytearray)):
                content = bytes(content).decode("utf-8", errors="replace")
            if isinstance(content, str):
                parts.append(content)
        return "\n".join(parts)
    return ""


def _tail(text: str) -> str:
    return text[-MAX_SCAN_CHARS:] if len(text) > MAX_SCAN_CHARS else text


def _match_brace(text: str, open_pos: int) -> int | None:
    """Index of the ``}`` closing the ``{`` at ``open_pos``, or ``None`` if it never closes."""
    depth = 0
    for m in _BRACE_RE.finditer(text, open_pos):
        tok = m.group()
        if tok == "{":
            depth += 1
        elif tok == "}":
            depth -= 1
            if depth == 0:
                return m.start()
    return None


def _last_box(text: str) -> tuple[bool, str | None]:
    """``(found_any_box, content_of_last_top_level_box_or_None_if_malformed)``."""
    found, last, _, _ = _last_box_at(text)
    return found, last


def _last_box_at(text: str) -> tuple[bool, str | None, int, int]:
    """``(found_any_box, content_or_None, start, end)``: the last top-level box's content (None when it never
    closes or is empty) and the span of the whole box (``-1, -1`` when there is none or it never closes)."""
    pos, found, last, span = 0, False, None, (-1, -1)
    n = len(text)
    while True:
        m = _BOX_RE.search(text, pos)
        if m is None:
            return found, last, span[0], span[1]
        found = True
        j = m.end()
        while j < n and text[j] in _WS:
            j += 1
        if j < n and text[j] == "{":
            end = _match_brace(text, j)
            if end is None:  # never closes: everything after is inside this (last) box
                return True, None, -1, -1
            last, pos = text[j + 1 : end], end + 1
        else:  # ``\boxed 5`` / ``\boxed5``: the following run of non-space characters up to ``$``
            tok = _BARE_TOKEN_RE.match(text, j)
            if tok is None:
                last, pos = None, j
            else:
                last, pos = tok.group(), tok.end()
        span = (m.start(), pos)


def _unwrap_single_box(content: str) -> str:
    """``\\boxed{5}`` -> ``5`` while the whole content is exactly one braced box (``\\boxed{\\boxed{5}}``)."""
    for _ in range(16):
        s = content.strip(_WS)
        m = _BOX_RE.match(s)
        if m is None:
            break
        j = m.end()
        while j < len(s) and s[j] in _WS:
            j += 1
        if j >= len(s) or s[j] != "{" or _match_brace(s, j) != len(s) - 1:
            break
        content = s[j + 1 : -1]
    return content


def extract_boxed(text: str) -> str | None:
    """Content of the last top-level ``\\boxed{}``/``\\fbox{}`` (nested boxes unwrapped), else ``None``.

    ``None`` also when the last box is unbalanced or empty.
    """
    if not isinstance(text, str):
        return None
    found, content = _last_box(_tail(text))
    if content is None:
        return None
    content = _unwrap_single_box(content)
    content = content.strip(_WS)
    return content or None


def extract_answer_tag(text: str, tag: str = "answer") -> str | None:
    """Content of the last complete ``<tag>...</tag>`` pair (stripped), ``None`` if absent or empty.

    Uses ``rfind`` (linear) rather than a lazy regex, which is quadratic on many unclosed tags.
    """
    if not isinstance(text, str):
        return None
    text = _tail(text)
    close = text.rfind(f"</{tag}>")
    if close < 0:
        return None
    open_tag = f"<{tag}>"
    start = text.rfind(open_tag, 0, close)
    if start < 0:
        return None
    content = text[start + len(open_tag) : close].strip(_WS)
    return content or None


_ANSWER_LINE_RES = (
    re.compile(r"####[ \t]*([^\n]*)"),
    re.compile(r"(?i)\bfinal answer\b[ \t]*(?:is\b)?[ \t]*:?[ \t]*([^\n]*)"),
    re.compile(r"(?i)\bthe answer is\b[ \t]*:?[ \t]*([^\n]*)"),
    re.compile(r"(?im)^[ \t*#>-]*answer[ \t*]*:[ \t]*([^\n]*)"),
)
_NEXT_LINE_RE = re.compile(r"[ \t]*\n[ \t\n]*([^\n]+)")
#: where a final-answer line's first sentence ends (``5. Note that 6 is wrong.``; not ``1.5``)
_SENTENCE_END_RE = re.compile(r"(?<=\S)[.;!?](?=[ \t]+\S)")
#: a word that makes a final answer a hedge (``5 or 6``, ``not 6``); ``\\notin`` and ``\\lor`` are macros, not words
_HEDGE_WORD_RE = re.compile(r"(?i)(?<![A-Za-z\\])(?:or|nor|not|vs|versus)(?![A-Za-z])")
#: after a leading number, another one as a hedge or list: `` 105``, ``\\n105``, ``, 105``, `` or 105``, ``-105``
_ANOTHER_NUMBER_RE = re.compile(r"(?i)\s*(?:(?:[,;/(]|\b(?:or|nor|and|not|vs|versus)\b\.?)\s*)*[+\-\u2212]?\.?\d")


def clean_answer(ans: str) -> str:
    """Strip markdown bold, math delimiters (``$..$``, ``\\(..\\)``, ``\\[..\\]``) and a trailing period or comma."""
    s = ans.strip(_WS)
    for _ in range(3):
        before = s
        s = s.strip("*").strip(_WS)
        if s.endswith((".", ",")):
            s = s[:-1].rstrip(_WS)
        if len(s) >= 2 and s[0] == "$" and s[-1] == "$":
            s = s.strip("$").strip(_WS)
        for left, right in (("\\(", "\\)"), ("\\[", "\\]")):
            if s.startswith(left) and s.endswith(right) and len(s) >= 4:
                s = s[2:-2].strip(_WS)
        if s == before:
            break
    return s


def extract_final_answer_line(text: str) -> str | None:
    """The answer on the last final-answer line: ``#### x`` (GSM8K), ``The final answer is x``,
    ``The answer is x``, ``Answer: x`` (whichever occurs last); if the line is empty after the marker,
    the next non-empty line. Cleaned with :func:`clean_answer`; ``None`` if nothing is found."""
    if not isinstance(text, str):
        return None
    line = _answer_line(_tail(text))
    if line is None:
        return None
    _, ans, after = line
    return _one_answer(clean_answer(ans) or None, after)


def _answer_line(text: str) -> tuple[int, str, str] | None:
    """``(start, answer, after)`` of the last final-answer line: the line's first sentence after its marker (the
    next non-empty line when the marker ends its line), and all the text after that sentence."""
    best: re.Match | None = None
    for pattern in _ANSWER_LINE_RES:
        for m in pattern.finditer(text):
            if best is None or m.start() >= best.start():
                best = m
    if best is None:
        return None
    ans, end = best.group(1), best.end(1)
    if not ans.strip(" \t*$"):
        nxt = _NEXT_LINE_RE.match(text, best.end(1))
        ans, end = (nxt.group(1), nxt.end(1)) if nxt else ("", end)
    first, after = _first_sentence(ans)
    return best.start(), first, after + text[end:]


def _first_sentence(line: str) -> tuple[str, str]:
    """``line`` cut after its first sentence: ``("5.", " Note that 6 is wrong.")``."""
    cut = _SENTENCE_END_RE.search(line)
    return (line, "") if cut is None else (line[:cut.end()], line[cut.end():])


def _has_digit(text: str) -> bool:
    return any(ch.isdigit() for ch in text)


def _stands(answer: str, after: str) -> bool:
    """Whether the text ``after`` a stated ``answer`` leaves it the answer: it names no number, or the answer is not a
    number (text after an expression is not read), or its last number is the answer's value."""
    value = read_number(answer)
    if value is None or not _has_digit(after):
        return True
    later = last_number(after)
    return later is not None and read_number(later) == value


def _one_answer(answer: str | None, after: str) -> str | None:
    """``answer`` when it is one final answer: no hedge word in it, nothing after it that differs (:func:`_stands`)."""
    if answer is None or _HEDGE_WORD_RE.search(answer):
        return None
    return answer if _stands(answer, after) else None


def _final_statement(text: str) -> tuple[str | None, str] | None:
    """``(answer, after)`` of the last final-answer statement of ``text`` — its last box, ``<answer>`` tag or
    final-answer line, whichever comes last — as written; ``(None, "")`` when its last box never closes; None
    when it states no final answer."""
    found, content, start, end = _last_box_at(text)
    if found and end < 0:
        return None, ""
    candidates = [(start, content or "", text[end:])] if found else []
    close = text.rfind("</answer>")
    opened = text.rfind("<answer>", 0, close) if close >= 0 else -1
    if opened >= 0:
        candidates.append((opened, text[opened + len("<answer>"):close], text[close + len("</answer>"):]))
    line = _answer_line(text)
    if line is not None:
        candidates.append(line)
    if not candidates:
        return None
    _, answer, after = max(candidates, key=lambda c: c[0])
    return answer, after


def extract_math_answer(text: str) -> str | None:
    """Final answer of a math completion (see module docstring for the rules), ``None`` if there is none."""
    if not isinstance(text, str) or not text:
        return None
    tail = _tail(text)
    found, _, _, end = _last_box_at(tail)
    if found:
        return _one_answer(extract_boxed(tail), tail[end:]) if end >= 0 else None
    tagged = extract_answer_tag(tail)
    if tagged is not None:
        return _one_answer(clean_answer(tagged) or None, tail[tail.rfind("</answer>") + len("</answer>"):])
    return extract_final_answer_line(tail)


_LEADING_NUMBER_RE = re.compile(r"[+-]?(?:\d[\d,]*(?:\.\d+)?|\.\d+)")


#: a signed integer or decimal, thousands separators allowed ("-1,234.5"); for the last_number fallback
_NUMBER_RE = re.compile(r"-?\d+(?:,\d{3})*(?:\.\d+)?")


def extract_last_number(text: str) -> str | None:
    """The last number of ``text`` as written, thousands separators removed (``"7 + 5 = 12. So 1,212."`` ->
    ``"1212"``; fractions, ``.5``, ``1.5e-3``, ``50%`` are numbers: :mod:`grae.rewards.numbers`); None when it has
    none, or when its last number is part of an expression (``10-12``, ``2\\pi``), a hedge or a list rather than an
    answer. A text that states a final answer (a box, a tag, a final-answer line) is read from that statement (the
    module docstring)."""
    if not isinstance(text, str):
        return None
    text = _tail(text)
    statement = _final_statement(text)
    if statement is None:
        return last_number(text)
    answer, after = statement
    if answer is None:
        return None  # a box that never closes
    if not _has_digit(answer):
        return last_number(text) if _has_digit(after) else None  # "the answer is x." states no number
    stated = last_number(answer)
    if stated is None or _HEDGE_WORD_RE.search(answer):
        return None
    return stated if _stands(stated, after) else None


def extract_after_marker(text: str, marker: str = "####") -> str | None:
    """The answer after the last ``marker`` (GSM8K's ``#### 42``): the rest of that line, or the next
    non-empty line when the marker ends its line; cleaned (:func:`clean_answer`), a number's thousands
    separators removed (``"#### 1,200"`` -> ``"1200"``). None without the marker or an answer after it."""
    if not isinstance(text, str) or not marker:
        return None
    text = _tail(text)
    at = text.rfind(marker)
    if at < 0:
        return None
    rest = text[at + len(marker):]
    line, _, later = rest.partition("\n")
    if not line.strip(_WS + "*$"):
        nxt = _NEXT_LINE_RE.match(rest)
        line, later = (nxt.group(1), rest[nxt.end(1):]) if nxt else ("", "")
    first, after = _first_sentence(line)
    answer = clean_answer(first)
    if _NUMBER_RE.fullmatch(answer):
        answer = answer.replace(",", "")
    return _one_answer(answer or None, after + "\n" + later)


def extract_procedural_answer(
    text: str, *, fallback: Literal["first_token", "first_line", "last_number", "none"] = "first_token"
) -> str | None:
    """Answer of a procedural (reasoning-gym) completion.

    1. the last ``<answer>...</answer>`` (chat prompts instruct this format);
    2. else the last ``\\boxed{}``;
    3. else, by ``fallback`` (for the plain ``"{question}\\nAnswer:"`` prompt, where the completion is
       expected to be `` <answer>`` then EOS):

       * ``"first_token"``: the leading number of the completion (``" -12, because"`` -> ``"-12"``) or,
         if it does not start with a number, its first whitespace-separated token without trailing
         punctuation;
       * ``"first_line"``: the first non-empty line (multi-word answers);
       * ``"last_number"``: the last number in the completion (chat models such as SmolLM2 that reason
         and end with the number but never write tags: ``"7 + 5 = 12. So the answer is 12."`` -> ``"12"``);
       * ``"none"``: no fallback (chat prompts: no tag means no answer).

    Returns ``None`` when nothing is found; never raises.
    """
    if not isinstance(text, str) or not text:
        return None
    tagged = extract_answer_tag(text)
    if tagged is not None:
        return tagged
    boxed = extract_boxed(text)
    if boxed is not None:
        return boxed
    if fallback == "none":
        return None
    head = text[:MAX_SCAN_CHARS].lstrip(_WS)
    if not head:
        return None
    if fallback == "first_line":
        line = head.split("\n", 1)[0].strip(_WS)
        return line or None
    if fallback == "last_number":
        return extract_last_number(text)
    m = _LEADING_NUMBER_RE.match(head)
    if m is not None:
        return None if _ANOTHER_NUMBER_RE.match(head, m.end()) else m.group().rstrip(",")
    words = head.split(None, 1)  # [] when the rest is whitespace beyond _WS (U+00A0, U+2028, \x1c, …)
    token = words[0].rstrip(".,;:!?") if words else ""
    return token or None
