"""Image bases are pinned by registry digest when they came from a registry (the build uses
exactly the base that was checked); a locally made base keeps its tag. Against a fake daemon:
the real builds are in tests/docker."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import docker.errors

from fwbench.collector.images.build import pinned


class FakeImages:
    def __init__(self, images: dict[str, Any]) -> None:
        self.images = images

    def get(self, reference: str) -> Any:
        if reference not in self.images:
            raise docker.errors.ImageNotFound(reference)
        return self.images[reference]


def image(digests: list[str]) -> Any:
    attrs = {"RepoDigests": digests, "Config": {"Labels": {}}, "Size": 1}
    return SimpleNamespace(attrs=attrs, id="sha256:" + "0" * 64, tags=["x:1"])


def test_a_pulled_base_is_pinned_by_digest() -> None:
    digest = "python@sha256:" + "a" * 64
    client = SimpleNamespace(images=FakeImages({"python:3.11-slim": image([digest])}))
    assert pinned(client, "python:3.11-slim") == digest  # type: ignore[arg-type]


def test_a_local_base_keeps_its_tag() -> None:
    client = SimpleNamespace(images=FakeImages({"fwbench/base:bookworm": image([])}))
    assert pinned(client, "fwbench/base:bookworm") == "fwbench/base:bookworm"  # type: ignore[arg-type]
