"""Prints, one per line, `AGENT PLUGIN FOLDER...` for every agent whose manifest makes it its
plugin's representative in the tests ([tests] representative = true) and that this host can
run: `make test-plugins` runs those folders and the plugin contract suite in that agent's
environment. Derived from the manifests, so a new plugin's tests need no Makefile edit.

`plugin_matrix.py --env AGENT` prints that agent's manifest [env] as NAME=VALUE words, for
`env`: the tests run with the switches the agent runs with (KERAS_BACKEND picks Keras'
backend; a plugin may refuse to start without its switch).

`plugin_matrix.py --run [--jobs N]` (`make test-plugins`) runs them: each agent's folders and
the contract suite in its environment (made or refreshed first), with its [env], N agents at
a time (default 2: most of these suites is one thread compiling, JAX's and TensorFlow's
graphs, so two keep a 2-CPU CI host busy); each agent's output is printed whole when it ends.
Exit 1 when any failed, naming them."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import suite_clock

from fwbench.collector.agents import installer
from fwbench.collector.agents.environments import environment_for
from fwbench.collector.agents.host import nvidia_gpu_present
from fwbench.collector.agents.manifest import AgentManifest, discover_manifests

ROOT = Path(__file__).resolve().parents[1]
JOBS = 2


def representatives() -> list[AgentManifest]:
    gpu = nvidia_gpu_present()
    shipped = discover_manifests([ROOT / "agents" / "manifests"])
    return [m for m in shipped.values() if m.representative and (gpu or not m.requires_gpu)]


def _test_files(manifest: AgentManifest) -> int:
    return sum(len(list(folder.rglob("test_*.py"))) for folder in manifest.plugin_tests)


def _longest_first(manifest: AgentManifest) -> tuple[bool, int]:
    """An environment that compiles an sdist first (llama.cpp: minutes of a cold run, alone at
    the stage's end when it came last), then by the number of test files."""
    return bool(manifest.build_requirements), _test_files(manifest)


def run_one(manifest: AgentManifest, log: Path) -> tuple[bool, float]:
    """The agent's plugin tests and the contract suite in its environment; (passed, seconds)."""
    started = time.monotonic()
    recording = suite_clock.VARIABLE in os.environ  # a make target's run: its stages and junit
    with log.open("w") as out:
        if recording:
            suite_clock.record("start", f"plugins/{manifest.name}-environment", say=False)
        environment = environment_for(manifest)
        environment.ensure(lambda line: print(line, file=out, flush=True))
        python = str(environment.python)
        install = installer.install_command(environment.python, "pytest", "pytest-timeout")
        variables = installer.uv_variables(installer.pip_configuration())
        subprocess.run(install, stdout=out, stderr=subprocess.STDOUT, env=variables, check=True)
        if recording:
            suite_clock.record("stop", f"plugins/{manifest.name}-environment", 0, say=False)
            suite_clock.record("start", f"plugins/{manifest.name}-tests", say=False)
        folders = [str(p.relative_to(ROOT)) for p in manifest.plugin_tests]
        command = [python, "-m", "pytest", "-p", "no:cacheprovider", *folders]
        command += ["tests/plugin_contract", "--plugin", manifest.plugin]
        if recording:
            junit = suite_clock.run_folder() / f"plugins-{manifest.name}.xml"
            command += [f"--junitxml={junit}", "-o", "junit_family=xunit2"]
        done = subprocess.run(
            command,
            cwd=ROOT,
            env={**os.environ, **manifest.env},
            stdout=out,
            stderr=subprocess.STDOUT,
        )
        if recording:
            suite_clock.record("stop", f"plugins/{manifest.name}-tests", done.returncode, say=False)
    return done.returncode == 0, time.monotonic() - started


def run_all(jobs: int) -> int:
    manifests = sorted(representatives(), key=_longest_first, reverse=True)

    def one(manifest: AgentManifest) -> tuple[str, bool]:
        log = Path(tempfile.mkstemp(prefix=f"plugin-tests-{manifest.name}-", suffix=".log")[1])
        try:
            passed, seconds = run_one(manifest, log)
        except (subprocess.CalledProcessError, RuntimeError) as error:
            passed, seconds = False, 0.0
            with log.open("a") as out:
                print(f"could not prepare the {manifest.name} environment: {error}", file=out)
        folders = " ".join(str(p.relative_to(ROOT)) for p in manifest.plugin_tests)
        header = f"== {folders} and the plugin contract ({manifest.plugin}) in the {manifest.name}"
        print(f"{header} environment: {'passed' if passed else 'FAILED'} in {seconds:.0f} s")
        print(log.read_text(), flush=True)
        log.unlink()
        return manifest.name, passed

    with ThreadPoolExecutor(jobs) as pool:
        failed = [name for name, passed in pool.map(one, manifests) if not passed]
    if failed:
        print(f"plugin tests failed in: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["--run"]:
        jobs = int(sys.argv[3]) if sys.argv[2:3] == ["--jobs"] else JOBS
        sys.exit(run_all(jobs))
    if sys.argv[1:2] == ["--env"]:
        shipped = discover_manifests([ROOT / "agents" / "manifests"])
        print(" ".join(f"{k}={v}" for k, v in shipped[sys.argv[2]].env.items()))
        sys.exit(0)
    for manifest in representatives():
        folders = " ".join(str(p.relative_to(ROOT)) for p in manifest.plugin_tests)
        print(f"{manifest.name} {manifest.plugin} {folders}".rstrip())
