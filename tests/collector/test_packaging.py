"""The collector runs from an installed package, not only from a checkout: its wheel carries
everything it reads (report templates, py.typed), and run from outside any checkout it finds
the project's files through $FWBENCH_HOME, or works from --manifests alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(out), str(REPO)],
        check=True,
        timeout=300,
    )
    return next(out.glob("fwbench-*.whl"))


def test_wheel_carries_templates_and_entry_point(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "fwbench/collector/analysis/report/templates/report.html.j2" in names
    assert "fwbench/collector/py.typed" in names
    # The scripts the collector runs in other Pythons (agents/probes/).
    assert "fwbench/collector/agents/probes/plugin_check.py" in names
    assert "fwbench/collector/agents/probes/environment_probe.py" in names
    entry_points = next(n for n in names if n.endswith("entry_points.txt"))
    text = zipfile.ZipFile(wheel).read(entry_points).decode()
    assert "collector = fwbench.collector.cli:app" in text
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    assert "License-Expression: Apache-2.0" in zipfile.ZipFile(wheel).read(metadata).decode()
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert not any(n.startswith(("fwbench/runtime", "fwbench/torch_plugin")) for n in names)


def _installed_collector(wheel: Path, tmp_path: Path, *args: str, home: str = "") -> str:
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    env = {k: v for k, v in os.environ.items() if k not in ("FWBENCH_HOME", "PYTHONPATH")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(REPO / "proto")])
    if home:
        env["FWBENCH_HOME"] = home
    # The dev install puts the checkout's collector/ on sys.path (a .pth file): take it out.
    checkout = str(REPO / "collector")
    code = f"import sys; sys.path = [p for p in sys.path if p != {checkout!r}]; "
    code += f"import fwbench.collector as c; assert c.__file__.startswith({str(site)!r}); "
    code += "from fwbench.collector.cli import app; app(prog_name='collector')"
    done = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_installed_collector_outside_a_checkout(wheel: Path, tmp_path: Path) -> None:
    alone = json.loads(_installed_collector(wheel, tmp_path, "agents", "--json"))
    # No checkout, no FWBENCH_HOME: no agent declared by a manifest file, no crash (images in
    # the local engine that declare agents by their labels may be listed).
    assert [row for row in alone if row["source"] != "image"] == []
    homed = json.loads(_installed_collector(wheel, tmp_path, "agents", "--json", home=str(REPO)))
    assert {"torch-cpu", "tf-mkl", "jax-cpu"} <= {a["agent"] for a in homed}
    version = _installed_collector(wheel, tmp_path, "--version")
    assert version.startswith("collector ")


def test_heavy_libraries_only_some_commands_need_are_extras(wheel: Path) -> None:
    """kubernetes and pip-tools install with `fwbench[kubernetes]` and `fwbench[lock]`; a
    plain install does without them, and the command that needs one names its extra."""
    names = zipfile.ZipFile(wheel).namelist()
    metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
    requires = [
        line.removeprefix("Requires-Dist: ")
        for line in zipfile.ZipFile(wheel).read(metadata).decode().splitlines()
        if line.startswith("Requires-Dist: ")
    ]
    plain = [r for r in requires if "extra ==" not in r]
    assert not any(r.startswith(("kubernetes", "pip-tools")) for r in plain), plain
    assert any(r.startswith("kubernetes") and 'extra == "kubernetes"' in r for r in requires)
    assert any(r.startswith("pip-tools") and 'extra == "lock"' in r for r in requires)


def test_lock_without_pip_tools_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    from fwbench.collector.agents import locks
    from fwbench.collector.agents.manifest import discover_manifests

    manifest = discover_manifests([REPO / "agents" / "manifests"])["numpy-cpu"]
    found = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "piptools" else found(name)
    )
    with pytest.raises(locks.LockError, match=r"pip install 'fwbench\[lock\]'"):
        locks.write_lock(manifest)
