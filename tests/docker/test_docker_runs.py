"""`collector run --launcher docker` end to end, as a user runs it: the console script, real
images, real containers. The same table as the local launcher, for the catalogue and for the
user's model file (mounted, not copied); nothing left behind after a Ctrl-C; an agent added
from files only; a compose fleet the collector attaches to."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import docker
import pandas as pd
import pytest
from interrupted import with_sigint

from fwbench.collector.images.compose import COMPOSE_DIR

pytestmark = pytest.mark.docker

BIN = Path(sys.executable).parent
# A real framework's image: torch-cpu's; tf-eigen's takes the same path (`make test-full`).
REAL = "torch-cpu"
REAL_AGENTS = [REAL, pytest.param("tf-eigen", marks=pytest.mark.full)]
TINY = [
    *("--workloads", "gemm,resnet18", "--phases", "train,infer", "--batch-sizes", "2"),
    *("--param", "m=256", "--param", "n=256", "--param", "k=256", "--param", "image_size=32"),
    *("--warmup", "1", "--iterations", "3", "--min-seconds", "0"),
]
SAME = [
    "agent",
    "workload",
    "phase",
    "batch_size",
    "dtype",
    "mode",
    "status",
    "framework",
    "framework_version",
    "variant",
    "libraries",
    "environment",
    "intra_op_threads",
    "flops_per_item",
    "n",
]


def collector(*args: str, tmp: Path, env: dict[str, str] | None = None, timeout: float = 900):
    return subprocess.run(
        [str(BIN / "collector"), *args],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=timeout,
        env={
            **os.environ,
            "COLUMNS": "200",
            "FWBENCH_STORE": str(tmp / "store.sqlite"),
            **(env or {}),
        },
    )


def containers_of(client: docker.DockerClient, pid: int) -> list[str]:
    found = client.containers.list(
        all=True, ignore_removed=True, filters={"label": f"fwbench.collector-pid={pid}"}
    )
    return [c.name for c in found]


def build_image(agent: str, tmp: Path) -> None:
    """`collector images build AGENT` (cached between test runs: seconds), then listed."""
    tmp.mkdir(exist_ok=True)
    done = collector("images", "build", agent, tmp=tmp, timeout=1800)
    assert done.returncode == 0, done.stderr[-2000:]
    assert f"fwbench/{agent}:latest" in collector("images", "list", tmp=tmp).stdout


@pytest.fixture(scope="module")
def real_images(docker_daemon: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory):
    """The REAL agent's image, built once."""
    build_image(REAL, tmp_path_factory.mktemp("build"))
    return REAL


@pytest.mark.agent
@pytest.mark.parametrize("agent", REAL_AGENTS)
def test_docker_launcher_gives_the_local_launchers_table(
    docker_daemon: docker.DockerClient, agent: str, tmp_path: Path
) -> None:
    build_image(agent, tmp_path / "build")
    tables = {}
    for launcher in ("local", "docker"):
        out = tmp_path / launcher
        done = collector(
            *("run", "--launcher", launcher, "--agents", agent, *TINY, "--out", str(out)),
            *("--agent-env", "MALLOC_ARENA_MAX=2"),  # every launcher passes it, both report it
            tmp=tmp_path,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        tables[launcher] = pd.read_parquet(out / "results.parquet")
    local, inside = tables["local"], tables["docker"]
    assert list(local.columns) == list(inside.columns)
    assert len(local) == len(inside) == 4  # gemm and resnet18, train and infer
    assert (local.status == "ok").all() and (inside.status == "ok").all()
    pd.testing.assert_frame_equal(local[SAME], inside[SAME])
    assert set(local.launcher) == {"local"} and set(inside.launcher) == {"docker"}
    for rows in (local, inside):
        assert rows.environment.map(lambda e: json.loads(e)["MALLOC_ARENA_MAX"] == "2").all()
    assert inside.in_container.all()  # (this host has /.dockerenv too: local says so as well)
    assert set(inside.image) == {f"fwbench/{agent}:latest"}
    assert inside.image_id.str.startswith("sha256:").all() and (local.image_id == "").all()
    assert inside.telemetry_scrapes.notna().all()  # /metrics reached on its published port
    meta = json.loads((tmp_path / "docker" / "run.json").read_text())
    assert meta["agents"][agent]["image"]["tag"] == f"fwbench/{agent}:latest"
    assert {p.name for p in (tmp_path / "docker" / "logs").glob("*.log")} == {f"{agent}.log"}
    assert not docker_daemon.containers.list(
        all=True, ignore_removed=True, filters={"label": "fwbench.run_id"}
    )


def _interrupt_when(
    process: subprocess.Popen[str], ready: Callable[[], bool], delay: float = 0.0
) -> tuple[int, str]:
    """Sends SIGINT `delay` seconds after `ready()` first holds; returns (exit code, stderr)."""
    deadline = time.monotonic() + 300
    try:
        while not ready():
            assert process.poll() is None, process.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "the run never got there"
            time.sleep(0.1)
        time.sleep(delay)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=120)
    except BaseException:
        # Reaped here, so a failure leaves no running child to warn in a later test.
        process.kill()
        process.communicate()
        raise
    return process.returncode, stderr


def _start(tmp: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        with_sigint([BIN / "collector", "run", "--launcher", "docker", *args]),
        cwd=tmp,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "FWBENCH_STORE": str(tmp / "store.sqlite"), **(env or {})},
    )


def test_ctrl_c_in_the_middle_of_a_cell_leaves_no_container(
    docker_daemon: docker.DockerClient, real_images: str, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    process = _start(
        tmp_path,
        *("--agents", REAL, "--workloads", "resnet18", "--phases", "train"),
        *("--batch-sizes", "2", "--param", "image_size=64", "--min-seconds", "60"),
        *("--out", str(out)),
    )
    # run.json is written once every agent is up, just before the first cell starts.
    code, stderr = _interrupt_when(process, (out / "run.json").exists, delay=3.0)
    assert code == 130, stderr[-2000:]
    assert containers_of(docker_daemon, process.pid) == []
    results = pd.read_parquet(out / "results.parquet")
    assert list(results.status) == ["cancelled"]


def test_ctrl_c_while_containers_start_leaves_none(
    docker_daemon: docker.DockerClient, fake_manifests: Path, tmp_path: Path
) -> None:
    env = {"FWBENCH_MANIFEST_PATH": str(fake_manifests)}
    process = _start(tmp_path, "--agents", "test-fake", "--workloads", "gemm", env=env)
    code, stderr = _interrupt_when(process, lambda: bool(containers_of(docker_daemon, process.pid)))
    assert code == 130, stderr[-2000:]
    assert "nothing written" in stderr
    time.sleep(1)  # a start still under way in a worker thread must not create one later
    assert containers_of(docker_daemon, process.pid) == []


def test_an_agent_added_from_files_only_builds_and_runs(
    docker_daemon: docker.DockerClient, fake_manifests: Path, tmp_path: Path
) -> None:
    env = {"FWBENCH_MANIFEST_PATH": str(fake_manifests)}
    built = collector("images", "build", "test-fake", tmp=tmp_path, env=env)
    assert built.returncode == 0, built.stderr[-2000:]
    assert "fwbench/test-fake:latest" in built.stdout
    out = tmp_path / "run"
    done = collector(
        *("run", "--launcher", "docker", "--agents", "test-fake", "--workloads", "gemm,lenet"),
        *("--phases", "infer", "--batch-sizes", "1", "--iterations", "3"),
        *("--min-seconds", "0", "--out", str(out)),
        tmp=tmp_path,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = pd.read_parquet(out / "results.parquet")
    assert sorted(zip(rows.workload, rows["mode"], rows.status, strict=True)) == [
        ("gemm", "eager", "ok"),
        ("lenet", "eager", "ok"),
    ]
    assert set(rows.image) == {"fwbench/test-fake:latest"} and set(rows.launcher) == {"docker"}


WRITE_PT2 = """
import sys
import torch
from torch import nn
torch.manual_seed(0)
net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(144, 5))
batch = torch.export.Dim("batch", min=1, max=64)
program = torch.export.export(net.eval(), (torch.zeros(2, 3, 8, 8),), dynamic_shapes=({0: batch},))
torch.export.save(program, sys.argv[1])
"""


@pytest.mark.agent
def test_a_model_file_is_mounted_read_only_and_gives_the_local_rows(
    docker_daemon: docker.DockerClient, real_images: str, tmp_path: Path
) -> None:
    """The user's .pt2 reaches the container at its own path, read-only, not copied into an
    image: the same rows as the local agent's, from the image built before the run."""
    from fwbench.collector.agents.environments import environment_for
    from fwbench.collector.cli.common import load_manifests

    python = environment_for(load_manifests(None)[REAL]).python
    model = tmp_path / "net.pt2"
    subprocess.run([str(python), "-c", WRITE_PT2, str(model)], check=True, timeout=300)
    image = docker_daemon.images.get(f"fwbench/{REAL}:latest").id
    tables = {}
    for launcher in ("local", "docker"):
        out = tmp_path / launcher
        done = collector(
            *("run", "--launcher", launcher, "--agents", REAL, "--model", str(model)),
            *("--batch-sizes", "1,4", "--min-seconds", "0.1", "--out", str(out)),
            tmp=tmp_path,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        tables[launcher] = pd.read_parquet(out / "results.parquet")
    model_columns = ["workload", "batch_size", "status", "model_format", "model_sha256"]
    local, inside = tables["local"], tables["docker"]
    pd.testing.assert_frame_equal(local[model_columns], inside[model_columns])
    assert local["outputs_match"].all() and inside["outputs_match"].all()
    assert set(inside["image_id"]) == {image}  # no image made for the model
    assert not docker_daemon.containers.list(
        all=True, ignore_removed=True, filters={"label": "fwbench.run_id"}
    )


@pytest.mark.full
@pytest.mark.agent
def test_an_export_made_in_a_container_runs_in_another(
    docker_daemon: docker.DockerClient, real_images: str, tmp_path: Path
) -> None:
    """--export through the Docker launcher: torch-cpu's container writes the ONNX export
    into the run folder's models/, mounted writable, and onnxruntime-cpu's container reads it
    there (read-only), its outputs checked against torch-cpu's."""
    from fwbench.collector.agents.environments import environment_for
    from fwbench.collector.cli.common import load_manifests

    build_image("onnxruntime-cpu", tmp_path / "build")
    python = environment_for(load_manifests(None)[REAL]).python
    model = tmp_path / "net.pt2"
    subprocess.run([str(python), "-c", WRITE_PT2, str(model)], check=True, timeout=300)
    out = tmp_path / "run"
    done = collector(
        *("run", "--launcher", "docker", "--agents", f"{REAL},onnxruntime-cpu"),
        *("--model", str(model), "--export", "--batch-sizes", "1,4"),
        *("--min-seconds", "0.1", "--out", str(out)),
        tmp=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = pd.read_parquet(out / "results.parquet")
    assert set(rows["status"]) == {"ok"} and rows["outputs_match"].all()
    onnx = rows[rows["agent"] == "onnxruntime-cpu"]
    assert set(onnx["model_format"]) == {"onnx"} and (out / "models" / "net.onnx").is_file()
    assert onnx["model_export"].str.startswith(f"{REAL}: torch.onnx.export").all()
    assert not docker_daemon.containers.list(
        all=True, ignore_removed=True, filters={"label": "fwbench.run_id"}
    )


def _port_free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


def _a_model_file_is_sent_to_the_attached_container_once(tmp_path: Path) -> None:
    """The fleet's agent does not see this host's files: --model sends it the .pt2
    (UploadModel, protocol 1.9), which it keeps by digest, so a second run sends nothing; both
    runs measure it and charge its FLOPs as a local agent would."""
    from fwbench.collector.agents.environments import environment_for
    from fwbench.collector.cli.common import load_manifests

    python = environment_for(load_manifests(None)[REAL]).python
    model = tmp_path / "net.pt2"
    subprocess.run([str(python), "-c", WRITE_PT2, str(model)], check=True, timeout=300)
    for said in ("received", "held it already"):
        out = tmp_path / f"model-{said[:4]}"
        done = collector(
            *("run", "--agents", "torch-cpu@127.0.0.1:50051", "--model", str(model)),
            *("--batch-sizes", "1,4", "--min-seconds", "0.1", "--out", str(out)),
            tmp=tmp_path,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        assert f"net.pt2 to torch-cpu, which does not see this host's files: {said}" in (
            done.stdout + done.stderr
        )
        rows = pd.read_parquet(out / "results.parquet")
        assert set(rows.status) == {"ok"} and rows.outputs_match.all()
        assert rows.flops_counter.str.startswith("torch-cpu: torch.utils.flop_counter").all()


def test_the_collector_attaches_to_a_compose_fleet(real_images: str, tmp_path: Path) -> None:
    assert _port_free(50051) and _port_free(9101), (
        "ports 50051/9101 are taken (a fleet already runs here?): stop it to run this test"
    )
    compose = [str(BIN / "docker-compose"), "-p", f"fwbench-test-{os.getpid()}"]
    compose += ["-f", str(COMPOSE_DIR / "compose.yaml")]
    up = subprocess.run(
        [*compose, "up", "-d", "--wait", "torch-cpu"], capture_output=True, text=True, timeout=300
    )
    try:
        assert up.returncode == 0, up.stderr[-2000:]
        out = tmp_path / "run"
        done = collector(
            *("run", "--agents", "torch-cpu@127.0.0.1:50051", "--workloads", "gemm"),
            *("--phases", "infer", "--batch-sizes", "1", "--param", "m=256"),
            *("--iterations", "3", "--min-seconds", "0", "--out", str(out)),
            tmp=tmp_path,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        rows = pd.read_parquet(out / "results.parquet")
        assert list(rows.status) == ["ok"] and list(rows.launcher) == ["attached"]
        assert rows.in_container.all()
        _a_model_file_is_sent_to_the_attached_container_once(tmp_path)
    finally:
        subprocess.run([*compose, "down"], capture_output=True, timeout=120)
