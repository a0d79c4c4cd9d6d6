"""The plugin contract suite (tests/plugin_contract) runs without any framework: it passes
against the fake plugins these tests use, and fails against one that breaks the contract. Each
run is a pytest subprocess that loads the plugin through a throwaway entry point."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from plugin_dist import write_entry_points

HERE = Path(__file__).parent
ROOT = HERE.parents[1]
PLUGINS = {
    "fake": "fake_plugin:FakePlugin",
    "fake-reference": "fake_reference:FakeReferencePlugin",
    "careless": "odd_plugins:Careless",
}


@pytest.fixture(scope="module")
def suite(tmp_path_factory: pytest.TempPathFactory):
    folder = write_entry_points(tmp_path_factory.mktemp("plugins"), PLUGINS)
    path = [str(folder), str(HERE), os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}
    env.pop("FWBENCH_PLUGIN", None)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfs"]
        command += ["tests/plugin_contract", *args]
        return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)

    return run


@pytest.mark.parametrize("name", ["fake", "fake-reference"])
def test_the_suite_passes_against_the_fake_plugins(suite, name):
    done = suite("--plugin", name)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert " passed" in done.stdout and "failed" not in done.stdout


def test_the_reference_fake_exercises_both_optional_capabilities(suite):
    done = suite("--plugin", "fake-reference", "-k", "equivalence or accuracy")
    assert done.returncode == 0, done.stdout[-4000:]
    assert "\n4 passed, " in done.stdout and "skipped" not in done.stdout


def test_the_suite_fails_a_plugin_that_breaks_the_contract(suite):
    done = suite("--plugin", "careless")
    assert done.returncode == 1, done.stdout[-4000:]
    # "FAILED path::test[param] - message" (the message only where the terminal is wide)
    failed = {
        line.split("::")[1].split(" ")[0].split("[")[0]
        for line in done.stdout.splitlines()
        if line.startswith("FAILED")
    }
    assert failed == {
        # It rebuilds every step as one piece, its generation too.
        "test_a_generation_comes_in_its_parts_with_the_catalogues_decode_steps",
        "test_settings_echo_the_dtype_and_mode_asked_for",
        "test_an_unclaimed_phase_is_refused",
        "test_an_unclaimed_dtype_is_refused",
        "test_an_unknown_mode_is_refused",
        "test_an_unclaimed_workload_is_refused",
    }


def test_without_a_plugin_the_suite_skips(suite):
    done = suite()
    assert done.returncode == 0, done.stdout[-4000:]
    assert "no plugin named" in done.stdout and " passed" not in done.stdout
