"""docs/writing-an-agent.md tested as written: the session's `guide_build` (conftest.py) ran its
stubs, wheels and build steps on a copy of the example agent outside the repository tree
(tests/agent_guide.py: the guide's Dockerfile and requirements.txt, `docker build --network
none`); here the guide's conformance commands pass on that image (as an image, and started
by `docker run` and reached as HOST:PORT), and the image stops at once on `docker stop`
(SIGTERM, as PID 1), as the guide says it must."""

from __future__ import annotations

import contextlib
import json
import time

import docker
import pytest
from agent_guide import GuideBuild, guide_blocks, run_step

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leftovers")]


def test_the_guides_steps_ran_offline(guide_build: GuideBuild) -> None:
    """The stubs exist where the guide's protoc put them; the build reached no network (an
    install from an index would have failed under --network none)."""
    stubs = guide_build.context / "app"
    assert (stubs / "agent_pb2.py").is_file() and (stubs / "agent_pb2_grpc.py").is_file()
    assert "--network none" in guide_blocks()["run=build"]
    assert "--no-index --find-links /build/wheels" in guide_blocks()["file=Dockerfile"]
    assert list((guide_build.context / "wheels").glob("numpy-*.whl"))
    print(f"guide steps: {guide_build.seconds}")  # pytest -s: cold and warm build times


def test_the_guides_conformance_command_passes_on_its_image(guide_build: GuideBuild) -> None:
    """Step 5's command, its image the guide's build: `collector conformance IMAGE --launcher
    docker` exits 0, no check failed."""
    start = time.monotonic()
    done = run_step("conformance", guide_build.context, guide_build.tag, extra="--json")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    checks = json.loads(done.stdout)["checks"]
    assert checks and not [c for c in checks if c["result"] == "fail"], checks
    results = {c["check"]: c["result"] for c in checks}
    assert sum(result == "pass" for result in results.values()) >= 30, results
    assert results["refuse undeclared catalogue workload: UNIMPLEMENTED"] == "pass"
    assert results["heartbeat: a Progress every 2 s for 17 s"] == "pass"
    print(f"conformance: {time.monotonic() - start:.1f} s")


# The same example and suite as the image's command above, reached at an address as
# tests/examples reaches the example without Docker: `make test-full`.
@pytest.mark.full
def test_the_guides_host_port_example_passes(
    docker_daemon: docker.DockerClient, guide_build: GuideBuild
) -> None:
    """Step 5's other way, as written: the image started by `docker run -d -p`, `collector
    conformance 127.0.0.1:50070` on it (exit 0, nothing failed: bash -e stops at a failure),
    then `docker stop` (the container removed by --rm)."""
    script = guide_blocks()["run=attached"]
    name = script.split("--name ")[1].split()[0]
    try:
        done = run_step("attached", guide_build.context, guide_build.tag)
        assert done.returncode == 0, _failed_rows(done.stdout) + done.stderr[-2000:]
        assert " 0 failed" in done.stdout and "conformance of agent@127.0.0.1:50070" in done.stdout
    finally:  # a failed check leaves the container running: bash -e stopped before docker stop
        # The low-level list: the high-level one inspects each, racing --rm's removal.
        for container in docker_daemon.api.containers(all=True, filters={"name": name}):
            with contextlib.suppress(docker.errors.APIError):  # --rm may be removing it
                docker_daemon.api.remove_container(container["Id"], force=True)
    deadline = time.monotonic() + 30
    while docker_daemon.api.containers(all=True, filters={"name": name}):
        assert time.monotonic() < deadline, f"container {name} was not removed"
        time.sleep(0.2)


def test_the_image_stops_at_once_on_sigterm(
    docker_daemon: docker.DockerClient, guide_build: GuideBuild
) -> None:
    """The agent is PID 1 (exec-form ENTRYPOINT) and handles SIGTERM: `docker stop` returns in
    well under its 10 s grace, the container exits 0."""
    container = docker_daemon.containers.run(guide_build.tag, detach=True)
    try:
        deadline = time.monotonic() + 60
        while b"serving on port" not in container.logs():
            container.reload()
            assert container.status == "running", container.logs()[-2000:]
            assert time.monotonic() < deadline, "the agent did not start in 60 s"
            time.sleep(0.1)
        start = time.monotonic()
        container.stop(timeout=10)
        stopped = time.monotonic() - start
        container.reload()
        assert container.attrs["State"]["ExitCode"] == 0, container.logs()[-2000:]
        assert stopped < 5, f"docker stop took {stopped:.1f} s: SIGTERM ignored?"
    finally:
        container.remove(force=True)


def _failed_rows(table: str) -> str:
    """The suite's table from its first failed check on (a check's reason wraps over lines),
    else its end."""
    at = table.find("│ fail ")
    return table[max(at - 200, 0) : at + 3000] if at >= 0 else table[-3000:]
