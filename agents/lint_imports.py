"""`lint-imports` with the agent side's contracts (agents/importlinter.toml): every plugin's
folder goes on the path first (plugins are installed in their agents' environments, not in
the collector's). Arguments are passed on; `--root DIR` checks the agents/ folder DIR instead
(tests/collector/test_layers.py checks that a broken copy fails)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def main(argv: list[str]) -> int:
    agents = Path(__file__).resolve().parent
    if argv[:1] == ["--root"]:
        agents, argv = Path(argv[1]), argv[2:]
    folders = [str(p.parent) for p in sorted(agents.glob("*/fwbench")) if p.is_dir()]
    path = os.pathsep.join([*folders, os.environ.get("PYTHONPATH", "")])
    command = [str(Path(sys.executable).with_name("lint-imports")), "--no-cache"]
    command += ["--config", str(Path(__file__).resolve().with_name("importlinter.toml")), *argv]
    return subprocess.run(command, env={**os.environ, "PYTHONPATH": path}, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
