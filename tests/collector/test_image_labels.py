"""Label schema 1 (docs/image-labels.md): what the repository's images carry, read back the
same; strict reading (one clear error naming the image, the label and the key); how an
--agents token is told to be an image reference; the identity check of image agents. No
Docker daemon needed (tests/docker/test_image_agents.py runs real images)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.agents.client import AgentClient
from fwbench.collector.agents.docker_engine import ImageInfo
from fwbench.collector.agents.image_labels import (
    MANIFEST_LABEL,
    SCHEMA_LABEL,
    ImageLabelError,
    manifest_label,
    manifest_of,
    with_image_agents,
)
from fwbench.collector.agents.manifest import discover_manifests
from fwbench.collector.agents.specs import AgentSpecError, Instance, image_reference
from fwbench.collector.cli import app
from fwbench.collector.cli.common import ExitCode
from fwbench.collector.images.dockerfile import IMAGES_DIR
from fwbench.collector.launchers import LauncherKind
from fwbench.collector.launchers.docker import ContainerAgent
from fwbench.collector.run.launch import check_identity
from fwbench.collector.run.options import Launch, RunOptions, options_from_record, options_record

REPO = Path(__file__).resolve().parents[2]
SHIPPED = discover_manifests([REPO / "agents" / "manifests"])
EXAMPLE = REPO / "agents" / "examples" / "numpy-gemm" / "Dockerfile"
GOOD = {
    "name": "numpy-gemm",
    "framework": "numpy",
    "variant": "example",
    "description": "d",
    "requires_gpu": False,
    "env": {"NUMPY_GEMM_CHECK": "1"},
    "ports": {"grpc": 50070, "metrics": 0},
}


def _image(labels: dict[str, str], tag: str = "example/numpy-gemm:1.0") -> ImageInfo:
    return ImageInfo(tag=tag, id="sha256:" + "ab" * 32, digest="", labels=labels, size_bytes=1)


def _labelled(manifest: Any, schema: str = "1") -> ImageInfo:
    text = manifest if isinstance(manifest, str) else json.dumps(manifest)
    return _image({SCHEMA_LABEL: schema, MANIFEST_LABEL: text})


def _dockerfile_labels(text: str) -> dict[str, str]:
    """The LABEL pairs of a Dockerfile whose values are JSON strings or single-quoted."""
    joined = re.sub(r"\\\n\s*", " ", text)
    line = next(line for line in joined.splitlines() if line.startswith("LABEL "))
    pairs = re.findall(r"""([\w.-]+)=("(?:[^"\\]|\\.)*"|'[^']*')""", line)
    return {key: json.loads(v) if v[0] == '"' else v[1:-1] for key, v in pairs}


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_every_shipped_image_declares_its_manifest_in_schema_1(name: str) -> None:
    manifest = SHIPPED[name]
    labels = _dockerfile_labels((IMAGES_DIR / name / "Dockerfile").read_text("utf-8"))
    assert labels[SCHEMA_LABEL] == "1"
    assert labels[MANIFEST_LABEL] == manifest_label(manifest)
    read = manifest_of(_image(labels))
    assert (read.name, read.framework, read.plugin, read.variant) == (
        name,
        manifest.plugin,
        manifest.plugin,
        manifest.variant,
    )
    assert (read.grpc_port, read.metrics_port) == (manifest.grpc_port, manifest.metrics_port)
    assert read.requires_gpu == manifest.requires_gpu and dict(read.env) == dict(manifest.env)
    assert read.source == "image" and manifest.source == "manifest"


def test_the_example_image_declares_a_valid_agent() -> None:
    labels = _dockerfile_labels(EXAMPLE.read_text("utf-8"))
    read = manifest_of(_image(labels))
    assert (read.name, read.framework, read.plugin) == ("numpy-gemm", "numpy", "")
    assert (read.grpc_port, read.metrics_port) == (50070, 0)
    assert dict(read.env) == {"NUMPY_GEMM_CHECK": "1"}


def test_optional_keys_and_unknown_keys() -> None:
    manifest = {k: v for k, v in GOOD.items() if k != "ports"}
    read = manifest_of(_labelled({**manifest, "ports": {"grpc": 1}, "x-vendor": {"a": 1}}))
    assert read.metrics_port == 0 and read.plugin == ""  # absent: no /metrics, no plugin
    assert manifest_of(_labelled({**GOOD, "plugin": "mine"})).plugin == "mine"


@pytest.mark.parametrize(
    ("labels", "says"),
    [
        ({}, "has no label fwbench.label-schema and no label fwbench.manifest"),
        ({SCHEMA_LABEL: "1"}, "has no label fwbench.manifest"),
        ({"fwbench.agent": "tf-mkl"}, "`collector images build tf-mkl --force` relabels it"),
        ({SCHEMA_LABEL: "2", MANIFEST_LABEL: json.dumps(GOOD)}, "fwbench.label-schema is '2'"),
        ({SCHEMA_LABEL: "1", MANIFEST_LABEL: "{name"}, "fwbench.manifest is not JSON"),
        ({SCHEMA_LABEL: "1", MANIFEST_LABEL: "[]"}, "must be a JSON object, not list"),
    ],
)
def test_missing_labels_and_unknown_schemas_are_refused(labels: dict[str, str], says: str) -> None:
    with pytest.raises(ImageLabelError, match=re.escape(says)) as error:
        manifest_of(_image(labels))
    assert str(error.value).startswith("image example/numpy-gemm:1.0")
    assert "\n" not in str(error.value)


@pytest.mark.parametrize(
    ("change", "says"),
    [
        ({"name": None}, "missing key 'name'"),
        ({"framework": None}, "missing key 'framework'"),
        ({"requires_gpu": None}, "missing key 'requires_gpu'"),
        ({"ports": None}, "missing key 'ports'"),
        ({"name": "Numpy Gemm"}, "name 'Numpy Gemm' must match"),
        ({"variant": 3}, "key 'variant' must be a string, not 3"),
        ({"requires_gpu": "false"}, "key 'requires_gpu' must be true or false"),
        ({"env": {"A": 1}}, "key 'env' must map names to strings ('A' does not)"),
        ({"env": []}, "key 'env' must be an object"),
        ({"ports": {"metrics": 9}}, "missing key 'grpc'"),
        ({"ports": {"grpc": "50070"}}, "key 'grpc' must be an integer"),
        ({"ports": {"grpc": True}}, "key 'grpc' must be an integer, not true"),
        ({"ports": {"grpc": 0}}, "'ports.grpc' is 0, not 1-65535"),
        ({"ports": {"grpc": 1, "metrics": 70000}}, "'ports.metrics' is 70000, not 0-65535"),
        ({"plugin": 1}, "key 'plugin' must be a string"),
    ],
)
def test_bad_manifest_labels_name_the_label_and_key(change: dict[str, Any], says: str) -> None:
    manifest = {**GOOD, **change}
    manifest = {k: v for k, v in manifest.items() if v is not None}
    with pytest.raises(ImageLabelError, match=re.escape(says)) as error:
        manifest_of(_labelled(manifest))
    assert str(error.value).startswith("image example/numpy-gemm:1.0: label fwbench.manifest")


@pytest.mark.parametrize(
    ("spec", "image"),
    [
        ("torch-cpu", None),  # a declared name
        ("torch-cpu@10.0.0.5:50051", None),  # attached
        ("nope", None),  # an unknown name, refused as such later
        ("example/numpy-gemm:1.0", "example/numpy-gemm:1.0"),
        ("example/numpy-gemm", "example/numpy-gemm"),
        ("numpy-gemm:1.0", "numpy-gemm:1.0"),
        ("localhost:5000/x/y:2", "localhost:5000/x/y:2"),
        ("sha256:" + "0" * 64, "sha256:" + "0" * 64),
        ("x@sha256:" + "0" * 64, "x@sha256:" + "0" * 64),
        ("example/x@sha256:" + "0" * 64, "example/x@sha256:" + "0" * 64),
        ("image:numpy-gemm", "numpy-gemm"),  # the explicit form: any reference
        ("image:torch-cpu", "torch-cpu"),
    ],
)
def test_which_agent_specs_are_image_references(spec: str, image: str | None) -> None:
    assert image_reference(spec, SHIPPED) == image


def test_image_references_need_the_docker_launcher_and_nothing_asks_docker_before() -> None:
    with pytest.raises(AgentSpecError, match="with --launcher docker"):
        with_image_agents(["torch-cpu", "example/numpy-gemm:1.0"], [], SHIPPED, docker=False)
    # No image reference: the declared agents as they are, Docker never asked.
    assert with_image_agents(["torch-cpu"], ["tf-mkl"], SHIPPED, docker=False) == (
        ["torch-cpu"],
        ["tf-mkl"],
        dict(SHIPPED),
    )


def _describe(name: str) -> agent_pb2.DescribeResponse:
    return agent_pb2.DescribeResponse(
        identity=agent_pb2.AgentIdentity(name=name, framework="numpy", variant="example")
    )


def test_an_image_agent_must_call_itself_what_its_label_says() -> None:
    declared = manifest_of(_labelled(GOOD))
    client = AgentClient("numpy-gemm", "127.0.0.1:1")
    handle = ContainerAgent(Instance("numpy-gemm"), "127.0.0.1:1", client, manifest=declared)
    try:
        check_identity(handle, _describe("numpy-gemm"))
        handle.instance = Instance("numpy-gemm", copy=2)  # an A/A instance of it
        check_identity(handle, _describe("numpy-gemm"))
        with pytest.raises(AgentSpecError, match=r"declares agent 'numpy-gemm'.*'other'"):
            check_identity(handle, _describe("other"))
        handle.manifest = SHIPPED["numpy-cpu"]  # a manifest file's agent: not checked here
        check_identity(handle, _describe("other"))
    finally:
        handle.client.close()


def _invoke(tmp_path: Path, *args: str) -> Any:
    """The CLI in this process, its store in `tmp_path`."""
    env = {"FWBENCH_STORE": str(tmp_path / "s.sqlite"), "COLUMNS": "200"}
    return CliRunner().invoke(app, list(args), env=env)


def test_run_with_an_image_and_the_local_launcher_is_refused_before_anything(
    tmp_path: Path,
) -> None:
    out = str(tmp_path / "out")
    done = _invoke(tmp_path, "run", "--agents", "torch-cpu,example/numpy-gemm:1.0", "--out", out)
    said = " ".join(done.output.split())
    assert done.exit_code == ExitCode.NOT_STARTED, said
    assert "example/numpy-gemm:1.0 is an image reference" in said and "--launcher docker" in said
    assert not (tmp_path / "out").exists() and not (tmp_path / "s.sqlite").exists()


def test_a_run_records_the_ids_of_its_images_for_resume() -> None:
    launch = Launch(LauncherKind.DOCKER, images=("sha256:ab",))
    options = RunOptions((Instance("numpy-gemm"),), None, Path("s"), "c", launch=launch)
    record = json.loads(json.dumps(options_record(options)))
    assert record["images"] == ["sha256:ab"]
    assert options_from_record(record, Path("o"), Path("s"), "c").launch.images == ("sha256:ab",)
    del record["images"]  # a run recorded before images could declare agents
    assert options_from_record(record, Path("o"), Path("s"), "c").launch.images == ()


def test_the_example_dockerfile_passes_hadolint() -> None:
    done = subprocess.run(
        [
            *(str(Path(sys.executable).parent / "hadolint"), "--no-color"),
            *("--failure-threshold", "style", str(EXAMPLE)),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_run_help_says_how_an_image_reference_is_told_apart() -> None:
    text = " ".join(
        CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200"}).output.split()
    )
    assert "image:REF, or any other spec holding a ':' or a '/'" in text.replace("│ ", "")
