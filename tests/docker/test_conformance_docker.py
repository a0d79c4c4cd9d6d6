"""`collector conformance NAME --launcher docker`: the suite starts a declared agent as a
container from its image (built from the manifest when missing), the way `collector run
--launcher docker` does, and checks it through the container's published ports, /metrics
included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import docker
import pytest

pytestmark = pytest.mark.docker

COLLECTOR = str(Path(sys.executable).parent / "collector")
# The test fake reports 1 intra-op thread whatever a run asks for (tests/runtime/
# fake_plugin.py), which the threads checks rightly fail: they are left out here.
GROUPS = "describe,services,errors,cells,lifecycle,metrics"
QUICK = ["--cells", "one", "--checks", GROUPS, "--json"]


def test_a_declared_agent_in_its_container_passes(
    docker_daemon: docker.DockerClient, fake_agent_writer: Callable[..., Path], tmp_path: Path
) -> None:
    manifests = fake_agent_writer(tmp_path, name="conformance-fake")
    done = subprocess.run(
        [COLLECTOR, "conformance", "conformance-fake", "--launcher", "docker", *QUICK],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "FWBENCH_MANIFEST_PATH": str(manifests)},
        check=False,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    results = {c["check"]: c["result"] for c in json.loads(done.stdout)["checks"]}
    assert results["identity"] == "pass"  # Describe names the manifest's agent
    assert results["/metrics has the collector's series"] == "pass"  # the published port
    assert results["Cancel of the running run: CANCELLED"] == "pass"
    assert "threads = another count" not in results
    leftovers = docker_daemon.containers.list(
        all=True, ignore_removed=True, filters={"ancestor": "fwbench/conformance-fake"}
    )
    assert leftovers == []
