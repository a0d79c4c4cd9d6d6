"""Agents declared by their Docker image: label schema 1 (docs/image-labels.md), the contract
that lets a third party add a framework or a variant by shipping an image, without a manifest
file in this repository. An agent image carries

    fwbench.label-schema = "1"
    fwbench.manifest     = {"name": ..., "framework": ..., "variant": ..., "description": ...,
                            "plugin": ... (optional), "requires_gpu": false, "env": {...},
                            "ports": {"grpc": 50051, "metrics": 9101}}   (compact JSON)

The repository's own images carry the same two labels, generated from their manifests
(images/dockerfile.py). Reading is strict: a missing label, a missing key, a wrong type or an
unknown schema version is an ImageLabelError naming the image and the label; keys a reader
does not know are ignored (the compatibility rule in the doc)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fwbench.collector.agents.docker_engine import ImageInfo, docker_client, docker_errors
from fwbench.collector.agents.manifest import NAME_PATTERN, AgentManifest, ManifestError
from fwbench.collector.agents.specs import AgentSpecError, image_reference

if TYPE_CHECKING:
    import docker

SCHEMA_LABEL = "fwbench.label-schema"
MANIFEST_LABEL = "fwbench.manifest"
LABEL_SCHEMA_VERSION = "1"
DOC = "docs/image-labels.md"
_PORT_MAX = 65535


class ImageLabelError(ManifestError):
    """An image whose fwbench labels cannot declare an agent; the message names the image and
    the label (and the key)."""


def manifest_label(manifest: AgentManifest) -> str:
    """The fwbench.manifest label of an agent declared by a manifest file (compact JSON)."""
    value = {
        "name": manifest.name,
        "framework": manifest.framework or manifest.plugin,
        "variant": manifest.variant,
        "description": manifest.description,
        "plugin": manifest.plugin,
        "requires_gpu": manifest.requires_gpu,
        "env": dict(manifest.env),
        "ports": {"grpc": manifest.grpc_port, "metrics": manifest.metrics_port},
    }
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def schema_labels(manifest: AgentManifest) -> dict[str, str]:
    """Both labels of schema 1 for an agent declared by a manifest file."""
    return {SCHEMA_LABEL: LABEL_SCHEMA_VERSION, MANIFEST_LABEL: manifest_label(manifest)}


def _key(raw: Mapping[str, Any], key: str, kinds: tuple[type, ...], where: str) -> Any:
    if key not in raw:
        raise ImageLabelError(f"{where}: missing key {key!r} ({DOC})")
    value = raw[key]
    # bool is an int in Python; the label's JSON keeps them apart.
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        kind = " or ".join(
            {"str": "a string", "bool": "true or false", "int": "an integer", "dict": "an object"}[
                k.__name__
            ]
            for k in kinds
        )
        raise ImageLabelError(f"{where}: key {key!r} must be {kind}, not {json.dumps(value)}")
    return value


def _port(raw: Mapping[str, Any], key: str, where: str, least: int) -> int:
    port = int(_key(raw, key, (int,), where))
    if not least <= port <= _PORT_MAX:
        raise ImageLabelError(f"{where}: key 'ports.{key}' is {port}, not {least}-{_PORT_MAX}")
    return port


def manifest_of(image: ImageInfo, reference: str = "") -> AgentManifest:
    """The agent an image's labels declare; raises ImageLabelError."""
    where = f"image {reference or image.tag or image.id}"
    labels = image.labels
    missing = [label for label in (SCHEMA_LABEL, MANIFEST_LABEL) if label not in labels]
    if missing:
        older = labels.get("fwbench.agent")  # made by a collector before schema 1
        hint = f"; `collector images build {older} --force` relabels it" if older else ""
        raise ImageLabelError(
            f"{where} is not an fwbench agent image: it has no label "
            f"{' and no label '.join(missing)} (an agent image declares itself with "
            f"{SCHEMA_LABEL} and {MANIFEST_LABEL}: {DOC}){hint}"
        )
    if labels[SCHEMA_LABEL] != LABEL_SCHEMA_VERSION:
        raise ImageLabelError(
            f"{where}: label {SCHEMA_LABEL} is {labels[SCHEMA_LABEL]!r}; this collector reads "
            f"schema {LABEL_SCHEMA_VERSION} ({DOC})"
        )
    where = f"{where}: label {MANIFEST_LABEL}"
    try:
        raw = json.loads(labels[MANIFEST_LABEL])
    except json.JSONDecodeError as error:
        raise ImageLabelError(f"{where} is not JSON ({error})") from None
    if not isinstance(raw, dict):
        raise ImageLabelError(f"{where} must be a JSON object, not {type(raw).__name__}")
    name = _key(raw, "name", (str,), where)
    if not NAME_PATTERN.match(name):
        raise ImageLabelError(f"{where}: name {name!r} must match {NAME_PATTERN.pattern}")
    env = _key(raw, "env", (dict,), where)
    bad = [k for k, v in env.items() if not isinstance(v, str)]
    if bad:
        raise ImageLabelError(f"{where}: key 'env' must map names to strings ({bad[0]!r} does not)")
    ports = _key(raw, "ports", (dict,), where)
    plugin = _key(raw, "plugin", (str,), where) if "plugin" in raw else ""
    return AgentManifest(
        name=name,
        plugin=plugin,
        framework=_key(raw, "framework", (str,), where),
        variant=_key(raw, "variant", (str,), where),
        description=_key(raw, "description", (str,), where),
        path=Path(),
        requirements=(),
        pip_args=(),
        local_packages=(),
        env=dict(env),
        grpc_port=_port(ports, "grpc", where, 1),
        metrics_port=_port(ports, "metrics", where, 0) if "metrics" in ports else 0,
        requires_gpu=_key(raw, "requires_gpu", (bool,), where),
        image=image,
    )


def find_image(client: docker.DockerClient, reference: str) -> ImageInfo:
    """The image as the local engine has it; raises AgentSpecError when it has none (the
    collector never builds or pulls an image that declares itself)."""
    try:
        image = client.images.get(reference)
    except docker_errors().ImageNotFound:
        raise AgentSpecError(
            f"image {reference} is not in the local Docker engine; the collector runs agent "
            "images as they are and never builds or pulls them: `docker build` or `docker pull` "
            "it first (`docker image ls` lists what is here)"
        ) from None
    except docker_errors().APIError as error:
        raise AgentSpecError(f"image {reference}: {error.explanation or error}") from None
    tag = "" if reference.startswith("sha256:") or "@" in reference else reference
    return ImageInfo.of(image, tag)


def image_agents(
    tokens: Sequence[str], declared: Mapping[str, AgentManifest]
) -> dict[str, AgentManifest]:
    """The agents the image references among `tokens` (--agents, --aa) declare, by token;
    the engine is asked only when there is one. Raises AgentSpecError or ImageLabelError;
    two images declaring one name, or an image declaring the name of a manifest file's agent
    also given by name, are refused (their rows would carry one name). The name of an
    image's agent given as such (--aa NAME) is that agent."""
    references = [t for t in dict.fromkeys(tokens) if image_reference(t, declared) is not None]
    if not references:
        return {}
    found: dict[str, AgentManifest] = {}
    with closing(docker_client()) as client:
        for token in references:
            reference = image_reference(token, declared) or token
            found[token] = manifest_of(find_image(client, reference), reference)
    by_name: dict[str, str] = {}
    for token, manifest in found.items():
        assert manifest.image is not None
        earlier = by_name.setdefault(manifest.name, token)
        other = found[earlier].image
        if earlier != token and other is not None and other.id != manifest.image.id:
            raise AgentSpecError(
                f"images {earlier} and {token} both declare agent {manifest.name!r}; "
                "measure them in two runs"
            )
        if manifest.name in tokens and manifest.name in declared:
            raise AgentSpecError(
                f"image {token} declares agent {manifest.name!r}, also given by name "
                f"({declared[manifest.name].path}): measure them in two runs"
            )
    return found


def images_by_id(ids: Sequence[str]) -> dict[str, AgentManifest]:
    """The agents these images declare (a resumed run's, by image id), by agent name."""
    if not ids:
        return {}
    with closing(docker_client()) as client:
        manifests = [manifest_of(find_image(client, image_id), image_id) for image_id in ids]
    return {manifest.name: manifest for manifest in manifests}


def with_image_agents(
    agents: Sequence[str], aa: Sequence[str], declared: Mapping[str, AgentManifest], docker: bool
) -> tuple[list[str], list[str], dict[str, AgentManifest]]:
    """--agents and --aa with each image reference replaced by the name its image declares,
    and the declared agents with those images' agents added (for this run, an image's agent
    stands in for a manifest file of the same name). Image references need the Docker
    launcher (`docker`); raises AgentSpecError or ImageLabelError."""
    tokens = [*agents, *aa]
    if not docker:
        given = [t for t in tokens if image_reference(t, declared) is not None]
        if given:
            raise AgentSpecError(
                f"{given[0]} is an image reference: agents declared by their image run in "
                "containers, with --launcher docker"
            )
    found = image_agents(tokens, declared)
    everything = {**declared, **{manifest.name: manifest for manifest in found.values()}}

    def named(specs: Sequence[str]) -> list[str]:
        return [found[spec].name if spec in found else spec for spec in specs]

    return named(agents), named(aa), everything
