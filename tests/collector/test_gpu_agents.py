"""GPU agents are refused up front on a host without an NVIDIA driver, before their
environment (gigabytes of CUDA wheels) is installed."""

from __future__ import annotations

import pytest

from fwbench.collector.agents import host, specs
from fwbench.collector.agents.manifest import discover_manifests, manifest_dirs
from fwbench.collector.agents.specs import AgentSpecError

MANIFESTS = discover_manifests(manifest_dirs())
GPU_AGENTS = sorted(name for name, m in MANIFESTS.items() if m.requires_gpu)


def test_every_cuda_manifest_is_marked_as_needing_a_gpu() -> None:
    assert GPU_AGENTS, "the project ships GPU agents"
    for name, manifest in MANIFESTS.items():
        cuda = manifest.env.get("FWBENCH_DEVICE") == "cuda"
        assert manifest.requires_gpu == cuda, name


@pytest.mark.parametrize("agent", GPU_AGENTS)
def test_gpu_agent_without_driver_is_a_selection_error(
    monkeypatch: pytest.MonkeyPatch, agent: str
) -> None:
    monkeypatch.setattr(host, "nvidia_gpu_present", lambda: False)
    with pytest.raises(AgentSpecError, match=f"agent {agent} needs an NVIDIA GPU") as caught:
        specs.resolve_agents([specs.Instance("torch-cpu"), specs.Instance(agent)], MANIFESTS)
    assert "CPU agents: " in str(caught.value) and "jax-cpu" in str(caught.value)


def test_gpu_agent_with_driver_and_cpu_agents_anywhere_are_accepted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(host, "nvidia_gpu_present", lambda: True)
    specs.resolve_agents([specs.Instance(name) for name in GPU_AGENTS], MANIFESTS)
    monkeypatch.setattr(host, "nvidia_gpu_present", lambda: False)
    cpu = [specs.Instance(n) for n, m in MANIFESTS.items() if not m.requires_gpu]
    specs.resolve_agents(cpu, MANIFESTS)
    attached = specs.Instance.from_spec("tf-cuda@10.0.0.5:50055")
    specs.resolve_agents([attached], MANIFESTS)  # attached: its host's business
