"""Images and compose files are renderings of the manifests: they must be current, pass
hadolint and `docker compose config`, and say what the manifests say. No daemon needed."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from fwbench.collector.agents.manifest import AgentManifest, discover_manifests
from fwbench.collector.cli.images import generated_files
from fwbench.collector.images.compose import AGENTS_COMPOSE, COMPOSE_DIR
from fwbench.collector.images.dockerfile import (
    AGENT_USER_ID,
    CPU_BASE_IMAGE,
    CUDA_BASE_IMAGE,
    IMAGES_DIR,
    render,
)

BIN = Path(sys.executable).parent
SHIPPED = discover_manifests([IMAGES_DIR.parent / "agents" / "manifests"])
GPU = sorted(n for n, m in SHIPPED.items() if m.requires_gpu)
CPU = sorted(n for n, m in SHIPPED.items() if not m.requires_gpu)


def _compose(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "docker-compose"), "-f", str(COMPOSE_DIR / "compose.yaml"), *args],
        capture_output=True,
        text=True,
        check=False,
    )


def test_generated_files_are_current() -> None:
    stale = [
        str(path)
        for path, text in generated_files(SHIPPED).items()
        if not path.is_file() or path.read_text("utf-8") != text
    ]
    assert not stale, f"regenerate with `collector images generate`: {stale}"


def test_every_shipped_agent_has_an_image_folder_and_a_fleet_service() -> None:
    assert {p.name for p in IMAGES_DIR.iterdir() if (p / "Dockerfile").is_file()} >= set(SHIPPED)
    assert set(CPU) >= {"torch-cpu", "tf-mkl", "tf-eigen", "jax-cpu"}
    assert set(GPU) >= {"torch-cu12", "jax-cuda12", "tf-cuda"}


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_dockerfile_passes_hadolint(name: str) -> None:
    done = subprocess.run(
        [str(BIN / "hadolint"), "--no-color", "--failure-threshold", "style", "-"],
        input=(IMAGES_DIR / name / "Dockerfile").read_text("utf-8"),
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def _instructions(text: str) -> list[str]:
    """Dockerfile instructions with continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n\s*", " ", text)
    return [line for line in joined.splitlines() if line and not line.startswith("#")]


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_dockerfile_says_what_the_manifest_says(name: str) -> None:
    manifest = SHIPPED[name]
    lines = _instructions(render(manifest))
    base = CUDA_BASE_IMAGE if manifest.requires_gpu else CPU_BASE_IMAGE
    assert lines[0] == f"ARG BASE_IMAGE={base}"
    assert "FROM ${BASE_IMAGE} AS runtime" in lines
    env = next(line for line in lines if line.startswith("ENV FWBENCH_PLUGIN="))
    for key, value in {**manifest.env, "FWBENCH_AGENT_NAME": name}.items():
        assert f"{key}={json.dumps(value)}" in env
    assert ('NVIDIA_DRIVER_CAPABILITIES="compute,utility"' in env) == manifest.requires_gpu
    assert f"EXPOSE {manifest.grpc_port} {manifest.metrics_port}" in lines
    assert f"USER {AGENT_USER_ID}:{AGENT_USER_ID}" in lines
    assert any(
        line.startswith("HEALTHCHECK") and "fwbench.runtime.healthcheck" in line for line in lines
    )
    labels = next(line for line in lines if line.startswith("LABEL "))
    for label in (
        f'fwbench.agent="{name}"',
        f'fwbench.framework="{manifest.plugin}"',
        f'fwbench.variant="{manifest.variant}"',
        f'fwbench.framework-requirement="{manifest.requirements[0]}"',
        'org.opencontainers.image.revision="${REVISION}"',
    ):
        assert label in labels


def _stages(manifest: AgentManifest) -> str:
    text = render(manifest)
    return text[text.index("ENV PATH=") : text.index("ENV FWBENCH_PLUGIN=")]


def test_install_stages_are_the_same_for_every_agent() -> None:
    """Same instructions on the same base give the same cached layers: the runtime is built
    once per base kind and shared; the framework layer differs only by its wheels."""
    stages = {name: _stages(m) for name, m in SHIPPED.items()}
    assert len(set(stages.values())) == 1, "install stages differ between agents"
    # The manifest's switches (tf-mkl and tf-eigen differ only there) follow the last RUN.
    lines = _instructions(render(SHIPPED["tf-mkl"]))
    last_run = max(i for i, line in enumerate(lines) if line.startswith("RUN "))
    assert last_run < next(i for i, line in enumerate(lines) if "TF_ENABLE_ONEDNN_OPTS" in line)


def test_compose_files_validate() -> None:
    done = _compose("config", "--quiet")
    assert done.returncode == 0, done.stderr


def test_compose_fleet_runs_cpu_agents_by_default_and_gpu_agents_in_their_profile() -> None:
    default = set(_compose("config", "--services").stdout.split())
    assert default == {*CPU, "prometheus", "grafana"}
    with_gpu = set(_compose("--profile", "gpu", "config", "--services").stdout.split())
    assert with_gpu == {*SHIPPED, "prometheus", "grafana"}


def test_compose_agents_publish_their_manifest_ports_on_loopback() -> None:
    config = json.loads(_compose("--profile", "gpu", "config", "--format", "json").stdout)
    for name, manifest in SHIPPED.items():
        service = config["services"][name]
        assert service["image"] == f"fwbench/{name}:latest"
        assert service["pull_policy"] == "never"
        published = {(p["host_ip"], p["target"], int(p["published"])) for p in service["ports"]}
        assert published == {
            ("127.0.0.1", manifest.grpc_port, manifest.grpc_port),
            ("127.0.0.1", manifest.metrics_port, manifest.metrics_port),
        }
        gpus = service.get("deploy", {}).get("resources", {}).get("reservations", {})
        assert bool(gpus.get("devices")) == manifest.requires_gpu


def test_prometheus_targets_name_fleet_services_and_their_metrics_ports() -> None:
    metrics_ports = {name: m.metrics_port for name, m in SHIPPED.items()}
    files = sorted((COMPOSE_DIR / "prometheus" / "targets").glob("*.json"))
    assert files, "compose/prometheus/targets/*.json is missing"
    targets = [t for f in files for group in json.loads(f.read_text()) for t in group["targets"]]
    assert targets
    for target in targets:
        host, _, port = target.rpartition(":")
        assert metrics_ports.get(host) == int(port), f"{target}: no such agent service port"


def test_agents_compose_is_included_by_the_fleet() -> None:
    assert AGENTS_COMPOSE.name in (COMPOSE_DIR / "compose.yaml").read_text()
