"""A command whose agent image is current pulls nothing and says nothing of bases: on a host
without a registry, every Docker-launcher command used to say "pulling python:3.11-slim-
bookworm" and "cannot pull ..." though nothing was built. Only a build (an image missing or
stale) looks for its base in a registry, and says what it does instead where none answers.
Against the fake daemon of test_image_base.py, with the build itself faked (it needs a real
daemon and the docker CLI: tests/docker)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from fwbench.collector.agents.docker_engine import ImageInfo
from fwbench.collector.images import build
from fwbench.collector.images.build import (
    BASE_IMAGE_VARIABLE,
    BUILD_KEY_LABEL,
    LOCAL_BASE_IMAGE,
    build_key,
    ensure_image,
    image_tag,
)
from fwbench.collector.images.dockerfile import CPU_BASE_IMAGE
from fwbench.collector.images.wheelhouse import WHEELHOUSE_VARIABLE

from .test_image_base import FALLBACK, FakeClient, FakeImages, image, manifest

AGENT = manifest()
TAG = image_tag(AGENT)
LOCAL = image([], 7)
PULLABLE = image(["python@sha256:" + "c" * 64], 8)


def agent_image(key: str) -> Any:
    labels = {BUILD_KEY_LABEL: key}
    return SimpleNamespace(
        attrs={"Config": {"Labels": labels}}, id="sha256:" + "e" * 64, tags=[TAG]
    )


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[tuple[str, str]]:
    """The builds asked for, (base, build key) each, none run."""
    monkeypatch.delenv(BASE_IMAGE_VARIABLE, raising=False)
    monkeypatch.setenv(WHEELHOUSE_VARIABLE, str(tmp_path / "wheelhouse"))
    asked: list[tuple[str, str]] = []

    def fake_build(client: Any, manifest: Any, base: str, key: str, report: Any) -> ImageInfo:
        asked.append((base, key))
        return ImageInfo.of(agent_image(key), TAG)

    monkeypatch.setattr(build, "_build", fake_build)
    return asked


@pytest.mark.parametrize(
    ("images", "registry", "base"),
    [
        ({LOCAL_BASE_IMAGE: LOCAL}, {}, (LOCAL_BASE_IMAGE, LOCAL.id)),  # no registry
        ({CPU_BASE_IMAGE: PULLABLE}, {}, (PULLABLE.attrs["RepoDigests"][0], PULLABLE.id)),
    ],
)
def test_a_current_image_pulls_nothing_and_says_nothing(
    built: list[tuple[str, str]], images: dict[str, Any], registry: dict[str, Any], base: Any
) -> None:
    daemon = FakeImages({**images, TAG: agent_image(build_key(AGENT, *base))}, registry)
    client, said = FakeClient(daemon), list[str]()
    for _ in range(3):  # --repeat 3: the agents start again each round
        assert ensure_image(client, AGENT, said.append).tag == TAG  # type: ignore[arg-type]
    assert said == [] and built == []
    assert not [call for call in daemon.calls if call[0] == "pull"]
    assert daemon.calls["get", TAG] == 3 and daemon.calls["get", LOCAL_BASE_IMAGE] <= 1


@pytest.mark.parametrize("image_here", ["missing", "stale"])
def test_a_build_without_a_registry_says_it_builds_on_the_local_base(
    built: list[tuple[str, str]], image_here: str
) -> None:
    images = {LOCAL_BASE_IMAGE: LOCAL}
    if image_here == "stale":
        images[TAG] = agent_image("an older key")
    client, said = FakeClient(FakeImages(images)), list[str]()
    ensure_image(client, AGENT, said.append)  # type: ignore[arg-type]
    assert said == [
        f"pulling the base image {CPU_BASE_IMAGE}",
        FALLBACK,
        f"building image {TAG} on {LOCAL_BASE_IMAGE}",
    ]
    assert built == [(LOCAL_BASE_IMAGE, build_key(AGENT, LOCAL_BASE_IMAGE, LOCAL.id))]


def test_a_build_pulls_its_base_where_a_registry_has_it(built: list[tuple[str, str]]) -> None:
    daemon = FakeImages({}, registry={CPU_BASE_IMAGE: PULLABLE})
    said = list[str]()
    ensure_image(FakeClient(daemon), AGENT, said.append)  # type: ignore[arg-type]
    digest = PULLABLE.attrs["RepoDigests"][0]
    assert said == [f"pulling the base image {CPU_BASE_IMAGE}", f"building image {TAG} on {digest}"]
    assert daemon.calls["pull", CPU_BASE_IMAGE] == 1
