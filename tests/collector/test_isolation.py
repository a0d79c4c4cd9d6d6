"""The collector never imports a framework or the agent runtime: it only speaks the protocol.

A fresh interpreter refuses (and records) every import of a framework or of agent-side code,
then imports every collector module and drives the CLI's help and schema commands."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BLOCKED = ("torch", "tensorflow", "jax", "jaxlib", "fwbench.runtime", "fwbench.torch_plugin")

SCRIPT = """
import importlib
import importlib.abc
import json
import pkgutil
import sys

BLOCKED = tuple(json.loads(sys.argv[1]))
attempts = []


def blocked(name):
    return any(name == b or name.startswith(b + ".") for b in BLOCKED)


class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if blocked(fullname):
            attempts.append(fullname)
            raise ImportError(f"fwbench test: import of {fullname} refused")
        return None


sys.meta_path.insert(0, Refuse())

# The guard itself works.
for name in BLOCKED:
    try:
        importlib.import_module(name)
    except ImportError as error:
        assert "refused" in str(error), (name, error)
    else:
        raise SystemExit(f"guard let {name} through")
attempts.clear()

import fwbench.collector

modules = sorted(
    info.name for info in pkgutil.walk_packages(fwbench.collector.__path__, "fwbench.collector.")
)
for name in modules:
    importlib.import_module(name)

from typer.testing import CliRunner

from fwbench.collector.cli import app

runner = CliRunner()
outputs = {}
for args in (["--help"], ["run", "--help"], ["results", "--help"], ["schema"]):
    result = runner.invoke(app, args)
    assert result.exit_code == 0, (args, result.exit_code, result.output, result.exception)
    outputs[" ".join(args)] = result.output

print(json.dumps({
    "modules": modules,
    "attempts": attempts,
    "loaded": sorted(name for name in sys.modules if blocked(name)),
    "outputs": outputs,
}))
"""


def test_isolation_collector_imports_no_framework_or_runtime(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(BLOCKED)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["attempts"] == [], f"collector tried to import {report['attempts']}"
    assert report["loaded"] == []
    # Every module was really walked and imported.
    assert {
        "fwbench.collector.cli",
        "fwbench.collector.agents.client",
        "fwbench.collector.agents.environments",
        "fwbench.collector.launchers.local",
        "fwbench.collector.agents.manifest",
        "fwbench.collector.run.normalize",
        "fwbench.collector.run.plan",
        "fwbench.collector.run.execute",
        "fwbench.collector.store.schema",
        "fwbench.collector.run.session",
        "fwbench.collector.stats.samples",
        "fwbench.collector.store.database",
    } <= set(report["modules"])
    assert "run" in report["outputs"]["--help"]
    assert "--agents" in report["outputs"]["run --help"]
    assert report["outputs"]["schema"].startswith("# Results table schema")
