"""The package's layering: the core imports no engine, and no grae module imports itself back.

* The core (``grae.advantage``, ``grae.loss``, ``grae.metrics``, ``grae.groups``, ``grae.theory``) imports
  only torch and numpy, as the README promises: checked in a fresh interpreter.
* No import cycle among grae's modules, counting the imports inside functions (which hide a cycle from
  the interpreter until the function runs) and those under ``TYPE_CHECKING`` (a type-only back-reference
  is still a lower layer knowing a higher one: give the lower layer a Protocol, as
  ``grae.rewards.adapters.ScoringTask``). Read from the source with :mod:`ast`, so nothing is imported.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from timeouts import scaled

SRC = Path(__file__).resolve().parents[1] / "src"
CORE = ("grae.advantage", "grae.loss", "grae.metrics", "grae.groups", "grae.theory")
#: what the core must not pull in: the engines, tasks and CLI's dependencies (the `train`/`verl` extras)
HEAVY = ("transformers", "trl", "datasets", "accelerate", "verl", "vllm", "reasoning_gym", "math_verify",
         "matplotlib", "typer", "rich", "yaml", "pyarrow")


def imported_by(modules: tuple[str, ...], src: Path = SRC) -> list[str]:
    """The top-level packages of :data:`HEAVY` in ``sys.modules`` after importing ``modules`` (from
    ``src``) in a fresh interpreter."""
    code = (f"import sys; sys.path.insert(0, {str(src)!r}); import json\n"
            + "".join(f"import {m}\n" for m in modules)
            + f"print(json.dumps(sorted(p for p in {list(HEAVY)!r} if p in sys.modules)))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=scaled(300))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_the_core_imports_no_engine_dependency():
    loaded = imported_by(CORE)
    assert not loaded, (f"importing {', '.join(CORE)} imported {', '.join(loaded)}: the core must import only torch "
                        "and numpy (README); import those inside the function that needs them, or move the code out "
                        "of the core")


# -- import cycles ---------------------------------------------------------------------------------


def module_files(src: Path = SRC, package: str = "grae") -> dict[str, tuple[Path, bool]]:
    """``{module name: (file, is a package __init__)}`` for every module of ``package`` under ``src``."""
    out = {}
    for path in sorted((src / package).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return out


def import_graph(src: Path = SRC, package: str = "grae") -> dict[str, dict[str, int]]:
    """``{module: {imported grae module: line}}`` from every ``import`` statement anywhere in the module
    (top level, functions, ``TYPE_CHECKING`` blocks). ``from a.b import c`` is an edge to ``a.b.c`` when that
    is a module, else to ``a.b``; ``import a.b.c`` to the longest prefix that is a module."""
    modules = module_files(src, package)

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, dict[str, int]] = {}
    for module, (path, is_package) in modules.items():
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            targets: list[str | None] = []
            if isinstance(node, ast.Import):
                targets = [known(alias.name) for alias in node.names if alias.name.split(".")[0] == package]
            elif isinstance(node, ast.ImportFrom):
                if node.level:  # relative: from the module's package, one level up per extra dot
                    base = module.split(".") if is_package else module.split(".")[:-1]
                    base = base[: len(base) - (node.level - 1)]
                    origin = ".".join(base + ([node.module] if node.module else []))
                else:
                    origin = node.module or ""
                if origin.split(".")[0] != package:
                    continue
                targets = [f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in modules else known(origin)
                           for alias in node.names]
            for target in targets:
                if target and target != module:
                    edges.setdefault(target, node.lineno)
        graph[module] = edges
    return graph


def import_cycles(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """One cycle (``[a, b, …, a]``) per strongly connected component of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(sorted(component))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(graph) + 100))
    for v in sorted(graph):
        if v not in index:
            visit(v)
    cycles = []
    for component in components:  # a shortest way from the component's first module back to itself
        members, start = set(component), component[0]
        paths = {start: [start]}
        frontier = [start]
        while frontier and start not in [w for v in frontier for w in graph[v]]:
            nxt = []
            for v in frontier:
                for w in sorted(graph[v]):
                    if w in members and w not in paths:
                        paths[w] = paths[v] + [w]
                        nxt.append(w)
            frontier = nxt
        last = next(v for v in frontier if start in graph[v])
        cycles.append(paths[last] + [start])
    return cycles


def describe(cycle: list[str], graph: dict[str, dict[str, int]]) -> str:
    return " → ".join(f"{a} (line {graph[a][b]})" for a, b in zip(cycle, cycle[1:])) + f" → {cycle[-1]}"


def test_no_import_cycle_among_grae_modules():
    graph = import_graph()
    assert len(graph) > 50, sorted(graph)
    cycles = import_cycles(graph)
    assert not cycles, "import cycles (break them by moving what both sides need into the lower layer):\n" + "\n".join(
        describe(c, graph) for c in cycles)


def test_the_cycle_check_sees_imports_in_functions_relative_and_type_only(tmp_path):
    """The check itself: a package whose cycles hide in a function, a relative import and a TYPE_CHECKING
    block is caught; the same package without the back-references is clean."""
    package = tmp_path / "grae"
    (package / "low").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "low" / "__init__.py").write_text("from .base import Base\n")
    (package / "low" / "base.py").write_text("class Base:\n    pass\n")
    (package / "high.py").write_text("from grae.low import Base\n")
    assert import_cycles(import_graph(tmp_path)) == []
    backrefs = {
        "function": "def f():\n    from grae.high import x\n",
        "relative": "def f():\n    from .. import high\n",
        "type-only": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import grae.high\n",
    }
    for kind, code in backrefs.items():
        (package / "low" / "base.py").write_text("class Base:\n    pass\n" + code)
        cycles = import_cycles(import_graph(tmp_path))
        assert len(cycles) == 1 and set(cycles[0]) == {"grae.high", "grae.low", "grae.low.base"}, (kind, cycles)


# -- the layers (docs/architecture.md) -------------------------------------------------------------

#: grae's sub-packages, highest layer first (docs/architecture.md); "grae" is the package's own __init__
LAYERS = (("cli",), ("compare",), ("train",), ("engines", "tiny", "sim"), ("eval", "advantage"),
          ("data", "presets", "metrics"),
          ("rewards", "io", "printing", "yaml_io", "sampling", "loss", "groups", "theory", "grae"),
          ("supervision",))
#: the imports that run back up a layer, each with its reason in docs/architecture.md's table
BACK_ARROWS = {
    ("grae.engines.trl", "grae.train.checkpoints"),  # re-exports of names that lived in engines/trl.py
    ("grae.eval.jobs", "grae.train.rundir"),  # a train run directory's file names
    ("grae.eval.report", "grae.train.rundir"),
    ("grae.eval.run_heldout", "grae.train.rundir"),
    ("grae.eval.tasks", "grae.tiny.tasks"),  # the tiny model's task settings
    ("grae.rewards.safe", "grae.advantage.base"),  # REWARD_LIMIT, one threshold for both
}


def package_of(module: str) -> str:
    """``grae.engines.trl.loss`` → ``engines``; ``grae.io`` → ``io``; ``grae`` → ``grae``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def arrows_up(graph: dict[str, dict[str, int]], layers=LAYERS) -> list[tuple[str, str, int]]:
    """``(module, imported module, line)`` for each import of a package in the same or a higher layer.
    A package that is in no layer raises: a new package must be placed in ``LAYERS`` (and the doc)."""
    layer = {package: i for i, packages in enumerate(layers) for package in packages}
    unplaced = sorted({package_of(m) for m in graph} - set(layer))
    assert not unplaced, f"packages in no layer: {unplaced}; add them to LAYERS and to docs/architecture.md"
    return [(module, target, line) for module, edges in sorted(graph.items()) for target, line in edges.items()
            if package_of(target) != package_of(module) and layer[package_of(target)] <= layer[package_of(module)]]


def test_imports_follow_the_layers():
    found = arrows_up(import_graph())
    new = [(m, t, line) for m, t, line in found if (m, t) not in BACK_ARROWS]
    assert not new, ("imports that run back up a layer (docs/architecture.md): move what both sides need into the "
                     "lower layer, or list the arrow with its reason in BACK_ARROWS and the doc's table:\n"
                     + "\n".join(f"{m} (line {line}) -> {t}" for m, t, line in new))
    stale = BACK_ARROWS - {(m, t) for m, t, _ in found}
    assert not stale, f"listed arrows that no longer exist (remove them here and in docs/architecture.md): {stale}"


def test_the_layer_check_catches_an_arrow_up_and_an_unplaced_package():
    graph = {"grae.io": {"grae.cli.main": 3}, "grae.cli.main": {"grae.io": 1}}
    assert arrows_up(graph) == [("grae.io", "grae.cli.main", 3)]
    assert arrows_up({"grae.eval.x": {"grae.advantage.y": 2}}) == [("grae.eval.x", "grae.advantage.y", 2)]  # same layer
    with pytest.raises(AssertionError, match="packages in no layer: \\['newpkg'\\]"):
        arrows_up({"grae.newpkg.a": {}})


def test_the_layer_table_in_the_docs_names_every_back_arrow():
    text = (SRC.parent / "docs" / "architecture.md").read_text(encoding="utf-8")
    for module, target in BACK_ARROWS:
        assert f"`{target}`" in text and module.rsplit(".", 1)[-1] in text, (module, target)
    for packages in LAYERS:
        assert " · ".join(p for p in packages if p != "grae") in text, packages
