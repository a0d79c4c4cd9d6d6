"""No two modules import each other, however indirectly: the import graph of the collector, the
agent runtime and every plugin under agents/ has no circle (a strongly connected component of
more than one module). Every import counts, wherever it stands: in a function body or under
`if TYPE_CHECKING:` it still ties the two modules together, so a circle is broken by moving
what both need into a module of its own, not by hiding an import. The graph is read from the
source with `ast` (nothing is imported); a copy of the collector with a circle planted fails."""

from __future__ import annotations

import ast
import shutil
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def packages(root: Path = ROOT) -> list[Path]:
    """The folders checked: the collector's, the runtime's and every plugin's package."""
    return [
        root / "collector" / "fwbench" / "collector",
        root / "agents" / "runtime" / "fwbench" / "runtime",
        *sorted((root / "agents").glob("*/fwbench/*_plugin")),
    ]


def modules(folders: Iterable[Path]) -> dict[str, Path]:
    """Every module's dotted name (a package by its own name), and its file."""
    found = {}
    for folder in folders:
        for file in sorted(folder.rglob("*.py")):
            parts = file.relative_to(folder.parents[1]).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = file
    return found


def imported(name: str, file: Path, known: dict[str, Path]) -> set[str]:
    """The known modules that module `name` imports anywhere in it: `from pkg import module`
    as that module, `import a.b.c` as the longest known part of it, relative imports resolved."""

    def known_part(dotted: str) -> str | None:
        while dotted and dotted not in known:
            dotted = dotted.rpartition(".")[0]
        return dotted or None

    package = name if file.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str | None] = set()
    for node in ast.walk(ast.parse(file.read_text(), str(file))):
        if isinstance(node, ast.Import):
            found |= {known_part(alias.name) for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            for alias in node.names:
                whole = f"{base}.{alias.name}"
                found.add(whole if whole in known else known_part(base))
    return {module for module in found if module and module != name}


def import_graph(folders: Iterable[Path]) -> dict[str, set[str]]:
    known = modules(folders)
    return {name: imported(name, file, known) for name, file in known.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module, each sorted
    (Tarjan's algorithm, iterative: no recursion limit to meet)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, targets = work[-1]
            target = next(targets, None)
            if target is not None:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return sorted(found)


def said(found: list[list[str]]) -> str:
    return "modules that import each other: " + "; ".join(" <-> ".join(c) for c in found)


def test_no_two_modules_import_each_other() -> None:
    graph = import_graph(packages())
    assert {"fwbench.collector.run.call", "fwbench.runtime.plugin"} <= graph.keys()
    assert len([name for name in graph if name.endswith("_plugin")]) >= 7
    assert "fwbench.collector.run.liveness" in graph["fwbench.collector.run.call"]
    found = circles(graph)
    assert not found, said(found)


def test_the_check_finds_a_circle_planted_in_a_copy(tmp_path: Path) -> None:
    """An import in a function body, relative, of a module that imports this one at its top
    (call.py imports liveness.py) is a circle all the same."""
    copy = tmp_path / "collector" / "fwbench" / "collector"
    shutil.copytree(packages()[0], copy, ignore=shutil.ignore_patterns("__pycache__"))
    assert not circles(import_graph([copy]))
    liveness = copy / "run" / "liveness.py"
    planted = "\n\ndef _planted() -> None:\n    from . import call  # noqa: F401\n"
    liveness.write_text(liveness.read_text() + planted)
    found = circles(import_graph([copy]))
    circle = next((c for c in found if "fwbench.collector.run.liveness" in c), [])
    assert "fwbench.collector.run.call" in circle, said(found)
    assert "fwbench.collector.run.call" in said(found)
