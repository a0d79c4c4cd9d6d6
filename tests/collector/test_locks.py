"""Locked, hashed requirements per agent (agents/locks.py): the shipped locks are current, a
stale one is refused with the command that fixes it, and a real lock made by pip-tools pins
every package with hashes and keys the environment on its content."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fwbench.collector.agents import locks
from fwbench.collector.agents.environments import requirements_key
from fwbench.collector.agents.manifest import discover_manifests, parse_manifest
from fwbench.collector.cli.calibrate import agent_pythons

REPO = Path(__file__).resolve().parents[2]
SHIPPED = discover_manifests([REPO / "agents" / "manifests"])


@pytest.mark.parametrize("name", sorted(n for n, m in SHIPPED.items() if not m.requires_gpu))
def test_every_cpu_agent_has_a_current_lock(name: str) -> None:
    assert locks.lock_state(SHIPPED[name]) == locks.LockState.CURRENT, (
        f"run `collector lock {name}`"
    )


# A GPU agent may have no lock: its package index may not be reachable from where locks are
# made (torch-cu12's CUDA index); it then installs unlocked, as `collector agents` shows.
LOCKED = sorted(name for name, m in SHIPPED.items() if locks.lock_path(m).is_file())


@pytest.mark.parametrize("name", LOCKED)
def test_shipped_locks_pin_every_package_with_hashes(name: str) -> None:
    path = locks.lock_path(SHIPPED[name])
    assert locks.lock_state(SHIPPED[name]) == locks.LockState.CURRENT
    text = path.read_text()
    pins = [line for line in text.splitlines() if line and not line[0].isspace() and "==" in line]
    assert pins and all(line.endswith("\\") for line in pins)  # a --hash follows each pin
    assert "--index-url" not in text and "/opt/" not in text and "/tmp/" not in text


def test_lock_inputs_are_requirements_and_third_party_dependencies() -> None:
    inputs = locks.lock_inputs(SHIPPED["torch-cpu"])
    assert inputs[:3] == ["torch==2.13.0", "numpy", "scikit-learn"]
    assert any(i.startswith("grpcio") for i in inputs)  # the runtime's
    assert any(i.startswith("protobuf") for i in inputs)  # the protocol package's
    assert not any(i.startswith("fwbench-") for i in inputs)


def _copy(tmp_path: Path, name: str) -> Path:
    """A shipped manifest and its lock in a folder of their own, local packages still found."""
    source = SHIPPED[name].path
    text = source.read_text().replace('"../', f'"{source.parent}/../')
    copy = tmp_path / source.name
    copy.write_text(text)
    shutil.copy(locks.lock_path(SHIPPED[name]), copy.with_suffix(".lock"))
    return copy


def test_a_stale_lock_is_refused_with_the_command_that_fixes_it(tmp_path: Path) -> None:
    copy = _copy(tmp_path, "torch-cpu")
    assert locks.lock_state(parse_manifest(copy)) == locks.LockState.CURRENT
    copy.write_text(copy.read_text().replace('"scikit-learn"', '"scikit-learn", "six"'))
    stale = parse_manifest(copy)
    assert locks.lock_state(stale) == locks.LockState.STALE
    with pytest.raises(locks.LockError, match="collector lock torch-cpu"):
        requirements_key(stale)
    done = subprocess.run(
        [sys.executable, "-m", "fwbench.collector.cli", "agents", "--manifests", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0 and "stale" in done.stdout


def test_a_stale_torch_lock_does_not_stop_runs_of_other_agents(tmp_path: Path) -> None:
    """Calibration looks for torch-cpu's environment before any run: a stale lock there (every
    shipped lock is, under another Python version, as on the GPU hosts) leaves it out."""
    copy = _copy(tmp_path, "torch-cpu")
    copy.write_text(copy.read_text().replace('"scikit-learn"', '"scikit-learn", "six"'))
    stale = parse_manifest(copy)
    assert locks.lock_state(stale) == locks.LockState.STALE
    assert agent_pythons({"torch-cpu": stale}) == []


def test_a_lock_made_for_another_python_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every lock's key has the Python version in it: under another version (the GPU hosts run
    3.12) the lock is stale, and the error says that is why, not that the manifest changed."""
    copy = _copy(tmp_path, "torch-cpu")
    manifest = parse_manifest(copy)
    made = sys.version_info[:2]
    monkeypatch.setattr(sys, "version_info", (3, made[1] + 1, 0, "final", 0))
    assert locks.lock_state(manifest) == locks.LockState.STALE
    with pytest.raises(locks.LockError) as raised:
        locks.current_lock(manifest)
    said = str(raised.value)
    assert f"was made for Python 3.{made[1]}" in said and f"runs 3.{made[1] + 1}" in said


def test_environment_key_follows_the_lock(tmp_path: Path) -> None:
    copy = _copy(tmp_path, "torch-cpu")
    before = requirements_key(parse_manifest(copy))
    lock = copy.with_suffix(".lock")
    lock.write_text(lock.read_text() + "# an edit\n")
    assert requirements_key(parse_manifest(copy)) != before
    lock.unlink()  # no lock: keyed on the requirements, installed unlocked
    assert locks.current_lock(parse_manifest(copy)) is None


def test_write_lock_resolves_and_hashes_with_pip_tools(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "pyproject.toml").write_text(
        '[project]\nname = "pkg"\nversion = "0"\ndependencies = ["six", "fwbench-spec"]\n'
    )
    manifest_path = tmp_path / "tiny.toml"
    manifest_path.write_text(
        'schema_version = 1\nname = "tiny"\nplugin = "fake"\n'
        '[install]\nrequirements = ["idna==3.10"]\nlocal_packages = ["pkg"]\n'
    )
    manifest = parse_manifest(manifest_path)
    path = locks.write_lock(manifest)
    text = path.read_text()
    assert text.startswith(locks.KEY_PREFIX)
    assert "idna==3.10 \\\n    --hash=sha256:" in text
    assert "six==" in text and "fwbench-spec" not in text
    assert str(tmp_path) not in text  # no host paths in what is committed
    assert locks.lock_state(manifest) == locks.LockState.CURRENT
