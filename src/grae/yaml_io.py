"""The one YAML reader of grae: ``yaml.safe_load`` that refuses a mapping key written twice.

PyYAML keeps the last of two equal keys without a word, so a design listing method ``grpo`` twice trains only the
second one under that name. :func:`load_yaml` raises :class:`DuplicateKeyError` (a ``yaml.YAMLError``, so every
reader's "not valid YAML" handling reports it) naming the key and both lines. Merge keys (``<<: *base``) keep their
YAML meaning: a key given beside a merge overrides the merged one.
"""

from __future__ import annotations

from typing import Any

import yaml
from yaml.constructor import ConstructorError


class DuplicateKeyError(ConstructorError):
    """A mapping key written twice in one YAML mapping; ``str()`` is one line naming the key and its lines."""

    def __str__(self) -> str:
        return str(self.problem)


class _UniqueKeyLoader(yaml.SafeLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, yaml.Node] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.setdefault(key, key_node)
            except TypeError:
                continue  # an unhashable key: SafeLoader refuses it itself
            if first is not key_node:
                lines = f"lines {first.start_mark.line + 1} and {key_node.start_mark.line + 1}"
                raise DuplicateKeyError(None, None, f"the key {key!r} is written twice ({lines}); YAML would keep "
                                        "only the last: remove or rename one", key_node.start_mark)
        return super().construct_mapping(node, deep=deep)


def load_yaml(text: str | bytes) -> Any:
    """``yaml.safe_load(text)``, refusing a mapping key written twice (:class:`DuplicateKeyError`)."""
    return yaml.load(text, Loader=_UniqueKeyLoader)  # noqa: S506 - a SafeLoader subclass
