"""`lint-imports` with the agent side's contracts: the runtime (and the spec) never imports a
plugin, and plugins never import each other, so adding a framework never touches another.
The plugins are found, not listed (every package under agents/*/fwbench/ but the runtime:
adding one stays files only, docs/plugins.md), and their folders put on the path (they are
installed in their agents' environments, not in the collector's). `--root DIR` checks the
agents/ folder DIR instead (tests/collector/test_layers.py breaks a copy).

One exception, declared on both sides: a plugin may lend modules that load no framework
(`[tool.fwbench] lends = [...]` in its pyproject.toml: the onnxruntime plugin's ONNX graph
builders), and a plugin whose package depends on the lender's distribution may import those,
and only those: its imports of them are let through the independence contract, and a
forbidden contract per borrower fails any chain, direct or not, from it to the lender's other
modules (those that load the lender's framework)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HOSTS = ("fwbench.runtime", "fwbench.spec")


@dataclass(frozen=True)
class Loan:
    """`borrower` (a plugin) may import `lent`, modules of `lender`, and no other of its
    modules (`others`)."""

    borrower: str
    lender: str
    lent: tuple[str, ...]
    others: tuple[str, ...]


def _project(folder: Path) -> dict[str, Any]:
    path = folder / "pyproject.toml"
    return tomllib.loads(path.read_text("utf-8")) if path.is_file() else {}


def _modules(package: Path) -> list[str]:
    """Every module of a plugin package, by dotted name (its __init__ as the package)."""
    found = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent.parent).with_suffix("").parts
        found.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return found


def _name(requirement: str) -> str:
    return re.split(r"[\s<>=!~;\[(@]", requirement.strip(), maxsplit=1)[0].lower()


def loans(packages: list[Path]) -> tuple[Loan, ...]:
    """The loans between plugin packages: the lender lends modules, the borrower's
    distribution depends on the lender's."""
    projects = {p: _project(p.parent.parent) for p in packages if p.name != "runtime"}
    made = []
    for lender, lender_project in projects.items():
        lent = tuple(lender_project.get("tool", {}).get("fwbench", {}).get("lends", ()))
        distribution = lender_project.get("project", {}).get("name")
        if not lent or not distribution:
            continue
        others = tuple(m for m in _modules(lender) if m not in lent and m.count(".") > 1)
        for borrower, project in projects.items():
            dependencies = project.get("project", {}).get("dependencies", [])
            if borrower != lender and distribution in {_name(d) for d in dependencies}:
                made.append(
                    Loan(f"fwbench.{borrower.name}", f"fwbench.{lender.name}", lent, others)
                )
    return tuple(made)


def config(plugins: list[str], made: tuple[Loan, ...] = ()) -> str:
    def names(modules: list[str] | tuple[str, ...]) -> str:
        return "[" + ", ".join(f'"{m}"' for m in modules) + "]"

    ignored = [f"{loan.borrower}.** -> {m}" for loan in made for m in loan.lent]
    lines = [
        "[tool.importlinter]",
        f"root_packages = {names([*HOSTS, *plugins])}",
        "include_external_packages = true",
        "",
        "[[tool.importlinter.contracts]]",
        'name = "the runtime never imports a plugin"',
        'type = "forbidden"',
        f"source_modules = {names(HOSTS)}",
        f"forbidden_modules = {names(plugins)}",
        "",
        "[[tool.importlinter.contracts]]",
        'name = "plugins never import each other"',
        'type = "independence"',
        f"modules = {names(plugins)}",
        *([f"ignore_imports = {names(ignored)}"] if ignored else []),
        'unmatched_ignore_imports_alerting = "none"',  # a borrower need not use every loan
        "",
    ]
    for loan in made:
        lines += [
            "[[tool.importlinter.contracts]]",
            f'name = "{loan.borrower} borrows only the modules {loan.lender} lends"',
            'type = "forbidden"',
            f"source_modules = {names([loan.borrower])}",
            f"forbidden_modules = {names(loan.others)}",
            "",
        ]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    agents = Path(__file__).resolve().parent
    if argv[:1] == ["--root"]:
        agents, argv = Path(argv[1]), argv[2:]
    packages = sorted(p for p in agents.glob("*/fwbench/*") if (p / "__init__.py").exists())
    plugins = [f"fwbench.{p.name}" for p in packages if p.name != "runtime"]
    folders = sorted({str(p.parent.parent) for p in packages})
    path = os.pathsep.join([*folders, os.environ.get("PYTHONPATH", "")])
    with tempfile.NamedTemporaryFile("w", suffix=".toml", prefix="fwbench-agents-") as file:
        file.write(config(plugins, loans(packages)))
        file.flush()
        command = [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"]
        command += [file.name, *argv]
        env = {**os.environ, "PYTHONPATH": path}
        return subprocess.run(command, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
