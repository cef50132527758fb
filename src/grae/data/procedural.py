"""Procedural tasks from reasoning-gym generators, and weighted task mixes.

Seeds and splits. reasoning-gym generates item ``idx`` of a dataset built with ``seed=s`` from
``random.Random(s + idx)`` (true for nearly all generators), so two datasets with nearby seeds share
items. grae therefore assigns *disjoint ranges* of effective seeds (and stays below 2**32, the limit of
``numpy.random.seed`` used by some generators):

* held-out: dataset seed ``HELDOUT_BASE = 2**31``, items ``0 .. MAX_DRAWS-1`` -> ``[2**31, 2**31 + 2**20)``;
* train with ``seed=k``: dataset seed ``(k * 2**20) mod 2**31``, items ``0 .. MAX_DRAWS-1`` ->
  a window inside ``[0, 2**31)``. Seeds ``0..2047`` get non-overlapping windows; larger seeds wrap
  around (their training sets may overlap other seeds' training sets, never the held-out set).

On top of that, splits are **deduplicated by question text**: the held-out split is the first
``heldout_size`` distinct questions; training skips duplicates and every question of the held-out split
(so also generators that ignore the seed arithmetic above cannot leak).
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import random
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from grae.data.base import Task, question_key
from grae.data.prompts import check_style, procedural_prompt
from grae.data.registry import get_task, register_name_form, register_task
from grae.rewards.extract import completion_text, extract_procedural_answer
from grae.rewards.procedural import score_procedural

HELDOUT_BASE = 2**31
TRAIN_STRIDE = 2**20
#: Max items drawn from one generator per split (bounds the effective-seed window, see above).
MAX_DRAWS = 2**20
#: Default size of the held-out split (and of the set of questions excluded from training).
DEFAULT_HELDOUT_SIZE = 500
#: reasoning-gym's system prompt used by ``prompt_style="chat"`` (asks for ``<answer>...</answer>``).
DEFAULT_SYSTEM_PROMPT = "default"

#: Generators registered under their own name (``get_task("chain_sum")``); any other reasoning-gym
#: generator is available as ``rg:<name>``.
REGISTERED_GENERATORS = ("basic_arithmetic", "chain_sum", "count_bits", "gcd", "lcm", "products")


def train_base(seed: int) -> int:
    """Dataset seed of the training split for ``seed`` (see module docstring)."""
    if not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    return (seed * TRAIN_STRIDE) % HELDOUT_BASE


def chain_sum_answers(params: Mapping[str, Any]) -> list[str]:
    """Every integer ``chain_sum`` can answer with these parameters (reasoning-gym's defaults filled in):
    terms have at most ``max_digits`` digits (largest M = 10**max_digits - 1); the first term is in
    [0, M] and each later one is added or subtracted, so answers lie in [-(max_terms-1)·M, max_terms·M]
    ([-max_terms·M, max_terms·M] with ``allow_negation``). Two terms of 1–2 digits: [-99, 198], 298 answers."""
    top = 10 ** int(params.get("max_digits", 4)) - 1
    terms = int(params.get("max_terms", 6))
    low = -terms * top if params.get("allow_negation", False) else -(terms - 1) * top
    return [str(v) for v in range(low, terms * top + 1)]


#: Generators whose answers form a finite set: ``generator -> rule(generator_kwargs) -> answers``.
ANSWER_SETS = {"chain_sum": chain_sum_answers}


def _draw_budget(n: int) -> int:
    return min(MAX_DRAWS, max(1000, 20 * n))


class ReasoningGymTask(Task):
    """Questions from one reasoning-gym generator.

    Args:
        generator: reasoning-gym dataset name (``reasoning_gym.factory.DATASETS``), e.g. ``"chain_sum"``.
        name: task name written into examples (default: ``generator``).
        prompt_style: ``"plain"`` (``"{question}\\nAnswer:"``, tiny from-scratch model) or ``"chat"``
            (system prompt + user question, answer in ``<answer>`` tags).
        system_prompt: for ``chat``: a key of ``reasoning_gym.utils.SYSTEM_PROMPTS`` (``"default"``,
            ``"DeepSeekZero"``, ...), a literal system prompt, or ``None`` for no system message.
        heldout_size: size of the held-out split; these questions never appear in training.
        heldout_strata: metadata keys of the generator's entries (e.g. ``["num_terms", "num_digits"]`` for
            ``chain_sum``) that define difficulty strata. When given, the held-out split holds the same number
            of distinct questions from every stratum seen in the held-out stream (the remainder of
            ``heldout_size`` going to the first strata in sorted order), interleaved round-robin so that
            every prefix ``heldout(n)`` is stratified too (:func:`stratified_interleave`). Training is still
            the generator's own stream minus the held-out questions.
        plain_answer: answer extraction fallback for completions without ``<answer>``/``\\boxed``:
            ``"first_token"`` (default for ``plain``; single-token answers), ``"first_line"``,
            ``"last_number"`` (chat models that end with the number without tags, e.g. SmolLM2), or
            ``"none"`` (default for ``chat``).
        **generator_kwargs: configuration passed to ``reasoning_gym.create_dataset`` (e.g.
            ``min_terms=2, max_terms=3`` for ``chain_sum``); ``seed``/``size`` are managed by grae.
    """

    def __init__(
        self,
        generator: str,
        *,
        name: str | None = None,
        prompt_style: str = "plain",
        system_prompt: str | None = DEFAULT_SYSTEM_PROMPT,
        heldout_size: int = DEFAULT_HELDOUT_SIZE,
        heldout_strata: Sequence[str] | None = None,
        plain_answer: str | None = None,
        **generator_kwargs: Any,
    ):
        import reasoning_gym
        from reasoning_gym.factory import DATASETS

        if generator not in DATASETS:
            from grae.data.registry import UnknownTaskError

            raise UnknownTaskError(
                f"unknown reasoning-gym generator {generator!r}; available: {', '.join(sorted(DATASETS))}"
            )
        clash = {"seed", "size"} & set(generator_kwargs)
        if clash:
            raise TypeError(f"{sorted(clash)} are managed by grae (train(n, seed=...)); do not pass them")
        if heldout_size < 1:
            raise ValueError(f"heldout_size must be >= 1, got {heldout_size}")
        self.generator = generator
        self.name = name or generator
        self.prompt_style = check_style(prompt_style)
        if self.prompt_style == "chat":
            from reasoning_gym.utils import SYSTEM_PROMPTS

            self.system_prompt = SYSTEM_PROMPTS.get(system_prompt, system_prompt) if system_prompt else None
        else:
            self.system_prompt = None
        self.answer_format = "answer_tag" if self.prompt_style == "chat" else "plain"
        self.plain_answer = plain_answer or ("first_token" if self.prompt_style == "plain" else "none")
        if self.plain_answer not in ("first_token", "first_line", "last_number", "none"):
            raise ValueError(
                f"plain_answer must be first_token, first_line, last_number or none, got {self.plain_answer!r}"
            )
        self.heldout_size = heldout_size
        if heldout_strata is not None and (
            isinstance(heldout_strata, str) or not all(isinstance(k, str) for k in heldout_strata)
        ):
            raise ValueError(f"heldout_strata must be a list of metadata keys, got {heldout_strata!r}")
        self.heldout_strata = tuple(heldout_strata) if heldout_strata else ()
        self.generator_kwargs = dict(generator_kwargs)
        self.config_hash = hashlib.sha1(
            json.dumps(self.generator_kwargs, sort_keys=True, default=repr).encode()
        ).hexdigest()[:8]
        self._create = reasoning_gym.create_dataset
        self._datasets: dict[int, Any] = {}
        self._entries: dict[str, dict] = {}
        self._heldout_cache: list[dict] | None = None
        self._dataset(HELDOUT_BASE)  # validate generator_kwargs now, not at the first train() call

    # --- generation ----------------------------------------------------------------------------

    def _dataset(self, base: int) -> Any:
        ds = self._datasets.get(base)
        if ds is None:
            ds = self._create(self.generator, seed=base, size=MAX_DRAWS, **self.generator_kwargs)
            self._datasets[base] = ds
        return ds

    def _qid(self, base: int, idx: int) -> str:
        return f"{self.generator}-{self.config_hash}-{base}-{idx}"

    def _example(self, base: int, idx: int, entry: dict) -> dict:
        qid = self._qid(base, idx)
        self._entries[qid] = entry
        return {
            "question_id": qid,
            "task": self.name,
            "question": entry["question"],
            "prompt": procedural_prompt(entry["question"], self.prompt_style, self.system_prompt),
            "answer": str(entry["answer"]),
            "source": f"reasoning_gym/{self.generator}",
        }

    def _distinct(self, base: int, budget: int, exclude: set[str]) -> Iterator[dict]:
        ds = self._dataset(base)
        seen: set[str] = set()
        for idx in range(budget):
            entry = ds[idx]
            key = question_key(entry["question"])
            if key in seen or key in exclude:
                continue
            seen.add(key)
            yield self._example(base, idx, entry)

    def stratum(self, example: Mapping[str, Any]) -> tuple:
        """The difficulty stratum of ``example``: its entry's ``metadata`` values for :attr:`heldout_strata`
        (``()`` when the task has none)."""
        meta = self.entry_for(example).get("metadata", {})
        return tuple(meta.get(k) for k in self.heldout_strata)

    def _heldout_all(self) -> list[dict]:
        if self._heldout_cache is None and self.heldout_strata:
            self._heldout_cache = self._stratified_heldout()
        if self._heldout_cache is None:
            size = self.heldout_size
            found = list(itertools.islice(self._distinct(HELDOUT_BASE, _draw_budget(size), set()), size))
            if len(found) < size:
                raise ValueError(
                    f"{self.name}: only {len(found)} distinct questions in {_draw_budget(size)} draws, fewer than "
                    f"heldout_size={size}. Lower heldout_size or widen the generator's parameters."
                )
            self._heldout_cache = found
        return self._heldout_cache

    def _stratified_heldout(self) -> list[dict]:
        size = self.heldout_size
        budget = _draw_budget(size)
        buckets: dict[tuple, list[dict]] = {}
        for example in self._distinct(HELDOUT_BASE, budget, set()):
            buckets.setdefault(self.stratum(example), []).append(example)
        strata = sorted(buckets, key=repr)
        quotas = _allocate(size, [1.0] * len(strata))
        short = [(s, len(buckets[s]), q) for s, q in zip(strata, quotas) if len(buckets[s]) < q]
        if short:
            raise ValueError(
                f"{self.name}: held-out strata {short[:3]} (stratum, distinct questions, quota) have fewer distinct "
                f"questions than their share of heldout_size={size}. Lower heldout_size or widen the generator."
            )
        return stratified_interleave([buckets[s][:q] for s, q in zip(strata, quotas)])

    def heldout_questions(self) -> set[str]:
        """Dedup keys of the whole held-out split (excluded from every training split)."""
        return {question_key(e["question"]) for e in self._heldout_all()}

    def heldout(self, n: int | None = None) -> list[dict]:
        if n is not None and n > self.heldout_size:
            raise ValueError(f"{self.name}: heldout({n}) exceeds heldout_size={self.heldout_size}; raise heldout_size")
        return list(self._heldout_all()[: self.heldout_size if n is None else n])

    def iter_train(self, seed: int = 0) -> Iterator[dict]:
        return self._distinct(train_base(seed), MAX_DRAWS, self.heldout_questions())

    def train(self, n: int | None, seed: int = 0) -> list[dict]:
        if n is None:
            raise ValueError(f"{self.name} is procedural (unbounded): pass a number of examples")
        exclude = self.heldout_questions()
        out = list(itertools.islice(self._distinct(train_base(seed), _draw_budget(n), exclude), n))
        if len(out) < n:
            raise ValueError(
                f"{self.name}: only {len(out)} distinct training questions in {_draw_budget(n)} draws (asked "
                f"for {n}; {len(exclude)} held-out questions excluded). Ask for fewer, lower heldout_size, or "
                "widen the generator's parameters."
            )
        return out

    # --- scoring -------------------------------------------------------------------------------

    def entry_for(self, example: Mapping[str, Any]) -> dict:
        """The reasoning-gym entry (with ``metadata``) behind ``example``: from this task's cache, else
        regenerated from its ``question_id`` (deterministic), else rebuilt from ``question``/``answer``."""
        qid = example.get("question_id")
        if isinstance(qid, str):
            entry = self._entries.get(qid)
            if entry is not None:
                return entry
            parts = qid.rsplit("-", 3)
            if len(parts) == 4 and parts[0] == self.generator and parts[1] == self.config_hash:
                try:
                    base, idx = int(parts[2]), int(parts[3])
                    if 0 <= idx < MAX_DRAWS and 0 <= base <= HELDOUT_BASE:
                        entry = self._dataset(base)[idx]
                        if example.get("question") in (None, entry["question"]):
                            self._entries[qid] = entry
                            return entry
                except (ValueError, KeyError):
                    pass
        return {"question": example.get("question", ""), "answer": str(example.get("answer", "")), "metadata": {}}

    def answer_set(self) -> list[str] | None:
        """The generator's finite answer set under its parameters (:data:`ANSWER_SETS`), else None."""
        rule = ANSWER_SETS.get(self.generator)
        return rule(self.generator_kwargs) if rule is not None else None

    def parse_answer(self, completion: Any) -> str | None:
        """The answer :meth:`score` extracts (``<answer>``, ``\\boxed``, then :attr:`plain_answer`), canonical
        (:func:`grae.rewards.verify.canonical_answer`); None when there is none."""
        from grae.rewards.verify import canonical_answer

        return canonical_answer(extract_procedural_answer(completion_text(completion), fallback=self.plain_answer))

    def score(self, completion: Any, example: Mapping[str, Any]) -> float:
        """Extract (``<answer>``, ``\\boxed``, then :attr:`plain_answer` fallback) and score with the
        generator's own ``score_answer``, binarised (``== 1.0``)."""
        answer = extract_procedural_answer(completion_text(completion), fallback=self.plain_answer)
        entry = self.entry_for(example)
        if str(example.get("answer", entry["answer"])) != str(entry["answer"]):
            entry = {**entry, "answer": str(example["answer"])}
        return score_procedural(answer, entry, self._dataset(HELDOUT_BASE))


for _generator in REGISTERED_GENERATORS:
    register_task(_generator)(functools.partial(ReasoningGymTask, _generator, name=_generator))


@register_name_form("rg:")
def _generator_task(generator: str, **params: Any) -> ReasoningGymTask:
    """``rg:<generator>``: any reasoning-gym generator, named ``rg:<generator>`` unless ``name`` is given."""
    return ReasoningGymTask(generator, name=params.pop("name", "rg:" + generator), **params)


# --- mixes ---------------------------------------------------------------------------------------


def parse_mix_spec(spec: str) -> dict[str, float]:
    """``"chain_sum=2,products=1"`` -> ``{"chain_sum": 2.0, "products": 1.0}`` (a bare name weighs 1)."""
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, _, weight = part.partition("=")
        try:
            out[name.strip()] = float(weight) if weight else 1.0
        except ValueError:
            raise ValueError(f"bad weight in mix spec part {part!r} (expected name=number)") from None
    if not out:
        raise ValueError(f"empty mix spec {spec!r}; expected e.g. 'chain_sum=2,products=1'")
    return out


def stratified_interleave(groups: Sequence[Sequence[Any]]) -> list[Any]:
    """Round-robin over ``groups`` (one item of each in turn, skipping exhausted ones): every prefix of
    the result holds each group's items in proportion, up to one item."""
    out: list[Any] = []
    for row in itertools.zip_longest(*groups, fillvalue=_NOTHING):
        out.extend(x for x in row if x is not _NOTHING)
    return out


_NOTHING = object()


def _allocate(n: int, weights: Sequence[float]) -> list[int]:
    """Largest-remainder split of ``n`` into integer counts proportional to ``weights``."""
    total = sum(weights)
    raw = [n * w / total for w in weights]
    counts = [int(r) for r in raw]
    order = sorted(range(len(raw)), key=lambda i: (counts[i] - raw[i], i))
    for i in order[: n - sum(counts)]:
        counts[i] += 1
    return counts


class TaskMix(Task):
    """A weighted mixture of tasks (e.g. several reasoning-gym generators).

    Args:
        components: ``{task_or_name: weight}`` or ``[(task_or_name, weight), ...]``; names are built with
            ``get_task(name, prompt_style=..., **component_params)``. Component names must be distinct
            and all components must share ``prompt_style``.
        name: the mix's name (examples keep their component's name in ``task``).
        prompt_style: prompt style for components given by name.
        **component_params: extra parameters for components given by name (e.g. ``heldout_size``).

    ``train(n, seed)`` picks each example's component at random with probability proportional to its
    weight (``random.Random(seed)``); ``heldout(n)`` splits ``n`` proportionally (largest remainder) and
    interleaves deterministically. :meth:`score` dispatches on ``example["task"]``.
    """

    def __init__(
        self,
        components: Mapping[Any, float] | Sequence[tuple[Any, float]],
        *,
        name: str = "mix",
        prompt_style: str = "plain",
        **component_params: Any,
    ):
        items = list(components.items()) if isinstance(components, Mapping) else list(components)
        if not items:
            raise ValueError("a task mix needs at least one component")
        self.components: list[Task] = []
        self.weights: list[float] = []
        for task, weight in items:
            if not weight > 0:
                raise ValueError(f"mix weights must be > 0, got {weight!r} for {task!r}")
            if isinstance(task, str):
                task = get_task(task, prompt_style=prompt_style, **component_params)
            self.components.append(task)
            self.weights.append(float(weight))
        names = [t.name for t in self.components]
        if len(set(names)) != len(names):
            raise ValueError(f"mix components need distinct names, got {names}")
        styles = {t.prompt_style for t in self.components}
        if len(styles) != 1:
            raise ValueError(f"mix components must share one prompt_style, got {sorted(styles)}")
        self.name = name
        self.prompt_style = styles.pop()
        formats = {t.answer_format for t in self.components}
        self.answer_format = formats.pop() if len(formats) == 1 else "boxed"
        self._by_name = dict(zip(names, self.components))

    def _heldout_keys(self) -> set[str]:
        keys: set[str] = set()
        for task in self.components:
            keys |= {question_key(e["question"]) for e in task.heldout(None)}
        return keys

    def iter_train(self, seed: int = 0) -> Iterator[dict]:
        rng = random.Random(seed)
        streams = [t.iter_train(seed) for t in self.components]
        alive = list(range(len(streams)))
        excluded = self._heldout_keys()
        seen: set[str] = set()
        while alive:
            k = rng.choices(alive, weights=[self.weights[i] for i in alive])[0]
            for example in streams[k]:
                key = question_key(example["question"])
                if key not in seen and key not in excluded:  # cross-component duplicates (rare)
                    seen.add(key)
                    yield example
                    break
            else:
                alive.remove(k)

    def train(self, n: int | None, seed: int = 0) -> list[dict]:
        if n is None and any(isinstance(t, ReasoningGymTask) for t in self.components):
            raise ValueError("a task mix with procedural components is unbounded: pass a number of examples")
        return super().train(n, seed)

    def heldout(self, n: int | None = None) -> list[dict]:
        if n is None:
            parts = [t.heldout(None) for t in self.components]
        else:
            parts = [t.heldout(c) for t, c in zip(self.components, _allocate(n, self.weights))]
        out = [e for part in parts for e in part]
        random.Random(0).shuffle(out)
        return out

    def score(self, completion: Any, example: Mapping[str, Any]) -> float:
        task = self._by_name.get(example.get("task"))
        if task is None:
            raise ValueError(
                f"example task {example.get('task')!r} is not a component of mix {self.name!r} "
                f"({', '.join(self._by_name)})"
            )
        return task.score(completion, example)


@register_name_form("mix:")
def _mix_task(spec: str, **params: Any) -> TaskMix:
    """``mix:<name>=<weight>,…``: a weighted mix of registered tasks (:func:`parse_mix_spec`)."""
    return TaskMix(parse_mix_spec(spec), **params)
