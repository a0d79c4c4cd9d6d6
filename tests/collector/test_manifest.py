"""Tests for agent manifests and the cache keys of agent environments."""

from __future__ import annotations

import dataclasses
import re
import subprocess
from pathlib import Path

import pytest

from fwbench.collector.agents import environments
from fwbench.collector.agents.environments import copy_sources, requirements_key, sources_key
from fwbench.collector.agents.manifest import (
    AgentManifest,
    ManifestError,
    discover_manifests,
    parse_manifest,
)

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "agents" / "manifests" / "torch-cpu.toml"


def manifest_text(
    *,
    name: str = "fake-cpu",
    schema_version: int = 1,
    local_packages: str = '["pkg"]',
    description: str = "a fake agent",
) -> str:
    return f"""
schema_version = {schema_version}
name = "{name}"
plugin = "fake"
variant = "cpu"
description = "{description}"

[install]
requirements = ["numpy"]
pip_args = ["--index-url", "https://example.invalid/simple"]
local_packages = {local_packages}

[env]
FWBENCH_DEVICE = "cpu"
"""


def make_package(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "pyproject.toml").write_text('[project]\nname = "pkg"\nversion = "0"\n')
    (path / "pkg").mkdir()
    (path / "pkg" / "__init__.py").write_text("VALUE = 1\n")
    return path


@pytest.fixture
def manifest_dir(tmp_path: Path) -> Path:
    """A folder holding a local package `pkg` beside where the manifests go."""
    folder = tmp_path / "manifests"
    folder.mkdir()
    make_package(folder / "pkg")
    return folder


@pytest.fixture
def manifest(manifest_dir: Path) -> AgentManifest:
    path = manifest_dir / "fake.toml"
    path.write_text(manifest_text())
    return parse_manifest(path)


def manifest_error(path: Path, text: str) -> str:
    path.write_text(text)
    with pytest.raises(ManifestError) as caught:
        parse_manifest(path)
    message = str(caught.value)
    assert str(path) in message
    return message


# --- parse_manifest ---------------------------------------------------------------------------


def test_parse_manifest_shipped_torch_cpu() -> None:
    manifest = parse_manifest(SHIPPED)
    assert manifest.name == "torch-cpu"
    assert manifest.plugin == "torch"
    assert manifest.variant == "cpu"
    assert manifest.env == {"FWBENCH_DEVICE": "cpu"}
    assert manifest.path == SHIPPED
    assert not manifest.requires_gpu
    assert any(r.startswith("torch") for r in manifest.requirements)
    assert manifest.local_packages
    for package in manifest.local_packages:
        assert package.is_absolute()
        assert package.is_dir()
        assert (package / "pyproject.toml").is_file()
    assert REPO / "proto" in manifest.local_packages


def test_parse_manifest_reads_every_field(manifest: AgentManifest, manifest_dir: Path) -> None:
    assert manifest.name == "fake-cpu"
    assert manifest.plugin == "fake"
    assert manifest.description == "a fake agent"
    assert manifest.requirements == ("numpy",)
    assert manifest.pip_args == ("--index-url", "https://example.invalid/simple")
    assert manifest.local_packages == ((manifest_dir / "pkg").resolve(),)
    assert (manifest.grpc_port, manifest.metrics_port) == (50051, 9101)


def test_parse_manifest_missing_name(manifest_dir: Path) -> None:
    text = manifest_text().replace('name = "fake-cpu"\n', "")
    message = manifest_error(manifest_dir / "bad.toml", text)
    assert "'name'" in message


@pytest.mark.parametrize("name", ["Torch", "torch cpu", "-torch", "torch/cpu", ""])
def test_parse_manifest_bad_name_characters(manifest_dir: Path, name: str) -> None:
    message = manifest_error(manifest_dir / "bad.toml", manifest_text(name=name))
    assert f"name {name!r}" in message


def test_parse_manifest_wrong_schema_version(manifest_dir: Path) -> None:
    message = manifest_error(manifest_dir / "bad.toml", manifest_text(schema_version=2))
    assert "schema_version" in message


def test_parse_manifest_local_package_without_pyproject(manifest_dir: Path) -> None:
    (manifest_dir / "empty").mkdir()
    message = manifest_error(
        manifest_dir / "bad.toml", manifest_text(local_packages='["pkg", "empty"]')
    )
    assert "local package" in message
    assert str((manifest_dir / "empty").resolve()) in message
    assert "pyproject.toml" in message


def test_parse_manifest_invalid_toml(manifest_dir: Path) -> None:
    manifest_error(manifest_dir / "bad.toml", manifest_text() + "\nname = [unclosed\n")


def test_parse_manifest_field_of_wrong_type(manifest_dir: Path) -> None:
    text = manifest_text().replace('plugin = "fake"', "plugin = 3")
    assert "'plugin'" in manifest_error(manifest_dir / "bad.toml", text)


def test_parse_manifest_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.toml"
    with pytest.raises(ManifestError, match=re.escape(str(path))):
        parse_manifest(path)


# --- discover_manifests -----------------------------------------------------------------------


def test_discover_manifests_first_directory_wins(tmp_path: Path) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    for folder, description in ((first, "from first"), (second, "from second")):
        make_package(folder / "pkg")
        (folder / "agent.toml").write_text(manifest_text(description=description))
    (second / "other.toml").write_text(manifest_text(name="other"))
    found = discover_manifests([first, second])
    assert sorted(found) == ["fake-cpu", "other"]
    assert found["fake-cpu"].description == "from first"
    assert found["fake-cpu"].path == (first / "agent.toml").resolve()
    assert discover_manifests([second, first])["fake-cpu"].description == "from second"


def test_discover_manifests_ignores_other_files(manifest_dir: Path) -> None:
    (manifest_dir / "fake.toml").write_text(manifest_text())
    (manifest_dir / "README.md").write_text("not a manifest")
    assert list(discover_manifests([manifest_dir])) == ["fake-cpu"]


def test_discover_manifests_reports_bad_manifest(manifest_dir: Path) -> None:
    (manifest_dir / "bad.toml").write_text("schema_version = 1\n")
    with pytest.raises(ManifestError, match=re.escape("bad.toml")):
        discover_manifests([manifest_dir])


# --- environment cache keys -------------------------------------------------------------------


def test_requirements_key_changes_with_requirements(manifest: AgentManifest) -> None:
    key = requirements_key(manifest)
    assert key == requirements_key(manifest)
    assert key != requirements_key(dataclasses.replace(manifest, requirements=("numpy<2",)))
    assert key != requirements_key(dataclasses.replace(manifest, pip_args=()))


def test_build_requirements_are_read_and_key_only_the_environments_that_have_them(
    manifest: AgentManifest, manifest_dir: Path
) -> None:
    assert manifest.build_requirements == ()
    text = manifest_text().replace("[env]", 'build_requirements = ["scikit-build-core"]\n[env]')
    path = manifest_dir / "built.toml"
    path.write_text(text)
    built = parse_manifest(path)
    assert built.build_requirements == ("scikit-build-core",)
    assert requirements_key(built) != requirements_key(manifest)
    # Without any, the key is what it was before the field existed: no environment rebuilds.
    assert requirements_key(dataclasses.replace(built, build_requirements=())) == (
        requirements_key(manifest)
    )


def test_build_env_is_read_expanded_for_the_build_and_keyed_as_written(
    manifest: AgentManifest, manifest_dir: Path, tmp_path: Path
) -> None:
    assert manifest.build_env == {} and manifest.build_variables == {}
    line = 'build_env = { CMAKE_ARGS = "-DX=OFF -DINCLUDE={manifest_dir}/x.cmake" }\n'
    path = manifest_dir / "built.toml"
    path.write_text(manifest_text().replace("[env]", f"{line}[env]"))
    built = parse_manifest(path)
    assert built.build_env == {"CMAKE_ARGS": "-DX=OFF -DINCLUDE={manifest_dir}/x.cmake"}
    assert built.build_variables == {"CMAKE_ARGS": f"-DX=OFF -DINCLUDE={manifest_dir}/x.cmake"}
    assert requirements_key(built) != requirements_key(manifest)
    assert requirements_key(dataclasses.replace(built, build_env={})) == requirements_key(manifest)
    # The same manifest in another checkout: the same environment.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    moved = dataclasses.replace(built, path=elsewhere / "built.toml")
    assert requirements_key(moved) == requirements_key(built)
    assert moved.build_variables["CMAKE_ARGS"].endswith(f"{elsewhere}/x.cmake")


def test_the_build_env_reaches_the_install_that_builds_and_no_other_step(
    manifest_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every step's command and variables, recorded instead of run (a real build of an sdist
    with them: llamacpp-cpu's environment, built in `make test`'s plugin stage)."""
    line = 'build_env = { CMAKE_ARGS = "-DINCLUDE={manifest_dir}/x.cmake" }\n'
    path = manifest_dir / "built.toml"
    path.write_text(manifest_text().replace("[env]", f"{line}[env]"))
    built = parse_manifest(path)
    steps: list[tuple[list[str], dict[str, str] | None]] = []

    def record(command: list[str], cwd: Path | None = None, **options: object) -> object:
        steps.append((command, options.get("env")))  # type: ignore[arg-type]
        return subprocess.CompletedProcess(command, 0)

    monkeypatch.setattr(environments, "run_python", record)
    monkeypatch.setattr(environments.AgentEnvironment, "check", lambda *_, **__: "")
    environment = environments.environment_for(built, tmp_path / "envs")
    environment.ensure()
    given = [(command, env) for command, env in steps if env and "CMAKE_ARGS" in env]
    assert len(given) == 1  # the install of the requirements (and the agent's packages) only
    command, env = given[0]
    assert command[command.index("pip") :][:2] == ["pip", "install"]
    assert env is not None and env["CMAKE_ARGS"] == f"-DINCLUDE={manifest_dir}/x.cmake"
    assert "CMAKE_ARGS" in environment.log.read_text()  # the log says what the build was given


@pytest.mark.parametrize("table", ['"CMAKE_ARGS=-DX=OFF"', "{ CMAKE_ARGS = 1 }"])
def test_a_build_env_that_is_not_a_table_of_strings_is_refused(
    manifest_dir: Path, table: str
) -> None:
    path = manifest_dir / "built.toml"
    path.write_text(manifest_text().replace("[env]", f"build_env = {table}\n[env]"))
    with pytest.raises(ManifestError, match=r"build_env must be a table of strings"):
        parse_manifest(path)


def test_requirements_key_ignores_local_sources(manifest: AgentManifest) -> None:
    key = requirements_key(manifest)
    (manifest.local_packages[0] / "pkg" / "__init__.py").write_text("VALUE = 2\n")
    assert requirements_key(manifest) == key


def test_sources_key_changes_when_a_source_file_changes(manifest: AgentManifest) -> None:
    key = sources_key(manifest)
    assert key == sources_key(manifest)
    (manifest.local_packages[0] / "pkg" / "__init__.py").write_text("VALUE = 2\n")
    assert sources_key(manifest) != key


def test_sources_key_changes_when_a_file_is_added(manifest: AgentManifest) -> None:
    key = sources_key(manifest)
    (manifest.local_packages[0] / "pkg" / "extra.py").write_text("")
    assert sources_key(manifest) != key


def test_sources_key_ignores_pycache(manifest: AgentManifest) -> None:
    key = sources_key(manifest)
    cache = manifest.local_packages[0] / "pkg" / "__pycache__"
    cache.mkdir()
    (cache / "__init__.cpython-311.pyc").write_bytes(b"\x00compiled")
    assert sources_key(manifest) == key


def test_sources_key_changes_when_package_lies_under_a_build_folder(tmp_path: Path) -> None:
    # A checkout may live anywhere, e.g. /srv/build/fwbench or a CI runner's build folder:
    # only folders inside the package may be skipped, never the package's own location.
    folder = tmp_path / "build" / "manifests"
    folder.mkdir(parents=True)
    make_package(folder / "pkg")
    (folder / "fake.toml").write_text(manifest_text())
    manifest = parse_manifest(folder / "fake.toml")
    key = sources_key(manifest)
    (folder / "pkg" / "pkg" / "__init__.py").write_text("VALUE = 2\n")
    assert sources_key(manifest) != key


def test_copy_sources_copies_what_the_key_counts_and_no_build_artefact(
    manifest: AgentManifest, tmp_path: Path
) -> None:
    package = manifest.local_packages[0]
    for artefact in ("build/lib/pkg", "pkg.egg-info", "pkg/__pycache__"):
        (package / artefact).mkdir(parents=True)
        (package / artefact / "left.txt").write_text("by a build\n")
    other = make_package(tmp_path / "elsewhere" / "pkg")  # the same folder name
    copies = copy_sources([package, other], tmp_path / "copies")
    assert len(set(copies)) == 2 and all(c.parent == tmp_path / "copies" for c in copies)
    assert sorted(str(p.relative_to(copies[0])) for p in copies[0].rglob("*")) == [
        "pkg",
        "pkg/__init__.py",
        "pyproject.toml",
    ]
    copied = dataclasses.replace(manifest, local_packages=(copies[0],))
    assert sources_key(copied) == sources_key(manifest)
