"""Every `collector run` a test starts (in this process or a child) finds this host calibrated
at the quick effort (tiny sizes: a second, not a ceiling) in a folder of this test session,
measured once here before the first test: no run prints "calibrating", and the user's cache
is left alone. Tests of the calibration itself set their own effort and folder."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("FWBENCH_CALIBRATION", "quick")


# Where a `make test` run's time went (tests/suite_clock.py): with FWBENCH_TEST_RUN set (the
# Makefile's test targets), each test's wall time and the CPU time it cost, this process's and
# that of the child processes it waited for (agents, collectors, compilers), one JSON line a
# test in the run's folder, a file per pytest process (xdist workers, agent environments).
# Only the pytest runs that write a junit file (the Makefile's) record: a pytest a test starts
# inherits the variable, and its tests' CPU is already its parent test's.
@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item) -> Iterator[None]:
    folder = os.environ.get("FWBENCH_TEST_RUN")
    junit = item.config.getoption("xmlpath", None)  # the pytest run's junit file, if any
    if not folder or not junit:
        yield
        return
    began, before = time.monotonic(), os.times()
    yield
    after = os.times()
    own = after.user + after.system - before.user - before.system
    children = after.children_user + after.children_system
    children -= before.children_user + before.children_system
    line = {"nodeid": item.nodeid, "wall": time.monotonic() - began, "cpu": own + children}
    line["run"] = Path(junit).stem
    name = f"cpu-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}-{os.getpid()}.jsonl"
    with (Path(folder) / name).open("a") as out:
        out.write(json.dumps(line) + "\n")


@pytest.fixture(scope="session", autouse=True)
def quick_host_calibration(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    try:  # the plugin tests run this file in agent environments, which lack the collector
        from fwbench.collector.calibration.cache import DIR_VARIABLE, host_calibration
    except ImportError:
        yield
        return
    if DIR_VARIABLE not in os.environ:
        os.environ[DIR_VARIABLE] = str(tmp_path_factory.mktemp("calibration"))
        host_calibration([], effort=os.environ["FWBENCH_CALIBRATION"])
    yield


# `make test-main` runs the suite on pytest-xdist workers (`--dist loadscope`), then the
# tests marked `quiet` alone. Each module is one scope, run whole on one worker, so its
# module and session fixtures are made once; each folder whose tests share one daemon or one
# cluster (a Docker engine whose containers they count, Slurm clusters, the fake Kubernetes
# API) is one scope. (xdist_group marks would say the same, but `--dist loadgroup` ignores
# them under pytest 9.2: pytest-dev/pytest-xdist#1386.)
SHARED_FOLDERS = frozenset({"docker", "slurm", "cluster"})


def scope_of(nodeid: str) -> str:
    """The module of a test, or its folder when that is one of SHARED_FOLDERS."""
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    if len(parts) > 2 and parts[0] == "tests" and parts[1] in SHARED_FOLDERS:
        return "/".join(parts[:2])
    return path


# The scopes that take longest are dealt first, the rest in xdist's order (most tests first):
# a long scope dealt last runs alone while the other workers idle. tests/docker builds its
# images (minutes on a machine that has none), the equivalence module compiles every model
# in every framework, tests/slurm starts clusters; none has the most tests. The others took
# 2-4 minutes each (`make test-time`, AMD EPYC family 25, 2026-12-06).
LONGEST_FIRST = (
    "tests/docker",
    "tests/equivalence/test_equivalence.py",
    "tests/slurm",
    "tests/conformance/test_conformance_suite.py",
    "tests/integration/test_frameworks.py",
    "tests/integration/test_until_decided.py",
    "tests/cluster",
    "tests/faults/test_environment_readiness.py",
    "tests/integration/test_compare_run.py",
    "tests/distributed/test_torch_world.py",
)


def longest_first(scopes: list[str]) -> list[str]:
    """`scopes` with those of LONGEST_FIRST at the front, in its order; the rest as given."""
    rank = {scope: place for place, scope in enumerate(LONGEST_FIRST)}
    return sorted(scopes, key=lambda scope: rank.get(scope, len(rank)))


@pytest.hookimpl(optionalhook=True, tryfirst=True)  # xdist's hook; agent environments lack it
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    if config.getvalue("dist") != "loadscope":
        return None
    from collections import OrderedDict

    from xdist.scheduler import LoadScopeScheduling

    class ModulesAndSharedFolders(LoadScopeScheduling):
        ordered = False

        def _split_scope(self, nodeid: str) -> str:
            return scope_of(nodeid)

        def _assign_work_unit(self, node: object) -> None:
            if not self.ordered:  # the first unit dealt: the queue is whole
                queue = self.workqueue
                self.workqueue = OrderedDict((s, queue[s]) for s in longest_first(list(queue)))
                self.ordered = True
            super()._assign_work_unit(node)

    return ModulesAndSharedFolders(config, log)
