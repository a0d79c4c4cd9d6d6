"""The Docker launcher with a throwaway agent image (FakePlugin, see conftest.py): ports on
loopback, pinning, thread restarts, crashes, and that no container outlives its run."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import docker
import pytest

from fwbench.collector import __version__
from fwbench.collector.agents.client import AgentUnavailable
from fwbench.collector.agents.docker_engine import ImageInfo
from fwbench.collector.agents.image_labels import manifest_of
from fwbench.collector.agents.manifest import AgentManifest, discover_manifests
from fwbench.collector.agents.specs import Instance
from fwbench.collector.images.build import BUILD_KEY_LABEL, ensure_image, image_tag
from fwbench.collector.launchers.docker import (
    HOST_LABEL,
    PID_LABEL,
    RUN_LABEL,
    remove_orphans,
    remove_run_containers,
    start_docker,
)

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leftovers")]


@pytest.fixture(scope="module")
def fake_image(docker_daemon: docker.DockerClient, fake_manifest: AgentManifest) -> ImageInfo:
    return ensure_image(docker_daemon, fake_manifest)


def _run_id(request: pytest.FixtureRequest) -> str:
    return f"test-{request.node.name.replace('_', '-')[:40]}-{os.getpid()}"


def test_image_is_labelled_from_the_manifest(
    docker_daemon: docker.DockerClient, fake_manifest: AgentManifest, fake_image: ImageInfo
) -> None:
    image = docker_daemon.images.get(fake_image.id)
    labels, config = image.labels, image.attrs["Config"]
    assert labels["fwbench.agent"] == "test-fake"
    assert labels["org.opencontainers.image.version"] == __version__
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert dt.datetime.fromisoformat(labels["org.opencontainers.image.created"]).tzinfo
    assert labels["org.opencontainers.image.base.name"]
    assert labels["fwbench.framework"] == "fake"
    assert labels[BUILD_KEY_LABEL]
    assert "fwbench-test-fake-plugin==0.0.1" in labels["fwbench.packages"].split()
    assert "FAKE_SWITCH=from-the-manifest" in config["Env"]
    assert config["User"] == "10001:10001"
    assert config["Healthcheck"]["Test"][-1] == "fwbench.runtime.healthcheck"
    assert image_tag(fake_manifest) in image.tags
    # Label schema 1 (docs/image-labels.md): the manifest, read back from the built image.
    declared = manifest_of(fake_image)
    assert (declared.name, declared.plugin, declared.framework) == ("test-fake", "fake", "fake")
    assert (declared.grpc_port, declared.metrics_port) == (50099, 9199)
    assert declared.env == {"FAKE_SWITCH": "from-the-manifest"} and not declared.requires_gpu


def _ancestors(pid: int) -> list[int]:
    """The parent chain of a host process, read from /proc, up to (not including) pid 1."""
    chain: list[int] = []
    while pid > 1 and len(chain) < 64:
        status = Path(f"/proc/{pid}/status").read_text()
        pid = int(next(line.split()[1] for line in status.splitlines() if line.startswith("PPid:")))
        chain.append(pid)
    return chain


def test_agent_runs_on_loopback_ports_and_stops_idempotently(
    docker_daemon: docker.DockerClient,
    fake_manifest: AgentManifest,
    fake_image: ImageInfo,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    handle = start_docker(fake_manifest, fake_image, _run_id(request), tmp_path)
    try:
        assert handle.kind == "docker"
        identity = handle.identity()
        assert identity["image_id"] == fake_image.id
        assert identity["image"] == "fwbench/test-fake:latest"
        assert identity["image_digest"] == ""  # built here, never pulled
        container = docker_daemon.containers.get(f"fwbench-{_run_id(request)}-test-fake")
        bindings = container.attrs["NetworkSettings"]["Ports"]
        assert {b["HostIp"] for port in ("50099/tcp", "9199/tcp") for b in bindings[port]} == {
            "127.0.0.1"
        }
        assert handle.address == f"127.0.0.1:{bindings['50099/tcp'][0]['HostPort']}"
        host = container.attrs["HostConfig"]
        assert host["Init"] is True and "no-new-privileges" in host["SecurityOpt"]
        assert host["PidsLimit"] == 4096 and host["Memory"] > 0
        describe = handle.client.describe()
        assert describe.identity.name == "test-fake" and describe.host.in_container
        # The agent's process as this host sees it: a descendant of the container's init
        # (tini). Ancestry, not pid order: pids wrap at pid_max (CI once saw 321 < 32759).
        init_pid = container.attrs["State"]["Pid"]
        assert init_pid > 1 and handle.host_pid not in (0, init_pid)
        assert init_pid in _ancestors(handle.host_pid)
        assert "fwbench-agent" in Path(f"/proc/{handle.host_pid}/cmdline").read_text()
        with urllib.request.urlopen(f"http://{handle.metrics_address}/metrics", timeout=5) as r:
            assert b"fwbench_" in r.read()
        assert handle.alive()
    finally:
        handle.stop()
    handle.stop()  # idempotent
    assert not handle.alive()
    with pytest.raises(docker.errors.NotFound):
        docker_daemon.containers.get(f"fwbench-{_run_id(request)}-test-fake")
    assert "serving on 0.0.0.0:50099" in (tmp_path / "test-fake.log").read_text()


def test_cpuset_and_threads_reach_the_agent(
    docker_daemon: docker.DockerClient,
    fake_manifest: AgentManifest,
    fake_image: ImageInfo,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    handle = start_docker(
        fake_manifest, fake_image, _run_id(request), tmp_path, threads=1, cpuset="0"
    )
    try:
        assert handle.client.describe().host.usable_cores == 1  # the agent's affinity mask
        name = f"fwbench-{_run_id(request)}-test-fake-threads1"
        assert "FWBENCH_THREADS=1" in docker_daemon.containers.get(name).attrs["Config"]["Env"]
        assert handle.threads == 1 and handle.log_path == tmp_path / "test-fake-threads1.log"
    finally:
        handle.stop()


def test_a_killed_container_is_reported_with_its_exit_status(
    docker_daemon: docker.DockerClient,
    fake_manifest: AgentManifest,
    fake_image: ImageInfo,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    handle = start_docker(
        fake_manifest,
        fake_image,
        _run_id(request),
        tmp_path,
        instance=Instance("test-fake", copy=2),
    )
    try:
        assert handle.name == "test-fake#2"
        docker_daemon.containers.get(f"fwbench-{_run_id(request)}-test-fake-2").kill()
        deadline = time.monotonic() + 10
        while handle.alive() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not handle.alive()
        assert "exited with code 137" in handle.exit_reason()
    finally:
        handle.stop()


def test_ending_a_run_removes_its_containers_and_refuses_new_ones(
    docker_daemon: docker.DockerClient,
    fake_manifest: AgentManifest,
    fake_image: ImageInfo,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    run_id = _run_id(request)
    handle = start_docker(fake_manifest, fake_image, run_id, tmp_path)
    assert remove_run_containers(run_id) == 1
    assert not docker_daemon.containers.list(
        all=True, ignore_removed=True, filters={"label": f"{RUN_LABEL}={run_id}"}
    )
    assert not handle.alive()
    handle.stop()  # its container is already gone
    with pytest.raises(AgentUnavailable, match="has ended"):
        start_docker(fake_manifest, fake_image, run_id, tmp_path)


def test_containers_of_dead_collectors_are_swept(
    docker_daemon: docker.DockerClient, fake_image: ImageInfo
) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    labels = {HOST_LABEL: os.uname().nodename, RUN_LABEL: "test-orphans"}
    orphan = docker_daemon.containers.create(
        fake_image.id, labels={**labels, PID_LABEL: str(dead.pid)}
    )
    ours = docker_daemon.containers.create(
        fake_image.id, labels={**labels, PID_LABEL: str(os.getpid())}
    )
    try:
        assert remove_orphans() >= 1
        with pytest.raises(docker.errors.NotFound):
            orphan.reload()
        ours.reload()  # a live collector's container stays
    finally:
        ours.remove(force=True)


def test_image_is_rebuilt_when_the_agent_sources_change(
    docker_daemon: docker.DockerClient, tmp_path: Path, fake_agent_writer: Callable[..., Path]
) -> None:
    manifests = fake_agent_writer(tmp_path, name="test-fake-edited")
    manifest = discover_manifests([manifests])["test-fake-edited"]
    first = ensure_image(docker_daemon, manifest)
    assert ensure_image(docker_daemon, manifest).id == first.id  # current: not rebuilt
    plugin = tmp_path / "plugin" / "fwbench_test_fake" / "plugin.py"
    plugin.write_text(plugin.read_text().replace('"1.2.3"', '"1.2.4"'))
    second = ensure_image(docker_daemon, manifest)
    assert second.id != first.id
    assert second.labels[BUILD_KEY_LABEL] != first.labels[BUILD_KEY_LABEL]
    docker_daemon.images.remove(second.id, force=True)


def test_the_image_serves_as_a_restricted_pods_user(
    docker_daemon: docker.DockerClient, fake_manifest: AgentManifest, fake_image: ImageInfo
) -> None:
    """What a pod at Kubernetes' "restricted" Pod Security level runs
    (launchers/kubernetes_objects.py): the agent's image as a non-root user that has no home
    (HOME=/tmp, as the pod sets it), without capabilities or new privileges. The agent starts
    and answers Describe."""
    from fwbench.collector.agents.client import AgentClient
    from fwbench.collector.launchers.kubernetes_objects import AGENT_USER

    port = f"{fake_manifest.grpc_port}/tcp"
    container = docker_daemon.containers.run(
        fake_image.id,
        detach=True,
        user=f"{AGENT_USER}:{AGENT_USER}",
        environment={"HOME": "/tmp", "FWBENCH_HOST": "0.0.0.0"},
        cap_drop=["ALL"],
        security_opt=["no-new-privileges"],
        ports={port: ("127.0.0.1", None)},
    )
    try:
        deadline = time.monotonic() + 60
        while not container.attrs["NetworkSettings"]["Ports"].get(port):
            assert container.status in ("created", "running"), container.logs()[-2000:]
            assert time.monotonic() < deadline, container.logs()[-2000:]
            time.sleep(0.1)
            container.reload()
        host_port = container.attrs["NetworkSettings"]["Ports"][port][0]["HostPort"]
        client = AgentClient("fake", f"127.0.0.1:{host_port}")
        try:
            # Readiness through the health service, as the launchers wait: the agent's log
            # may log a start-up warning before its server listens.
            client.wait_healthy(60, alive=lambda: _running(container))
            assert client.describe(10).identity.name == "test-fake"
        finally:
            client.close()
        assert container.exec_run("id -u").output.decode().strip() == str(AGENT_USER)
    finally:
        container.remove(force=True)


def _running(container: docker.models.containers.Container) -> bool:
    container.reload()
    return bool(container.status == "running")
