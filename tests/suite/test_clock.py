"""`make test` keeps where its time went (tests/suite_clock.py): stages with the host's CPU
shares over each, and every test's time and CPU from a real pytest run's junit XML and the
conftest's per-test lines, joined by name (a class, parameters with '/' and '::' in them)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]

# A module of tests the inner pytest runs: one burns CPU, one sleeps, one fails.
TESTS = """
import time
import pytest

class TestGroup:
    def test_burns(self):
        end = time.process_time() + 0.6
        while time.process_time() < end:
            pass

@pytest.mark.parametrize("name", ["a/b", "c::d"])
def test_sleeps(name):
    time.sleep(0.3)

def test_fails():
    assert False
"""


# The inner run's conftest takes the project's hook that records each test's CPU.
CONFTEST = """
import importlib.util
spec = importlib.util.spec_from_file_location("project_conftest", "{conftest}")
project = importlib.util.module_from_spec(spec)
spec.loader.exec_module(project)
pytest_runtest_protocol = project.pytest_runtest_protocol
"""


def _clock() -> ModuleType:
    spec = importlib.util.spec_from_file_location("suite_clock", ROOT / "tests" / "suite_clock.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("suite_clock", module)  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_a_run_records_stages_and_every_tests_time_and_cpu(tmp_path: Path) -> None:
    run = tmp_path / "run"
    env = {**os.environ, "FWBENCH_TEST_RUN": str(run)}
    clock = [sys.executable, str(ROOT / "tests" / "suite_clock.py")]
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "test_inner.py").write_text(TESTS)
    (inner / "conftest.py").write_text(CONFTEST.format(conftest=ROOT / "tests" / "conftest.py"))
    subprocess.run([*clock, "start", "inner"], env=env, check=True, capture_output=True)
    pytest_run = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
    pytest_run += [f"--junitxml={run / 'inner.xml'}", "-o", "junit_family=xunit2"]
    done = subprocess.run(pytest_run, cwd=inner, env=env, capture_output=True, text=True)
    assert done.returncode == 1, done.stdout  # test_fails failed
    stopped = subprocess.run(
        [*clock, "stop", "inner", "1"], env=env, check=True, capture_output=True, text=True
    )
    assert "== inner: ended after" in stopped.stdout and "exit status 1" in stopped.stdout
    suite_clock = _clock()
    (stage,) = suite_clock.stages(run)
    assert stage.name == "inner" and stage.rc == 1 and stage.ended > stage.began
    assert len(suite_clock.stage_paces(run)) == 1  # taken as the stage ended
    assert abs(sum(stage.cpu.values()) - 1) < 1e-6  # busy, idle, iowait and steal: all of it
    cases = {c.nodeid.removeprefix("test_inner"): c for c in suite_clock.cases(run)}
    assert set(cases) == {
        ".TestGroup::test_burns",
        "::test_sleeps[a/b]",
        "::test_sleeps[c::d]",
        "::test_fails",
    }, list(cases)
    assert all(c.cpu is not None for c in cases.values()), cases  # every test joined
    assert cases[".TestGroup::test_burns"].cpu >= 0.5  # it burned 0.6 s of CPU
    assert cases["::test_sleeps[a/b]"].seconds >= 0.3 > cases["::test_sleeps[a/b]"].cpu
    assert cases["::test_fails"].outcome == "failed"
    report = subprocess.run(
        [*clock, "report", str(run), "--top", "2"], capture_output=True, text=True, check=True
    ).stdout
    assert "4 tests (1 failed, 3 passed)" in report
    assert "the 2 slowest tests" in report and "1 failed:" in report
    facts = json.loads((run / "host.json").read_text())
    assert facts["cpus"] == os.cpu_count() and facts["pace_seconds"] > 0
    assert "pace (CPU seconds of a fixed workload, lower is faster)" in report
