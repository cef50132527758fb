"""The dry run's check of every gold: can each training and held-out row score at all, and can its answer be
read within the token budget?

A row whose gold the verifier cannot match under the chosen extraction (``"five apples"`` under
``last_number``) scores 0 whatever the model writes: it trains nothing and counts as a miss in every held-out
evaluation. :func:`check_golds` states each gold the way the extraction reads it (the reply
``"So the answer is five apples"``) and scores it with the task's own verifier; the rows that cannot score
are listed with their place (``file.jsonl:LINE`` for a local file). Every row of a dataset task is checked;
a generated task (reasoning-gym, procedural) produces its golds in its verifier's own form, and its first
:data:`GENERATED_ROWS` training problems (at most the problems a ``task.train_subset`` band file keeps) and the
held-out ones are checked.

:func:`budget_lines` then says whether the extraction can fire within the budget: the shortest reply the
verifier reads (``\\boxed{42}``) in the model's tokens against ``trl.max_completion_length`` and
``eval.max_tokens`` — and, when the prompt asks for reasoning first, how many tokens that leaves it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

#: training problems of a generated task whose golds the dry run checks (every row of a dataset task)
GENERATED_ROWS = 200
#: unscorable rows listed by place before "… and N more"
LISTED = 10


@dataclass
class GoldCheck:
    """What :func:`check_golds` found."""

    #: golds checked: training rows, held-out rows
    train: int = 0
    heldout: int = 0
    #: (place, gold, the reply that states it) of each row that cannot score
    unscorable: list[tuple[str, str, str]] = field(default_factory=list)
    #: the shortest reply the verifier reads, per checked gold (for the token budget)
    replies: list[str] = field(default_factory=list)
    #: how answers are read (the dry run's wording)
    extraction: str = ""
    #: what the check covered ("every row of the file", "the first 200 generated training problems")
    scope: str = ""


def check_golds(task: Any, train_size: int | None, heldout_size: int, seed: int,
                heldout_task: Any = None) -> GoldCheck | None:
    """Score every checked gold of ``task`` stated the way it is read, the held-out ones from ``heldout_task``
    (the task ``eval.heldout_params`` builds, :func:`grae.train.build.heldout_task`; default ``task``) with its own
    verifier; None for a task whose rows the dry run does not read (a hub dataset: nothing is downloaded)."""
    from grae.data import HubTask, RowsTask

    if isinstance(task, HubTask):
        return None
    held_from = task if heldout_task is None else heldout_task
    if isinstance(task, RowsTask):
        train, held = task.splits()
        held = held[:heldout_size] if held_from is task else held_from.heldout(heldout_size)
        scope = "every row"
    else:
        from grae.data.band import BandTask

        limit = GENERATED_ROWS if train_size is None else min(train_size, GENERATED_ROWS)
        band = isinstance(task, BandTask)
        if band:  # a band file holds a finite set of problems: never ask for more than it keeps
            limit = min(limit, len(task))
        train = task.train(limit, seed=seed)
        held = held_from.heldout(heldout_size) if heldout_size else []
        what = f"problems of the band file {task.path}" if band else "generated training problems"
        scope = f"the first {len(train)} {what} and the {len(held)} held-out ones"
    checked = [(e, *row) for part, examples in ((task, train), (held_from, held))
               for e, row in zip(examples, _stated_score(part, examples))]
    places = _places(task) if held_from is task else {**_places(held_from), **_places(task)}
    unscorable = [(places.get(_key(e), e["question_id"]), e["answer"], reply)
                  for e, reply, score, _ in checked if score != 1.0]
    unscorable.sort(key=lambda row: _line_order(row[0]))
    shortest = [reply for _, _, score, reply in checked if score == 1.0]
    return GoldCheck(len(train), len(held), unscorable, shortest, _reading(task), scope)


def _stated_score(task: Any, examples: list[dict]) -> list[tuple[str, float, str]]:
    """Per example: its gold stated the way ``task`` reads answers, that reply's score with ``task``'s verifier, and
    the shortest reply the verifier reads."""
    if not examples:
        return []
    extraction = getattr(task, "extraction", None)
    stated = [extraction.stating(e["answer"]) if extraction is not None else
              _component(task, e).answer_completion(e["answer"]) for e in examples]
    shortest = [extraction.shortest(e["answer"]) if extraction is not None else reply
                for e, reply in zip(examples, stated)]
    return list(zip(stated, task.score_batch(stated, examples), shortest))


def _line_order(place: str) -> tuple[str, int]:
    """``file:LINE`` / ``file: row N`` in file order."""
    head, _, tail = place.rpartition(":")
    number = tail.strip().removeprefix("row ").strip()
    return (head, int(number)) if number.isdigit() else (place, 0)


def _component(task: Any, example: dict) -> Any:
    """The task that made ``example``: a mix's component of that name, else ``task`` itself."""
    return next((part for part in getattr(task, "components", ()) if part.name == example.get("task")), task)


def _reading(task: Any) -> str:
    extraction = getattr(task, "extraction", None)
    if extraction is not None:
        return f"answer_extraction {extraction.describe()}"
    fallback = getattr(task, "plain_answer", None)
    return f"{task.answer_format}{f' (else {fallback})' if fallback and fallback != 'none' else ''}"


def _key(example: dict) -> str:
    from grae.data.base import question_key

    return question_key(example["question"])


def _places(task: Any) -> dict[str, str]:
    """Question key → ``file:LINE`` (``file: row N``) of a local file's rows; {} for other tasks."""
    from grae.data import LocalTask

    if not isinstance(task, LocalTask):
        return {}
    from grae.data.base import question_key
    from grae.data.fields import map_generic_row
    from grae.data.local import located_records

    places: dict[str, str] = {}
    for path in [task.path, *([task.heldout_path] if task.heldout_path else [])]:
        for where, record in located_records(path, task.max_line_bytes):
            row = map_generic_row(record, task.problem_field, task.answer_field, where=where)
            if row is not None:
                places.setdefault(question_key(row["question"]), where)
    return places


def gold_lines(check: GoldCheck | None) -> list[tuple[str, str]]:
    """The dry run's ``golds`` row: all score, or the rows that cannot, by place."""
    if check is None:
        return [("golds", "checked when the data is local (a dry run downloads nothing)")]
    total = check.train + check.heldout
    counted = f"{check.train} training and {check.heldout} held-out golds ({check.scope})"
    if not check.unscorable:
        return [("golds", f"all {counted} score 1 when stated as read ({check.extraction})")]
    bad = check.unscorable
    shown = "; ".join(f"{place} {gold!r}" for place, gold, _ in bad[:LISTED])
    more = f"; … and {len(bad) - LISTED} more" if len(bad) > LISTED else ""
    return [("golds", f"{len(bad)} of {total} golds cannot score under {check.extraction}: stated as read "
                      f"(e.g. {bad[0][2]!r}) the verifier gives 0, so these rows train nothing and count as misses "
                      f"held out; fix their answer column, or choose another extraction (task.params.answer_extraction "
                      f"for a dataset task): {shown}{more}")]


def budget_lines(check: GoldCheck | None, tokenizer: Any, max_completion_length: int, eval_tokens: int | None,
                 instruction: str | None) -> list[tuple[str, str]]:
    """The dry run's ``budget`` row: the shortest reply the verifier reads, in ``tokenizer``'s tokens (None:
    the model's tokenizer is not on this machine), against the training and held-out token budgets."""
    if check is None or not check.replies:
        return []
    if tokenizer is None:
        return [("budget", "not checked: the model's tokenizer is not on this machine (the shortest reply the "
                           f"verifier reads is e.g. {check.replies[0]!r})")]
    lengths = reply_lengths(check, tokenizer)
    longest = max(range(len(lengths)), key=lengths.__getitem__)
    limits = _limits(max_completion_length, eval_tokens)
    line = (f"the shortest reply the verifier reads takes {min(lengths)}-{lengths[longest]} tokens "
            f"(longest: {check.replies[longest]!r}); " + ", ".join(f"{key} {value}" for key, value in limits))
    over = _over(lengths, limits)
    if over:
        line += "; " + "; ".join(f"{count} of {len(lengths)} answers cannot fit in {key} {value}: those rows can never "
                                 f"score, raise {key}" for key, value, count in over)
    elif instruction and "step by step" in instruction:
        room = min(value for _, value in limits) - lengths[longest]
        line += (f"; the prompt asks for reasoning first ({instruction!r}): reasoning and answer share the budget, "
                 f"{room} tokens are left before the answer — a model that reasons longer is cut before it answers")
    return [("budget", line)]


def reply_lengths(check: GoldCheck, tokenizer: Any) -> list[int]:
    """The shortest reply the verifier reads of each scorable gold, in ``tokenizer``'s tokens."""
    return [len(tokenizer(reply, add_special_tokens=False)["input_ids"]) for reply in check.replies]


def _limits(max_completion_length: int, eval_tokens: int | None) -> list[tuple[str, int]]:
    return [("trl.max_completion_length", max_completion_length),
            *([("eval.max_tokens", eval_tokens)] if eval_tokens is not None else [])]


def _over(lengths: list[int], limits: list[tuple[str, int]]) -> list[tuple[str, int, int]]:
    """``(key, budget, answers that cannot fit)`` of each budget some answer cannot fit in."""
    over = [(key, value, sum(n > value for n in lengths)) for key, value in limits]
    return [(key, value, count) for key, value, count in over if count]


def stopping_problems(check: GoldCheck | None, tokenizer: Any, max_completion_length: int,
                      eval_tokens: int | None) -> list[str]:
    """What in the golds and the budget leaves a run nothing to learn from, as the dry run's verdict says it: no
    gold the verifier can match under the extraction, or no answer that fits in a token budget (the run would
    train on rewards that are 0 whatever the model writes). Some rows alone are notes, not a stop."""
    if check is None:
        return []
    total = check.train + check.heldout
    if total and len(check.unscorable) == total:
        return [f"golds: none of the {total} golds can score under {check.extraction} (e.g. "
                f"{check.unscorable[0][1]!r}); fix the answer column, or choose another extraction "
                "(task.params.answer_extraction)"]
    if tokenizer is None or not check.replies:
        return []
    lengths = reply_lengths(check, tokenizer)
    return [f"budget: no answer fits in {key} {value} (the shortest reply the verifier reads takes at least "
            f"{min(lengths)} tokens); raise {key}" for key, value, count in _over(lengths, _limits(
                max_completion_length, eval_tokens)) if count == len(lengths)]


def model_tokenizer(model: str, load_kwargs: dict[str, Any]) -> Any:
    """The model's tokenizer when it is on this machine (a shipped or converted preset, a local directory, the
    hub cache), else None: the dry run converts and downloads nothing."""
    return _load_here("AutoTokenizer", model, load_kwargs)


def model_config(model: str, load_kwargs: dict[str, Any]) -> Any:
    """The model's config (``config.json``) when it is on this machine, else None, as :func:`model_tokenizer`."""
    return _load_here("AutoConfig", model, load_kwargs)


def _load_here(loader: str, model: str, load_kwargs: dict[str, Any]) -> Any:
    """``transformers.<loader>.from_pretrained`` of ``model``'s files on this machine (a shipped or converted preset,
    a local directory, the hub cache), never the network; None when they are not here or do not load."""
    from pathlib import Path

    from grae.presets import PRESETS, _smollm2_target, resolve_model

    if model == "smollm2":
        path = _smollm2_target()
        if not (path / "config.json").exists():
            return None
        where = str(path)
    elif model in PRESETS:
        where = resolve_model(model)
    else:
        where = model
    try:
        import transformers

        return getattr(transformers, loader).from_pretrained(
            where, local_files_only=not Path(where).expanduser().exists(), **load_kwargs)
    except Exception:  # noqa: BLE001 - not on this machine, or not loadable: the dry run says it was not checked
        return None
