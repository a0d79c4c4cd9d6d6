"""`lint-imports` with the agent side's contracts: the runtime (and the spec) never imports a
plugin, and plugins never import each other, so adding a framework never touches another.
The plugins are found, not listed (every package under agents/*/fwbench/ but the runtime:
adding one stays files only, docs/plugins.md), and their folders put on the path (they are
installed in their agents' environments, not in the collector's). `--root DIR` checks the
agents/ folder DIR instead (tests/collector/test_layers.py breaks a copy)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

HOSTS = ("fwbench.runtime", "fwbench.spec")


def config(plugins: list[str]) -> str:
    def names(modules: list[str] | tuple[str, ...]) -> str:
        return "[" + ", ".join(f'"{m}"' for m in modules) + "]"

    return "\n".join(
        [
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
            "",
        ]
    )


def main(argv: list[str]) -> int:
    agents = Path(__file__).resolve().parent
    if argv[:1] == ["--root"]:
        agents, argv = Path(argv[1]), argv[2:]
    packages = sorted(p for p in agents.glob("*/fwbench/*") if (p / "__init__.py").exists())
    plugins = [f"fwbench.{p.name}" for p in packages if p.name != "runtime"]
    folders = sorted({str(p.parent.parent) for p in packages})
    path = os.pathsep.join([*folders, os.environ.get("PYTHONPATH", "")])
    with tempfile.NamedTemporaryFile("w", suffix=".toml", prefix="fwbench-agents-") as file:
        file.write(config(plugins))
        file.flush()
        command = [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"]
        command += [file.name, *argv]
        env = {**os.environ, "PYTHONPATH": path}
        return subprocess.run(command, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
