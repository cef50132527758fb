"""Task registry: procedural (reasoning-gym), Hugging Face and local-file tasks with train / held-out
splits, prompt styles and binary scorers.

>>> from grae.data import get_task
>>> task = get_task("chain_sum", prompt_style="plain")
>>> train = task.train(256, seed=0)          # list of example dicts
>>> heldout = task.heldout(100)              # disjoint from every training split
>>> ds = task.to_hf_dataset(train)           # columns prompt, answer, question_id, task, question, source
>>> reward = task.reward_fn()                # TRL reward function (binary, uses task.score)

See docs/tasks.md.
"""

from grae.data import hub as _hub  # noqa: F401  (registers the hub tasks)
from grae.data import procedural as _procedural  # noqa: F401  (registers reasoning-gym tasks)
from grae.data import trace as _trace  # noqa: F401  (registers chain_trace)
from grae.data import visual as _visual  # noqa: F401  (registers the visual tasks)
from grae.data.base import EXAMPLE_KEYS, Task, question_key, text_id, to_hf_dataset
from grae.data.fields import DataFormatError, map_generic_row
from grae.data.hub import SOURCES, HubSource, HubTask
from grae.data.local import LocalTask, read_rows
from grae.data.procedural import ReasoningGymTask, TaskMix, parse_mix_spec
from grae.data.prompts import MATH_INSTRUCTION, PLAIN_ANSWER_SUFFIX, math_prompt, procedural_prompt
from grae.data.registry import UnknownTaskError, get_task, register_task, task_names
from grae.data.rows import RowListTask, RowsTask

__all__ = [
    "DataFormatError",
    "EXAMPLE_KEYS",
    "HubSource",
    "HubTask",
    "LocalTask",
    "MATH_INSTRUCTION",
    "PLAIN_ANSWER_SUFFIX",
    "ReasoningGymTask",
    "RowListTask",
    "RowsTask",
    "SOURCES",
    "Task",
    "TaskMix",
    "UnknownTaskError",
    "get_task",
    "map_generic_row",
    "math_prompt",
    "parse_mix_spec",
    "procedural_prompt",
    "question_key",
    "read_rows",
    "register_task",
    "task_names",
    "text_id",
    "to_hf_dataset",
]
