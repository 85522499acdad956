"""The package's import order is one-way: each module imports only from its own layer or the
layers below it, and no modules import each other in a cycle. Imports inside functions and under
`if TYPE_CHECKING:` count like any other.

Run `python -m pytest -s tests/test_layers.py` to print the layers with their modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {
    "gameon": "gameon",
    "envs": "gameon.envs",
    "baselines": "gameon.baselines",
    "experimenter": "gameon.experimenter",
    "benchmark": "gameon.benchmark",
}
"""Where each subpackage lives (pyproject.toml's package-dir)."""

LAYERS = (
    ("envs", ("gameon.envs",)),
    (
        "core",
        (
            "gameon",
            "gameon.atomic",
            "gameon.evaluation",
            "gameon.extras",
            "gameon.integrity",
            "gameon.policy",
            "gameon.records",
            "gameon.text",
        ),
    ),
    (
        "skills",
        (
            "gameon.experimenter",
            "gameon.experimenter.coded_api",
            "gameon.experimenter.sandbox",
            "gameon.experimenter.skills",
        ),
    ),
    (
        "curricula",
        (
            "gameon.experimenter.curriculum",
            "gameon.experimenter.curricula",
            "gameon.experimenter.curriculum_wrapper",
            "gameon.experimenter.vlm_curriculum",
            "gameon.experimenter.vlm",
            "gameon.experimenter.coded_actions",
        ),
    ),
    ("learners", ("gameon.baselines",)),
    (
        "experiment",
        (
            "gameon.experimenter.embodiment",
            "gameon.experimenter.loop",
            "gameon.experimenter.vlm.collect",
        ),
    ),
    ("benchmark", ("gameon.benchmark",)),
    ("cli", ("gameon.cli", "gameon.__main__")),
)
"""Lowest first. A module belongs to the layer of its longest matching prefix."""


def package_modules() -> dict[str, Path]:
    """Every module of the package, by dotted name."""
    modules = {}
    for folder, package in FOLDERS.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = [p for p in path.relative_to(ROOT / folder).with_suffix("").parts]
            parts = [p for p in parts if p != "__init__"]
            modules[".".join([package, *parts])] = path
    return modules


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The package's modules that `name` imports, anywhere in its source."""

    def known(dotted: str) -> str:
        while dotted and dotted not in modules:
            dotted = dotted.rpartition(".")[0]
        return dotted

    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {known(alias.name) for alias in node.names if alias.name.startswith("gameon")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parent, *([node.module] if node.module else [])])
            if base.split(".")[0] != "gameon":
                continue
            for alias in node.names:
                full = f"{base}.{alias.name}"
                found.add(full if full in modules else known(base))
    return found - {name, ""}


def layer_of(module: str) -> int:
    """Index in LAYERS of the module's layer (its longest matching prefix)."""
    best, length = -1, -1
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > length:
                best, length = index, len(prefix)
    if best < 0:
        raise AssertionError(f"{module} belongs to no layer: add it to LAYERS in {__file__}")
    return best


def import_graph() -> dict[str, set[str]]:
    modules = package_modules()
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_every_module_has_a_layer_and_the_layers_print() -> None:
    graph = import_graph()
    members: dict[int, list[str]] = {}
    for module in graph:
        members.setdefault(layer_of(module), []).append(module)
    print("\nlayers, lowest first (a module may import from its own layer and the ones before it):")
    for index, (layer, _) in enumerate(LAYERS):
        names = ", ".join(m.removeprefix("gameon.") for m in sorted(members.get(index, [])))
        print(f"  {index + 1}. {layer}: {names}")
    assert set(members) == set(range(len(LAYERS))), "a layer without modules: drop it"


def test_no_module_imports_from_a_higher_layer() -> None:
    graph = import_graph()
    upward = [
        f"{module} ({LAYERS[layer_of(module)][0]}) imports {target} ({LAYERS[layer_of(target)][0]})"
        for module, targets in sorted(graph.items())
        for target in sorted(targets)
        if layer_of(target) > layer_of(module)
    ]
    assert not upward, "imports against the layer order:\n" + "\n".join(upward)


def test_no_import_cycles() -> None:
    found = cycles(import_graph())
    assert not found, "modules that import each other in a cycle:\n" + "\n".join(
        " <-> ".join(c) for c in found
    )


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("from gameon.benchmark.report import x", {"gameon.benchmark.report"}),
        ("def f():\n    from gameon.cli import main", {"gameon.cli"}),
        (
            "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import gameon.cli",
            {"gameon.cli"},
        ),
        ("from . import commands", {"gameon.benchmark.commands"}),
        ("from gameon.experimenter import loop", {"gameon.experimenter.loop"}),
    ],
)
def test_the_checker_sees_every_kind_of_import(
    tmp_path: Path, source: str, expected: set[str]
) -> None:
    module = tmp_path / "probe.py"
    module.write_text(source + "\n")
    modules = {**package_modules(), "gameon.benchmark.probe": module}
    assert imported_modules("gameon.benchmark.probe", module, modules) == expected


def test_the_checker_finds_a_cycle_and_an_upward_import() -> None:
    graph = {"gameon.envs.world": {"gameon.policy"}, "gameon.policy": {"gameon.envs.world"}}
    assert cycles(graph) == [["gameon.envs.world", "gameon.policy"]]
    assert layer_of("gameon.policy") > layer_of("gameon.envs.world")
