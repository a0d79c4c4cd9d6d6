"""Image bases are pinned by registry digest when they came from a registry (the build uses
exactly the base that was checked); a locally made base keeps its tag. A collector command
looks for its base once: each --repeat round starts its agents again, and used to inspect the
base, and try to pull python:3.11-slim-bookworm, again each time. Against a fake daemon that
counts what it is asked: the real builds are in tests/docker."""

from __future__ import annotations

import threading
from collections import Counter
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import docker.errors
import pytest

from fwbench.collector.agents.manifest import AgentManifest
from fwbench.collector.images.build import (
    BASE_IMAGE_VARIABLE,
    LOCAL_BASE_IMAGE,
    ImageBuildError,
    resolve_base,
)
from fwbench.collector.images.dockerfile import CPU_BASE_IMAGE, CUDA_BASE_IMAGE

FALLBACK = (
    f"no registry gives {CPU_BASE_IMAGE} here: building on the local base {LOCAL_BASE_IMAGE} "
    "(`collector images base`) instead"
)


class FakeImages:
    """The images API of a daemon holding `images`; pulls fail unless `registry` has them."""

    def __init__(self, images: dict[str, Any], registry: dict[str, Any] | None = None) -> None:
        self.images, self.registry = images, registry or {}
        self.calls: Counter[tuple[str, str]] = Counter()

    def get(self, reference: str) -> Any:
        self.calls["get", reference] += 1
        if reference not in self.images:
            raise docker.errors.ImageNotFound(reference)
        return self.images[reference]

    def pull(self, reference: str) -> Any:
        self.calls["pull", reference] += 1
        if reference not in self.registry:
            raise docker.errors.APIError(f"pull access denied for {reference}")
        self.images[reference] = self.registry[reference]
        return self.images[reference]


class FakeClient:  # a class, not a SimpleNamespace: the answers are kept per client (weakly)
    def __init__(self, images: FakeImages) -> None:
        self.images = images


def image(digests: list[str], number: int = 0) -> Any:
    attrs = {"RepoDigests": digests, "Config": {"Labels": {}}, "Size": 1}
    return SimpleNamespace(attrs=attrs, id=f"sha256:{number:064x}", tags=["x:1"])


def manifest(requires_gpu: bool = False) -> AgentManifest:
    return AgentManifest(
        "numpy-cpu",
        "numpy",
        "cpu",
        "",
        Path("numpy-cpu.toml"),
        (),
        (),
        (),
        requires_gpu=requires_gpu,
    )


def base(client: FakeClient, gpu: bool = False, report: Any = print) -> str:
    """The base an agent's image is built on, as ensure_image asks for it."""
    return resolve_base(client, manifest(gpu), report)  # type: ignore[arg-type]


@pytest.fixture(autouse=True)
def default_base(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BASE_IMAGE_VARIABLE, raising=False)


def test_a_pulled_base_is_pinned_by_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    digest = "python@sha256:" + "a" * 64
    monkeypatch.setenv(BASE_IMAGE_VARIABLE, "python:3.11-slim")
    client = FakeClient(FakeImages({"python:3.11-slim": image([digest])}))
    assert base(client) == digest


def test_a_local_base_keeps_its_tag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(BASE_IMAGE_VARIABLE, LOCAL_BASE_IMAGE)
    client = FakeClient(FakeImages({LOCAL_BASE_IMAGE: image([])}))
    assert base(client) == LOCAL_BASE_IMAGE


def test_a_base_that_cannot_be_pulled_is_tried_once_per_command() -> None:
    """No registry, the local Debian base here: three rounds of two agents each start on it,
    after one inspection and one pull of python:3.11-slim-bookworm; a command of its own (a
    new client) asks again."""
    images = FakeImages({LOCAL_BASE_IMAGE: image([], 7)})
    client, said = FakeClient(images), list[str]()
    for _ in range(3):  # --repeat 3: the agents start again each round
        threads = [
            threading.Thread(target=lambda: said.append(base(client, report=said.append)))
            for _ in range(2)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert said.count(LOCAL_BASE_IMAGE) == 6
    assert said.count(f"pulling the base image {CPU_BASE_IMAGE}") == 1
    assert said.count(FALLBACK) == 1
    assert images.calls["pull", CPU_BASE_IMAGE] == 1
    assert images.calls["get", CPU_BASE_IMAGE] == 1 and images.calls["get", LOCAL_BASE_IMAGE] == 1
    base(FakeClient(images), report=said.append)
    assert images.calls["pull", CPU_BASE_IMAGE] == 2


def test_a_pulled_base_is_inspected_once_and_kept_apart_from_the_gpu_base() -> None:
    digest = "python@sha256:" + "b" * 64
    images = FakeImages({}, registry={CPU_BASE_IMAGE: image([digest], 1)})
    client = FakeClient(images)
    for _ in range(3):
        assert base(client) == digest
    assert images.calls["pull", CPU_BASE_IMAGE] == 1
    assert images.calls["get", CPU_BASE_IMAGE] == 2  # before the pull, and after it
    # A GPU agent's base is another question: no registry has it, and no fallback serves it.
    for _ in range(2):
        with pytest.raises(ImageBuildError, match="cannot be pulled"):
            base(client, gpu=True)
    assert images.calls["pull", CUDA_BASE_IMAGE] == 1  # the answer, an error, is kept too
