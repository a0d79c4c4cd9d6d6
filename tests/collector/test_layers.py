"""The collector's layers hold (import-linter's contracts in pyproject.toml), and the check
would catch an import across them: a copy of the collector with one such import added fails.
Modules stay small: none over MAX_MODULE_LINES without a reason written at its top. Every
shipped plugin is type-checked."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import fwbench.collector

ROOT = Path(__file__).resolve().parents[2]
COLLECTOR = Path(fwbench.collector.__file__).parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
MAX_MODULE_LINES = 300
SIZE_REASON = "Longer than 300 lines because"


def lint_imports(pythonpath: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": pythonpath} if pythonpath else dict(os.environ)
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", str(ROOT / "pyproject.toml")],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_layers_are_kept() -> None:
    done = lint_imports()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 kept, 0 broken" in done.stdout


def test_layers_check_catches_an_import_across_layers(tmp_path: Path) -> None:
    copy = tmp_path / "fwbench" / "collector"
    shutil.copytree(COLLECTOR, copy, ignore=shutil.ignore_patterns("__pycache__"))
    store = copy / "store" / "database.py"  # store sits below run: it must not import it
    store.write_text(store.read_text() + "\nfrom fwbench.collector.run import plan  # noqa\n")
    done = lint_imports(str(tmp_path))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "fwbench.collector.store.database -> fwbench.collector.run.plan" in done.stdout


def test_collector_modules_are_small_or_say_why() -> None:
    long = []
    for module in sorted(COLLECTOR.rglob("*.py")):
        text = module.read_text()
        if text.count("\n") > MAX_MODULE_LINES and SIZE_REASON not in text[:2000]:
            long.append(f"{module.relative_to(COLLECTOR)} ({text.count(chr(10))} lines)")
    assert not long, f"over {MAX_MODULE_LINES} lines without a reason at the top: {long}"


LINT_AGENTS = ROOT / "agents" / "lint_imports.py"


def _lint_agents(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(LINT_AGENTS), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_the_runtime_imports_no_plugin_and_plugins_not_each_other() -> None:
    done = _lint_agents()
    assert done.returncode == 0, done.stdout + done.stderr
    # The two contracts, and one per loan: openvino borrows onnxruntime's graph builders.
    assert "3 kept, 0 broken" in done.stdout


def _agents_copy(tmp_path: Path) -> None:
    for folder in sorted((ROOT / "agents").glob("*/fwbench")):
        shutil.copytree(
            folder,
            tmp_path / folder.parent.name / "fwbench",
            ignore=shutil.ignore_patterns("__pycache__"),
        )
        shutil.copy(folder.parent / "pyproject.toml", tmp_path / folder.parent.name)


def test_a_plugin_importing_another_breaks_the_agents_contract(tmp_path: Path) -> None:
    _agents_copy(tmp_path)
    keras = tmp_path / "keras" / "fwbench" / "keras_plugin" / "__init__.py"
    keras.write_text(keras.read_text() + "\nfrom fwbench.torch_plugin import plugin  # noqa\n")
    done = _lint_agents("--root", str(tmp_path))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "plugins never import each other BROKEN" in done.stdout


def test_a_borrower_reaching_past_the_lent_modules_breaks_its_loan(tmp_path: Path) -> None:
    """openvino may import onnxruntime's lent modules (graphs, models, onnx_file), never the
    ones that load ONNX Runtime; nor may a plugin that does not depend on onnxruntime's
    package import even the lent ones."""
    _agents_copy(tmp_path)
    openvino = tmp_path / "openvino" / "fwbench" / "openvino_plugin" / "__init__.py"
    openvino.write_text(openvino.read_text() + "\nfrom fwbench.onnxruntime_plugin import session\n")
    paddle = tmp_path / "paddle" / "fwbench" / "paddle_plugin" / "__init__.py"
    paddle.write_text(paddle.read_text() + "\nfrom fwbench.onnxruntime_plugin import models\n")
    done = _lint_agents("--root", str(tmp_path))
    assert done.returncode == 1, done.stdout + done.stderr
    said = " ".join(done.stdout.split())
    assert "lends BROKEN" in said and "fwbench.onnxruntime_plugin.session" in said
    assert "plugins never import each other BROKEN" in said
    assert "fwbench.paddle_plugin -> fwbench.onnxruntime_plugin.models" in said


def test_every_plugin_is_type_checked_and_typed() -> None:
    """mypy has no globs: each plugin package shipped under agents/ is named in pyproject's
    [tool.mypy] (its files, its root on mypy_path, and the plugins' override), and marks
    itself typed (py.typed, in its wheel's package data)."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    relaxed = next(o["module"] for o in config["overrides"] if "disallow_subclassing_any" in o)
    plugins = sorted((ROOT / "agents").glob("*/fwbench/*_plugin"))
    assert len(plugins) >= 7
    for package in plugins:
        folder = package.parents[1]
        name = f"fwbench.{package.name}"
        assert str(package.relative_to(ROOT)) in config["files"], package
        assert str(folder.relative_to(ROOT)) in config["mypy_path"], folder
        assert f"{name}.*" in relaxed, name
        assert (package / "py.typed").exists(), package
        data = tomllib.loads((folder / "pyproject.toml").read_text())["tool"]["setuptools"]
        assert data["package-data"][name] == ["py.typed"], folder
