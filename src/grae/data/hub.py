"""Math datasets from the Hugging Face Hub (training sets and evaluation benchmarks).

Loading uses ``datasets.load_dataset`` (network or the local HF cache; set ``HF_DATASETS_OFFLINE=1`` to
use only the cache). The field mappings are pure functions in :mod:`grae.data.fields`.

Training tasks (held-out split in parentheses):

==============  ===========================================  =============================================
name            source                                       gold answer
==============  ===========================================  =============================================
``math``        DigitalLearningGmbH/MATH-lighteval, train    last ``\\boxed{}`` of ``solution`` (MATH-500)
``gsm8k``       openai/gsm8k (main), train                   after ``####`` in ``answer`` (gsm8k test)
``deepscaler``  agentica-org/DeepScaleR-Preview-Dataset      ``answer`` (MATH-500)
``dapo_math``   BytedTsinghua-SIA/DAPO-Math-17k              ``reward_model.ground_truth`` (AIME 2024)
==============  ===========================================  =============================================

Evaluation-only benchmarks: ``math500`` (HuggingFaceH4/MATH-500), ``math_test`` (MATH test, 5000),
``gsm8k_test``, ``aime24`` (HuggingFaceH4/aime_2024), ``aime25`` (math-ai/aime25), ``amc23``
(math-ai/amc23), ``minerva`` (math-ai/minervamath), ``olympiadbench`` (math-ai/olympiadbench). The
benchmark mirrors use the generic field mapping (``problem``/``question`` and
``answer``/``final_answer``), so another mirror with those columns works via ``HubSource``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from grae.data import fields
from grae.data.registry import register_name_form, register_task
from grae.data.rows import RowsTask


@dataclass(frozen=True)
class HubSource:
    """One split of a hub dataset and its field mapping.

    Attributes:
        path: dataset repository (``"openai/gsm8k"``).
        configs: dataset config names to load and concatenate (``(None,)`` for the default config).
        split: split name.
        mapper: raw row -> ``{"question", "answer", "id"}`` or ``None`` (skip row).
    """

    path: str
    split: str
    mapper: Callable[[Mapping[str, Any]], dict | None]
    configs: tuple[str | None, ...] = (None,)

    def describe(self) -> str:
        cfg = ",".join(c for c in self.configs if c) or "default"
        return f"{self.path}[{cfg}]:{self.split}"


MATH_SUBJECTS = (
    "algebra",
    "counting_and_probability",
    "geometry",
    "intermediate_algebra",
    "number_theory",
    "prealgebra",
    "precalculus",
)

SOURCES: dict[str, HubSource] = {
    "math_train": HubSource("DigitalLearningGmbH/MATH-lighteval", "train", fields.map_math_row, ("default",)),
    "math_test": HubSource("DigitalLearningGmbH/MATH-lighteval", "test", fields.map_math_row, ("default",)),
    "hendrycks_math_train": HubSource("EleutherAI/hendrycks_math", "train", fields.map_math_row, MATH_SUBJECTS),
    "hendrycks_math_test": HubSource("EleutherAI/hendrycks_math", "test", fields.map_math_row, MATH_SUBJECTS),
    "math500": HubSource("HuggingFaceH4/MATH-500", "test", fields.map_math500_row),
    "gsm8k_train": HubSource("openai/gsm8k", "train", fields.map_gsm8k_row, ("main",)),
    "gsm8k_test": HubSource("openai/gsm8k", "test", fields.map_gsm8k_row, ("main",)),
    "deepscaler": HubSource("agentica-org/DeepScaleR-Preview-Dataset", "train", fields.map_deepscaler_row),
    "dapo_math": HubSource("BytedTsinghua-SIA/DAPO-Math-17k", "train", fields.map_dapo_row),
    "aime24": HubSource("HuggingFaceH4/aime_2024", "train", fields.map_generic_row),
    "aime25": HubSource("math-ai/aime25", "test", fields.map_generic_row),
    "amc23": HubSource("math-ai/amc23", "test", fields.map_generic_row),
    "minerva": HubSource("math-ai/minervamath", "test", fields.map_generic_row),
    "olympiadbench": HubSource("math-ai/olympiadbench", "test", fields.map_generic_row),
}


def map_rows(source: HubSource, raw_rows: Sequence[Mapping[str, Any]]) -> list[dict]:
    """Apply ``source.mapper`` to raw rows, dropping rows it rejects (``None``) or that lack fields."""
    return [row for _, row in map_located_rows(source, [("", raw) for raw in raw_rows])]


def map_located_rows(source: HubSource, located: Sequence[tuple[str, Mapping[str, Any]]]) -> list[tuple[str, dict]]:
    """:func:`map_rows` of ``(where, raw row)`` pairs (:func:`grae.data.local.located_records`), keeping ``where``."""
    out = []
    for where, raw in located:
        try:
            row = source.mapper(raw)
        except fields.DataFormatError:
            row = None
        if row is not None:
            out.append((where, row))
    return out


#: the offline alternative a failed download names (``grae eval`` benchmarks name their own: ``NAME=PATH``)
LOCAL_HINT = "export the data to JSONL/Parquet with 'problem' and 'answer' fields and use the task 'local:<path>'"


def load_hub_rows(source: HubSource, *, local_hint: str = LOCAL_HINT) -> list[dict]:
    """Download (or read from the HF cache) ``source`` and map its rows. Errors name the dataset and the
    offline alternative (``local_hint``)."""
    import datasets

    raw: list[Mapping[str, Any]] = []
    for config in source.configs:
        try:
            ds = datasets.load_dataset(source.path, config, split=source.split)
        except Exception as exc:  # noqa: BLE001 - re-raised with context
            raise RuntimeError(
                f"could not load {source.describe()} from the Hugging Face Hub ({type(exc).__name__}: {exc}). "
                f"Without network access, use a cached copy (HF_DATASETS_OFFLINE=1) or {local_hint}."
            ) from exc
        raw.extend(ds)
    rows = map_rows(source, raw)
    if not rows:
        raise RuntimeError(f"{source.describe()}: no usable rows after field mapping ({len(raw)} raw rows)")
    return rows


def hub_cached(path: str) -> bool:
    """Whether hub dataset ``path`` (``org/name``) has a copy on this machine: in the hub cache
    (``HF_HUB_CACHE``, where ``datasets`` downloads it) or in ``datasets``' own cache (``HF_DATASETS_CACHE``,
    its prepared Arrow files); both live under ``HF_HOME`` by default."""
    from pathlib import Path

    from huggingface_hub.constants import HF_HUB_CACHE

    try:
        from datasets.config import HF_DATASETS_CACHE
    except ImportError:
        HF_DATASETS_CACHE = None
    org_name = path.replace("/", "--")
    places = [Path(HF_HUB_CACHE) / f"datasets--{org_name}"]
    if HF_DATASETS_CACHE is not None:
        places.append(Path(HF_DATASETS_CACHE) / path.replace("/", "___"))
    return any(place.is_dir() for place in places)


class HubTask(RowsTask):
    """A math task backed by hub datasets.

    Args:
        name: task name.
        train: key of :data:`SOURCES` (or a :class:`HubSource`) for the training split; ``None`` for
            evaluation-only benchmarks.
        heldout: key/``HubSource`` of the held-out split, or ``"carve"`` to carve ``heldout_size`` questions
            out of the training data.
        loader: ``HubSource -> rows`` (default :func:`load_hub_rows`; replace it for mirrors or tests).
        **kwargs: :class:`grae.data.rows.RowsTask` options (``prompt_style``, ``instruction``,
            ``heldout_size``, ``timeout``).
    """

    def __init__(
        self,
        name: str,
        *,
        train: str | HubSource | None,
        heldout: str | HubSource = "carve",
        loader: Callable[[HubSource], list[dict]] = load_hub_rows,
        **kwargs: Any,
    ):
        self.train_source = _source(train) if train is not None else None
        self.heldout_source = None if heldout == "carve" else _source(heldout)
        if self.train_source is None and self.heldout_source is None:
            raise ValueError(f"{name}: an evaluation-only task needs a held-out source")
        self.loader = loader
        first = self.train_source or self.heldout_source
        super().__init__(name, eval_only=self.train_source is None, source=first.path, **kwargs)

    def load_train_rows(self) -> list[dict]:
        if self.train_source is None:
            return []
        return self.loader(self.train_source)

    def load_heldout_rows(self) -> list[dict] | None:
        return None if self.heldout_source is None else self.loader(self.heldout_source)


def _source(spec: str | HubSource) -> HubSource:
    if isinstance(spec, HubSource):
        return spec
    if spec not in SOURCES:
        raise ValueError(f"unknown hub source {spec!r}; known: {', '.join(sorted(SOURCES))} (or pass a HubSource)")
    return SOURCES[spec]


#: registered training tasks over hub datasets: name -> (training source, held-out source), keys of SOURCES
TRAINING_TASKS: dict[str, tuple[str, str]] = {}


def _register(name: str, train: str | None, heldout: str) -> None:
    register_task(name)(functools.partial(HubTask, name, train=train, heldout=heldout))
    if train is not None:
        TRAINING_TASKS[name] = (train, heldout)


_register("math", "math_train", "math500")
_register("gsm8k", "gsm8k_train", "gsm8k_test")
_register("deepscaler", "deepscaler", "math500")
_register("dapo_math", "dapo_math", "aime24")
for _bench in ("math500", "math_test", "gsm8k_test", "aime24", "aime25", "amc23", "minerva", "olympiadbench"):
    _register(_bench, None, _bench)


def known_source(dataset: str) -> HubSource | None:
    """The first source in :data:`SOURCES` that reads hub dataset ``dataset`` (its field mapping and
    configs are the ones ``hf:<dataset>`` uses), or None."""
    return next((source for source in SOURCES.values() if source.path == dataset), None)


@register_name_form("hf:")
def _hub_id_task(dataset: str, *, split: str = "train", heldout_split: str | None = None, config: str | None = None,
                 problem_field: str | None = None, answer_field: str | None = None, **params: Any) -> HubTask:
    """``hf:<org/name>``: any hub dataset as a task, TRL-style. ``split`` trains (``heldout_split``, or
    ``heldout_size`` questions carved out of it, is held out); ``config`` is the dataset config;
    ``problem_field``/``answer_field`` name the prompt and gold columns (default: the generic guesses of
    :func:`grae.data.fields.map_generic_row`, verl's and TRL's schemas included). A dataset grae knows
    (:data:`SOURCES`, e.g. ``openai/gsm8k``) is read with its own mapping and configs unless fields are
    named. Offline, save a copy and use ``local:<path>`` with the same field names."""
    known = known_source(dataset) if problem_field is None and answer_field is None else None
    if known is not None:
        mapper: Callable[[Mapping[str, Any]], dict | None] = known.mapper
        configs = (config,) if config is not None else known.configs
    else:
        mapper = functools.partial(fields.map_generic_row, problem_field=problem_field, answer_field=answer_field)
        configs = (config,)
    train = HubSource(dataset, split, mapper, configs)
    heldout = HubSource(dataset, heldout_split, mapper, configs) if heldout_split else "carve"
    return HubTask(params.pop("name", f"hf:{dataset}"), train=train, heldout=heldout, **params)


def recipe_task(dataset: str, *, config: str | None = None, split: str = "train",
                test_split: str | None = None) -> tuple[str, dict[str, Any]]:
    """A TRL recipe's ``dataset_name`` (with ``dataset_config``, ``dataset_train_split`` and, when given,
    ``dataset_test_split``) as grae's ``(task.name, task.params)``: the registered task that trains on that
    very split (``openai/gsm8k`` -> ``gsm8k``, held out on gsm8k's test split), else ``hf:<dataset>``."""
    for name, (train_key, heldout_key) in TRAINING_TASKS.items():
        train, heldout = SOURCES[train_key], SOURCES[heldout_key]
        if (train.path == dataset and train.split == split and (config is None or train.configs == (config,))
                and test_split in (None, heldout.split if heldout.path == dataset else None)):
            return name, {}
    params = {"config": config, "split": None if split == "train" else split, "heldout_split": test_split}
    return f"hf:{dataset}", {key: value for key, value in params.items() if value is not None}


#: what each known mapping reads, for :func:`fields_line`
_MAPPING_NOTES = {
    fields.map_math_row: "problem 'problem', gold the last \\boxed{} of 'solution'",
    fields.map_math500_row: "problem 'problem', gold 'answer'",
    fields.map_gsm8k_row: "problem 'question', gold after '####' in 'answer'",
    fields.map_deepscaler_row: "problem 'problem', gold 'answer'",
    fields.map_dapo_row: "problem the user message of 'prompt', gold 'reward_model.ground_truth'",
}


def fields_line(task: Any) -> str | None:
    """One line saying which columns a hub task reads (its training source, else its held-out one) and how
    to name others; None for a task that is not a :class:`HubTask`."""
    if not isinstance(task, HubTask):
        return None
    source = task.train_source or task.heldout_source
    mapper = source.mapper
    where = f"{task.name} reads {source.describe()}"
    if mapper in _MAPPING_NOTES:
        return f"{where}: {_MAPPING_NOTES[mapper]}"
    named = getattr(mapper, "keywords", {}) or {}
    problem = repr(named["problem_field"]) if named.get("problem_field") else "|".join(fields.PROBLEM_FIELDS)
    answer = repr(named["answer_field"]) if named.get("answer_field") else "|".join(
        (*fields.ANSWER_FIELDS, *fields.SOLUTION_FIELDS))
    return (f"{where}: problem {problem}, gold {answer} (first present; chat prompts: the last user message; "
            "other columns: task.params.problem_field, answer_field)")
