"""The fake Kubernetes API server (fake_kube.py) for the Kubernetes launcher's tests, with the
throwaway fake agent (tests/fake_agent.py) as an image its kubelet can run (and torch-cpu for
the test that asks for it): the image `collector images build` would make for each, mapped to
the agent's local environment (built once, in FWBENCH_ENV_DIR) with the image's variables."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))  # fake_agent
sys.path.insert(0, str(Path(__file__).parent))  # fake_kube

from fake_agent import write_fake_agents
from fake_kube import FakeKube, Image, kubeconfig

from fwbench.collector.agents.environments import environment_for
from fwbench.collector.agents.manifest import (
    AgentManifest,
    discover_manifests,
    manifest_dirs,
    parse_manifest,
)
from fwbench.collector.images.build import image_tag
from fwbench.collector.images.dockerfile import agent_env


@pytest.fixture(scope="module")
def fake_manifests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_fake_agents(tmp_path_factory.mktemp("agents"), {"fake": {}})


def _image(manifest: AgentManifest) -> tuple[str, Image]:
    """The agent's image name and what a container of it runs (its ENTRYPOINT, fwbench-agent,
    from the agent's local environment, built here when missing), with the image's variables."""
    env = environment_for(manifest)
    env.ensure(print)
    return image_tag(manifest), Image(
        [str(env.python), "-P", "-m", "fwbench.runtime.cli"], agent_env(manifest)
    )


@pytest.fixture(scope="module")
def fake_image(fake_manifests: Path) -> tuple[str, Image]:
    return _image(parse_manifest(fake_manifests / "fake.toml"))


@pytest.fixture
def torch_image(kube: FakeKube) -> None:
    """The torch-cpu agent's image, runnable by the fake kubelet too."""
    kube.images.update([_image(discover_manifests(manifest_dirs())["torch-cpu"])])


@pytest.fixture
def kube(
    fake_image: tuple[str, Image], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FakeKube]:
    """A fake cluster that KUBECONFIG (this process's and its children's) points at."""
    (tmp_path / "pods").mkdir()
    server = FakeKube(dict([fake_image]), tmp_path / "pods")
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(server.url, tmp_path / "kubeconfig")))
    yield server
    server.close()
