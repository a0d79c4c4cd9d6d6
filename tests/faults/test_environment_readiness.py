"""An agent environment is ready only once its installs succeeded and it imports its agent: an
install that fails, or one that succeeds without the plugin, is never marked ready (`collector
agents` says "failed" with the error, the next command says it builds it again, and fails in one
line if it still cannot); an environment marked ready by a collector from before that check is
checked again, kept when it imports its agent (and then marked checked), made again when it does
not (a pip.py in the caller's folder once left one with nothing installed). Two environments
build at once, each from its own copy of the agent's packages, leaving their folders as they
were; an agent whose environment would hold what a ready one holds gets a copy of it. A build
leaves nothing in TMPDIR (uv leaves its build locks in its own, which the collector removes).
Fake-plugin agents, environments in a folder of the test's own, the real commands."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from fake_agent import write_fake_agents

from fwbench.collector.agents.environments import (
    AgentEnvironment,
    EnvironmentBuildError,
    environment_for,
)
from fwbench.collector.agents.manifest import discover_manifests

COLLECTOR = Path(sys.executable).with_name("collector")
GEMM = ["--workloads", "gemm", "--phases", "infer", "--batch-sizes", "1", "--min-seconds", "0.05"]


@pytest.fixture
def manifests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FWBENCH_ENV_DIR", str(tmp_path / "envs"))
    monkeypatch.setenv("FWBENCH_STORE", str(tmp_path / "store.sqlite"))
    (tmp_path / "tmp").mkdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))  # the commands': left empty
    folder = write_fake_agents(tmp_path / "agents", {"good": {}, "bogus": {}, "nosuch": {}})
    bogus = folder / "bogus.toml"  # offline: pip fails at once, without asking an index
    bogus.write_text(
        bogus.read_text().replace(
            "requirements = []",
            'requirements = ["fwbench-no-such-package"]\npip_args = ["--no-index"]',
        )
    )
    nosuch = folder / "nosuch.toml"  # installs, but its packages have no plugin of that name
    nosuch.write_text(nosuch.read_text().replace('plugin = "fake"', 'plugin = "nosuch"'))
    return folder


def collector(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(COLLECTOR), *args],
        cwd=tmp_path,
        env={**os.environ, "COLUMNS": "300"},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )


def listed(tmp_path: Path, manifests: Path, name: str) -> dict[str, str]:
    done = collector(tmp_path, "agents", "--manifests", str(manifests), "--json")
    assert done.returncode == 0, done.stderr
    (row,) = [row for row in json.loads(done.stdout) if row["agent"] == name]
    return row


def error_lines(done: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in done.stderr.splitlines() if line.startswith("error:")]


def test_a_failed_install_is_never_ready_and_the_next_command_says_so(
    tmp_path: Path, manifests: Path
) -> None:
    done = collector(tmp_path, "env", "bogus", "--manifests", str(manifests))
    assert done.returncode == 2
    (line,) = error_lines(done)
    failed = "building the bogus environment failed (uv pip install exited 1); see "
    assert failed in line, done.stderr
    assert line.endswith("install.log")
    row = listed(tmp_path, manifests, "bogus")
    assert row["environment"] == "failed"
    assert row["environment_problem"] == line.removeprefix("error: ")
    # The next command says the last build failed, tries again, and fails in one line.
    done = collector(
        tmp_path,
        "run",
        "--manifests",
        str(manifests),
        "--agents",
        "bogus",
        *GEMM,
        "--out",
        str(tmp_path / "run"),
    )
    assert done.returncode == 2
    assert "building the bogus environment again (its last build failed)" in done.stderr
    (line,) = error_lines(done)
    assert "building the bogus environment failed (uv pip install exited 1)" in line
    assert listed(tmp_path, manifests, "bogus")["environment"] == "failed"
    assert list((tmp_path / "tmp").iterdir()) == []


def test_an_install_whose_agent_does_not_import_is_never_ready(
    tmp_path: Path, manifests: Path
) -> None:
    done = collector(tmp_path, "env", "nosuch", "--manifests", str(manifests))
    assert done.returncode == 2
    (line,) = error_lines(done)
    assert (
        "the nosuch environment was installed but cannot run its agent (LookupError: no "
        "fwbench.plugins entry point named 'nosuch')"
    ) in line, done.stderr
    row = listed(tmp_path, manifests, "nosuch")
    assert row["environment"] == "failed" and "cannot run its agent" in row["environment_problem"]


def test_an_environment_marked_ready_before_the_check_is_checked_again(
    tmp_path: Path, manifests: Path
) -> None:
    done = collector(tmp_path, "env", "good", "--manifests", str(manifests))
    assert done.returncode == 0, done.stderr
    python = Path(done.stdout.split()[-1])
    marker = python.parents[1] / "fwbench-env.json"
    record = json.loads(marker.read_text())
    assert record["checked"] == 1
    assert list((tmp_path / "tmp").iterdir()) == []  # uv's build locks included
    assert listed(tmp_path, manifests, "good")["environment"] == "ready"

    # A marker written before the check: a good environment is checked and kept.
    marker.write_text(json.dumps({k: v for k, v in record.items() if k != "checked"}))
    assert listed(tmp_path, manifests, "good")["environment"] == "ready"
    done = collector(tmp_path, "env", "good", "--manifests", str(manifests))
    assert done.returncode == 0 and done.stderr == "", done.stderr  # nothing made again
    assert json.loads(marker.read_text())["checked"] == 1

    # Such a marker on an environment with nothing of the agent in it (what a pip.py in the
    # caller's folder left): not ready, and made again by the next command that needs it.
    marker.write_text(json.dumps({k: v for k, v in record.items() if k != "checked"}))
    subprocess.run(
        [str(python), "-I", "-m", "pip", "uninstall", "--yes", "--quiet", "fwbench-agent-runtime"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
    )
    row = listed(tmp_path, manifests, "good")
    assert row["environment"] == "broken"
    assert row["environment_problem"] == "ModuleNotFoundError: No module named 'fwbench.runtime'"
    done = collector(tmp_path, "env", "good", "--manifests", str(manifests))
    assert done.returncode == 0, done.stderr
    assert (
        "making the good environment again: it cannot run its agent (ModuleNotFoundError: No "
        "module named 'fwbench.runtime')"
    ) in done.stderr
    assert listed(tmp_path, manifests, "good")["environment"] == "ready"


def test_environments_build_at_once_from_copies_and_a_twin_ready_is_copied(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # "first" and "changed" (one line more in its plugin) build at once, each from its own copy
    # of its packages. "second" is "first" under another name with another switch, as tf-eigen
    # is tf-mkl with oneDNN off: the same content, so its environment is a copy of first's,
    # with its own folder written in and checked with its own switches; "broken" differs in
    # its plugin's name: copied, and refused, as it would be alone. (Two builds in all: each
    # costs this suite about 30 s of CPU.)
    monkeypatch.setenv("FWBENCH_ENV_DIR", str(tmp_path / "envs"))
    folder = write_fake_agents(tmp_path / "agents", {"first": {}, "second": {"FAKE_SPIN": "1"}})
    (folder / "broken.toml").write_text(
        (folder / "first.toml")
        .read_text()
        .replace('"first"', '"broken"')
        .replace('plugin = "fake"', 'plugin = "nosuch"')
    )
    other = write_fake_agents(tmp_path / "other", {"changed": {}})
    edited = tmp_path / "other" / "plugin" / "fwbench_test_fake" / "plugin.py"
    edited.write_text(edited.read_text() + "\n# one line more\n")
    shipped = discover_manifests([folder, other])
    first, second, changed = envs = [
        environment_for(shipped[n]) for n in ("first", "second", "changed")
    ]
    said: dict[str, list[str]] = {"first": [], "second": [], "changed": []}
    events: list[str] = []  # "building NAME" and "ready NAME", in the order they happened

    def build(env: AgentEnvironment) -> None:
        name = env.manifest.name

        def report(line: str) -> None:
            said[name].append(line)
            events.append(f"building {name}")

        env.ensure(report)
        events.append(f"ready {name}")

    threads = [threading.Thread(target=build, args=(env,)) for env in (first, changed)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    # Neither waited for the other to finish before it began.
    assert [event.split()[0] for event in events] == ["building", "building", "ready", "ready"]
    # pip built copies: the plugins' folders hold no build/ nor *.egg-info, only their sources.
    for package in (tmp_path / "agents" / "plugin", tmp_path / "other" / "plugin"):
        assert sorted(p.name for p in package.iterdir()) == ["fwbench_test_fake", "pyproject.toml"]
        assert sorted(p.name for p in (package / "fwbench_test_fake").iterdir()) == [
            "__init__.py",
            "plugin.py",
        ]
    build(second)
    assert said == {
        "first": ["creating the first environment (first use, minutes)"],
        "second": [f"making the {second.path.name} environment as a copy of {first.path.name}"],
        "changed": ["creating the changed environment (first use, minutes)"],
    }
    assert "copied from" in second.log.read_text() and second.state() == "ready"
    records = [json.loads((env.path / "fwbench-env.json").read_text()) for env in envs]
    assert records[0]["content"] == records[1]["content"] != records[2]["content"]
    assert records[1]["manifest"] == str(shipped["second"].path)
    # The copy names its own folder wherever a virtual environment names one, and runs there.
    for path in [second.path / "pyvenv.cfg", *(second.path / "bin").iterdir()]:
        if path.is_file() and not path.is_symlink():
            assert str(first.path) not in path.read_text(errors="replace"), path
    where = "import sys, fwbench_test_fake as p; print(sys.prefix, p.__file__)"
    done = subprocess.run(
        [str(second.python), "-I", "-c", where], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    prefix, module = done.stdout.split()
    assert prefix == str(second.path) and module.startswith(str(second.path)), done.stdout
    # A copy is checked as a build is: the same content under a plugin name it lacks is refused.
    broken = environment_for(shipped["broken"])
    with pytest.raises(EnvironmentBuildError, match="installed but cannot run its agent"):
        broken.ensure()
    assert broken.state() == "failed" and "copied from" in broken.log.read_text()
