"""`make test-main` shares the suite between pytest-xdist workers by scope (tests/conftest.py):
a module runs whole on one worker, so its module fixtures are made once (the equivalence
suite's, minutes of XLA compiling, were made twice when xdist_group marks were silently
ignored), and each folder whose tests share a daemon or a cluster is one scope."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[2]


def _conftest() -> ModuleType:
    spec = importlib.util.spec_from_file_location("suite_conftest", ROOT / "tests" / "conftest.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_scope_is_a_module_or_a_shared_folder() -> None:
    scope_of = _conftest().scope_of
    assert scope_of("tests/spec/test_catalogue.py::test_x[a-b]") == "tests/spec/test_catalogue.py"
    assert scope_of("tests/docker/test_docker_runs.py::test_y") == "tests/docker"
    assert scope_of("tests/slurm/test_multinode.py::test_z[tf-eigen]") == "tests/slurm"
    assert scope_of("tests/cluster/test_kubernetes_manifests.py::T::test") == "tests/cluster"
    assert scope_of("tests/faults/test_docker.py::test") == "tests/faults/test_docker.py"


def test_the_longest_scopes_are_dealt_first_and_the_rest_keep_their_order() -> None:
    conftest = _conftest()
    queue = ["tests/spec/test_a.py", "tests/slurm", "tests/faults/test_b.py", "tests/docker"]
    assert conftest.longest_first(queue) == [
        "tests/docker",
        "tests/slurm",
        "tests/spec/test_a.py",
        "tests/faults/test_b.py",
    ]
    assert set(conftest.LONGEST_FIRST) >= {"tests/docker", "tests/slurm"}
    assert all(  # each names a folder or a module that exists
        (ROOT / scope).exists() for scope in conftest.LONGEST_FIRST
    )


def test_two_workers_run_each_module_whole() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "-n",
            "2",
            "--dist",
            "loadscope",
            "-v",
            "tests/spec",
            "tests/docs/test_settings_doc.py",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    workers = defaultdict(set)
    for worker, module in re.findall(r"^\[(gw\d)\] .*?(tests/\S+?\.py)::", done.stdout, re.M):
        workers[module].add(worker)
    assert len(workers) >= 5 and {w for ws in workers.values() for w in ws} == {"gw0", "gw1"}
    assert all(len(ran_on) == 1 for ran_on in workers.values()), dict(workers)
