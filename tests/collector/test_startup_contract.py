"""One start-up contract (fwbench/spec/startup.py): the variables an agent reads at start are
named there and nowhere else in the collector or the runtime, and the command line every
launcher starts an agent with is the one the runtime's parser reads back."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from fwbench.collector.agents.manifest import discover_manifests
from fwbench.collector.agents.run_tls import RunFiles
from fwbench.collector.launchers import local, slurm_scripts
from fwbench.runtime.cli import build_parser
from fwbench.spec import startup

ROOT = Path(__file__).parents[2]
NAMES = {
    value
    for name, value in vars(startup).items()
    if name.isupper() and isinstance(value, str) and value.startswith("FWBENCH_")
}


def _spelled(path: Path) -> list[str]:
    """The start-up variables a module spells in its code's strings (not in docstrings)."""
    tree = ast.parse(path.read_text())
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef))
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        f"{path.relative_to(ROOT)}:{node.lineno}: {name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        for name in NAMES
        if name in node.value
    ]


def test_no_module_but_the_spec_spells_a_start_up_variable() -> None:
    assert len(NAMES) >= 19
    folders = [ROOT / "collector" / "fwbench", ROOT / "agents" / "runtime" / "fwbench"]
    found = [hit for folder in folders for path in folder.rglob("*.py") for hit in _spelled(path)]
    assert found == []


@pytest.mark.parametrize("launcher", ["local", "slurm"])
def test_each_launchers_command_line_is_the_one_the_agent_parses(
    launcher: str, tmp_path: Path
) -> None:
    manifest = discover_manifests([ROOT / "agents" / "manifests"])["numpy-cpu"]
    if launcher == "local":
        argv = local._command(Path("/env/bin/python"), manifest, tmp_path)
    else:
        files = RunFiles(tmp_path / "token", tmp_path / "agent.pem", tmp_path / "agent.key")
        argv = slurm_scripts.agent_command(
            Path("/env/bin/python"), manifest, tmp_path / "ports.json", files
        )
    assert argv[:4] == ["/env/bin/python", "-P", "-m", "fwbench.runtime.cli"]
    args = build_parser().parse_args(argv[4:])
    assert (args.plugin, args.name, args.variant) == ("numpy", "numpy-cpu", manifest.variant)
    assert args.ports_file is not None and args.port == 0
    if launcher == "slurm":  # on a node: every address, the run's token and TLS pair
        assert args.host == startup.ANY_HOST and args.token_file == tmp_path / "token"
        assert (args.tls_cert, args.tls_key) == (files.cert, files.key)
        assert args.orphan_seconds > 0  # ends when orphaned
    else:
        assert args.host == startup.DEFAULT_HOST and args.exit_with_parent


def test_the_ports_file_reads_back_and_a_foreign_file_is_refused(tmp_path: Path) -> None:
    ports = tmp_path / "ports.json"
    startup.write_ports(ports, 50051, 9100)
    found = startup.read_ports(ports)
    assert (found["grpc"], found["metrics"]) == (50051, 9100) and found["host"]
    ports.write_text('{"port": 1}')
    with pytest.raises(ValueError, match="not an agent's ports file"):
        startup.read_ports(ports)
