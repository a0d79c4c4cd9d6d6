"""Fixtures for tests that need a Docker daemon (`make docker-deps` starts one). Without a
daemon they skip, except under CI=true or FWBENCH_REQUIRE_DOCKER=1 (set by `make test`),
where that is a failure.

The throwaway agent is made of test files only, the way a third party adds a framework: a
plugin package wrapping the runtime tests' FakePlugin and a manifest in a folder of its own,
found through FWBENCH_MANIFEST_PATH. Nothing in the collector or the runtime names it."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import docker
import pytest

from fwbench.collector.agents.docker_engine import DockerUnavailable, docker_client
from fwbench.collector.agents.manifest import AgentManifest, discover_manifests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/fake_agent.py
from agent_guide import GuideBuild, build_as_the_guide_says
from fake_agent import FAKE_AGENT, write_fake_agent

EXAMPLE_TAG = "fwbench-test/numpy-gemm:latest"


@pytest.fixture(scope="session")
def docker_daemon() -> docker.DockerClient:
    try:
        return docker_client()
    except DockerUnavailable as error:
        if os.environ.get("CI") or os.environ.get("FWBENCH_REQUIRE_DOCKER"):
            pytest.fail(f"CI needs a Docker daemon (make docker-deps): {error}")
        pytest.skip(str(error))


@pytest.fixture(scope="session")
def guide_build(
    docker_daemon: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory
) -> GuideBuild:
    """The example agent agents/examples/numpy-gemm built as docs/writing-an-agent.md says, its
    commands and files run as written (tests/agent_guide.py): stubs, wheels downloaded on this
    host (its pip configuration reaches an index), `docker build --network none`. Once a
    session; Docker's layer cache makes a rebuild take seconds."""
    return build_as_the_guide_says(tmp_path_factory.mktemp("numpy-gemm") / "context", EXAMPLE_TAG)


@pytest.fixture(scope="session")
def example_image(guide_build: GuideBuild) -> str:
    """The tag of the example agent's image (guide_build)."""
    return guide_build.tag


@pytest.fixture(scope="session")
def fake_manifests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_fake_agent(tmp_path_factory.mktemp("fake-agent"))


@pytest.fixture(scope="session")
def fake_manifest(fake_manifests: Path) -> AgentManifest:
    return discover_manifests([fake_manifests])[FAKE_AGENT]


@pytest.fixture(scope="session")
def fake_agent_writer() -> Callable[..., Path]:
    """write_fake_agent(root, name=...), for tests that need an agent of their own."""
    return write_fake_agent


@pytest.fixture
def no_leftovers(docker_daemon: docker.DockerClient) -> Iterator[None]:
    """Fails the test when it leaves a container of this collector process behind."""
    yield
    left = docker_daemon.containers.list(
        all=True, ignore_removed=True, filters={"label": f"fwbench.collector-pid={os.getpid()}"}
    )
    for container in left:
        container.remove(force=True)
    assert not left, f"containers left behind: {[c.name for c in left]}"
