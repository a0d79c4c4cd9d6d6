"""The torch-deb images (images/torch-deb): Debian 12's PyTorch 1.13 on four BLAS libraries,
built as `make images-deb` builds them, declared by labels only, started by hand and attached
to (`collector run --agents NAME@HOST:PORT`). Each row must name the BLAS its image selected,
as the agent found it loaded; an image asked for another BLAS must refuse to start; the plugin
must run every model on torch 1.13 and offer no torch.compile there, and run a program traced
into TorchScript (its torch reads no .pt2)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import docker
import pandas as pd
import pytest
from docker.models.containers import Container
from docker.models.images import Image

# Building the four images (Debian's apt packages) and running them repeats the Docker path
# every image takes: `make test-full` does, `make test` lints their Dockerfile.
pytestmark = pytest.mark.docker

BIN = Path(sys.executable).parent
FOLDER = Path(__file__).resolve().parents[2] / "images" / "torch-deb"
# variant -> its FWBENCH_EXPECT_BLAS, and what its agent must find loaded: the threading and a
# piece of the file's path (the BLAS's name is the variant's)
EXPECTED = {
    "openblas": ("openblas-openmp", "openmp", "/openblas-openmp/libopenblasp-"),
    "blis": ("blis-openmp", "openmp", "/blis-openmp/libblas.so.3"),
    "mkl": ("mkl-gnu-openmp", "gnu-openmp", "/libmkl_rt.so"),
    "netlib": ("netlib", "serial", "/blas/libblas.so.3."),
}
TEST_LABEL = "fwbench.test-torch-deb"
GRPC_PORT = "50061/tcp"


@pytest.fixture(scope="module")
def deb_images(docker_daemon: docker.DockerClient) -> dict[str, Image]:
    """The four images, built by the same script as `make images-deb` (cached: seconds)."""
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(FOLDER / "build.py")],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    print(f"images-deb: {time.monotonic() - started:.0f} s")
    return {v: docker_daemon.images.get(f"fwbench/torch-deb-{v}:latest") for v in EXPECTED}


def test_dockerfile_passes_hadolint() -> None:
    done = subprocess.run(
        [str(BIN / "hadolint"), "--no-color", "--failure-threshold", "style", "-"],
        input=(FOLDER / "Dockerfile").read_text("utf-8"),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _env(image: Image) -> dict[str, str]:
    return dict(item.split("=", 1) for item in image.attrs["Config"]["Env"])


@pytest.mark.full
@pytest.mark.parametrize("variant", sorted(EXPECTED))
def test_each_image_declares_itself_by_labels(deb_images: dict[str, Image], variant: str) -> None:
    image = deb_images[variant]
    labels = image.labels
    manifest = json.loads(labels["fwbench.manifest"])
    name = f"torch-deb-{variant}"
    assert labels["fwbench.label-schema"] == "1"
    assert (labels["fwbench.agent"], labels["fwbench.variant"]) == (name, f"deb-{variant}")
    assert (labels["fwbench.framework"], labels["fwbench.requires-gpu"]) == ("torch", "false")
    assert labels["org.opencontainers.image.title"] == f"fwbench agent {name}"
    assert labels["org.opencontainers.image.description"] == manifest["description"]
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert labels["org.opencontainers.image.base.name"]  # what it was built on
    assert labels["org.opencontainers.image.version"] and labels["fwbench.framework-version"]
    assert {k: manifest[k] for k in ("name", "framework", "variant", "plugin")} == {
        "name": name,
        "framework": "torch",
        "variant": f"deb-{variant}",
        "plugin": "torch",
    }
    assert manifest["requires_gpu"] is False
    env = _env(image)
    assert manifest["env"]["FWBENCH_EXPECT_BLAS"] == EXPECTED[variant][0]
    assert {k: env[k] for k in manifest["env"]} == manifest["env"]  # what the image sets
    assert manifest["ports"] == {
        "grpc": int(env["FWBENCH_GRPC_PORT"]),
        "metrics": int(env["FWBENCH_METRICS_PORT"]),
    }
    assert env["FWBENCH_AGENT_NAME"] == name and image.attrs["Config"]["User"] == "10001:10001"


@pytest.mark.full
def test_the_variants_share_every_layer_but_the_last(deb_images: dict[str, Image]) -> None:
    layers = {v: image.attrs["RootFS"]["Layers"] for v, image in deb_images.items()}
    shared = {tuple(stack[:-1]) for stack in layers.values()}
    assert len(shared) == 1 and len(next(iter(shared))) > 1
    assert len({stack[-1] for stack in layers.values()}) == len(EXPECTED)


def _wait_until_serving(container: Container, deadline: float) -> None:
    while time.monotonic() < deadline:
        container.reload()
        logs = container.logs().decode(errors="replace")
        if f"fwbench-agent {container.labels[TEST_LABEL]} serving on" in logs:
            return
        assert container.status != "exited", logs[-2000:]
        time.sleep(0.5)
    pytest.fail(f"{container.name} did not start: {container.logs().decode()[-2000:]}")


@pytest.fixture(scope="module")
def agents(
    deb_images: dict[str, Image], docker_daemon: docker.DockerClient
) -> Iterator[dict[str, str]]:
    """The four agents, started by hand as a user would, each on a loopback port."""
    containers = {
        variant: docker_daemon.containers.run(
            image,
            detach=True,
            ports={GRPC_PORT: ("127.0.0.1", None)},
            labels={TEST_LABEL: f"torch-deb-{variant}"},
        )
        for variant, image in deb_images.items()
    }
    try:
        deadline = time.monotonic() + 180
        addresses = {}
        for variant, container in containers.items():
            _wait_until_serving(container, deadline)
            port = container.ports[GRPC_PORT][0]["HostPort"]
            addresses[variant] = f"127.0.0.1:{port}"
        yield addresses
    finally:
        for container in containers.values():
            container.remove(force=True)


def collector(*args: str, tmp: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "collector"), *args],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "COLUMNS": "200", "FWBENCH_STORE": str(tmp / "store.sqlite")},
    )


@pytest.mark.full
def test_every_row_names_the_blas_its_image_selected(
    agents: dict[str, str], tmp_path: Path
) -> None:
    out = tmp_path / "run"
    done = collector(
        "run",
        "--agents",
        ",".join(f"torch-deb-{v}@{address}" for v, address in agents.items()),
        *("--workloads", "gemm", "--phases", "infer", "--batch-sizes", "1"),
        *("--param", "m=64", "--param", "n=64", "--param", "k=64"),
        *("--iterations", "3", "--min-seconds", "0", "--out", str(out)),
        tmp=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = pd.read_parquet(out / "results.parquet").set_index("agent")
    assert sorted(rows.index) == sorted(f"torch-deb-{v}" for v in EXPECTED)
    for variant, (wanted, threading, where) in EXPECTED.items():
        row = rows.loc[f"torch-deb-{variant}"]
        blas = json.loads(row.libraries)["blas"]
        assert blas.startswith(f"{variant} ") and f", {threading}" in blas and where in blas, blas
        assert row.status == "ok" and row.variant == f"deb-{variant}"
        assert row.framework_version.startswith("1.13") and row.in_container
        assert json.loads(row.environment)["FWBENCH_EXPECT_BLAS"] == wanted


@pytest.mark.full
def test_torch_1_13_runs_every_model_and_offers_no_compile(
    agents: dict[str, str], tmp_path: Path
) -> None:
    attached = f"torch-deb-openblas@{agents['openblas']}"
    described = collector("describe", "--json", attached, tmp=tmp_path)
    assert described.returncode == 0, described.stderr[-2000:]
    workloads = json.loads(described.stdout)["workloads"]
    assert len(workloads) > 10 and {tuple(w["modes"]) for w in workloads} == {("eager",)}
    compile_ = collector("run", "--agents", attached, "--modes", "compile", tmp=tmp_path)
    assert compile_.returncode != 0 and "they offer: eager" in compile_.stderr
    out = tmp_path / "models"
    done = collector(
        *("run", "--agents", attached, "--phases", "infer,train", "--batch-sizes", "2"),
        *("--workloads", "conv2d,lenet,resnet18,mobilenet_v2,efficientnet_b0,lstm"),
        *("--param", "image_size=32", "--param", "seq_len=8", "--param", "height=8"),
        *("--param", "width=8", "--warmup", "1", "--iterations", "2", "--min-seconds", "0"),
        *("--out", str(out)),
        tmp=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = pd.read_parquet(out / "results.parquet")
    assert len(rows) == 12 and (rows.status == "ok").all(), rows[["workload", "status", "error"]]


@pytest.mark.full
def test_an_image_asked_for_another_blas_refuses_to_start(
    deb_images: dict[str, Image], docker_daemon: docker.DockerClient
) -> None:
    container = docker_daemon.containers.run(
        deb_images["openblas"],
        detach=True,
        environment={"FWBENCH_EXPECT_BLAS": "blis"},
        labels={TEST_LABEL: "torch-deb-openblas"},
    )
    try:
        status = container.wait(timeout=120)
        logs = container.logs().decode(errors="replace")
    finally:
        container.remove(force=True)
    assert status["StatusCode"] == 2, logs[-2000:]
    assert "FWBENCH_EXPECT_BLAS=blis but this process loaded openblas 0.3.21, openmp" in logs
    assert "refusing to start" in logs and "torch-deb-openblas serving on" not in logs


WRITE_PT2 = """
import sys
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.dense = nn.Linear(8, 10)

    def forward(self, image):
        return self.dense(torch.relu(self.conv(image)).mean((2, 3)))

torch.manual_seed(0)
batch = torch.export.Dim("batch", min=1, max=1024)
example = (torch.zeros(2, 3, 16, 16),)
program = torch.export.export(Net().eval(), example, dynamic_shapes={"image": {0: batch}})
torch.export.save(program, sys.argv[1])
"""


@pytest.mark.full
def test_torch_1_13_runs_a_program_traced_into_torchscript(
    agents: dict[str, str], tmp_path: Path
) -> None:
    """Debian's torch reads no .pt2: `--export` has torch-cpu trace it into TorchScript with
    its signature, which the attached image is sent (it does not see this host's files) and
    runs, its outputs checked against torch-cpu's at each batch size."""
    from fwbench.collector.agents.environments import environment_for
    from fwbench.collector.cli.common import load_manifests

    python = environment_for(load_manifests(None)["torch-cpu"]).python
    model = tmp_path / "net.pt2"
    subprocess.run([str(python), "-c", WRITE_PT2, str(model)], check=True, timeout=300)
    out = tmp_path / "run"
    done = collector(
        *("run", "--model", str(model), "--export", "--batch-sizes", "1,4"),
        *("--agents", f"torch-cpu,torch-deb-openblas@{agents['openblas']}"),
        *("--min-seconds", "0.1", "--out", str(out)),
        tmp=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    said = done.stdout + done.stderr
    assert "torchscript export by torch-cpu: torch.jit.trace torch" in said
    assert "net.pt to torch-deb-openblas, which does not see this host's files: received" in said
    rows = pd.read_parquet(out / "results.parquet").set_index(["agent", "batch_size"])
    assert (rows.status == "ok").all() and rows.outputs_match.all(), rows[["status", "error"]]
    deb = rows.loc["torch-deb-openblas"]
    assert set(deb.model_format) == {"torchscript"}
    assert deb.framework_version.str.startswith("1.13").all()
    assert deb.model_export.str.startswith("torch-cpu: torch.jit.trace torch").all()
