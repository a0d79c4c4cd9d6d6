"""Agents declared by their image (docs/image-labels.md), as an outsider ships one: the
example agent agents/examples/numpy-gemm built with plain `docker build` as
docs/writing-an-agent.md says (the `example_image` fixture, conftest.py; no `collector images
build`, nothing of the repository in the image but a copy of agent.proto), run by reference
beside an agent of a manifest file; images without labels, with bad labels, or whose agent
calls itself otherwise are refused with one clear line, exit 2, nothing stored. The guide's
own checks of that image (conformance, SIGTERM) are in test_writing_an_agent_guide.py."""

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

from fwbench.collector.cli.common import ExitCode

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_leftovers")]

BIN = Path(sys.executable).parent
TINY = [
    *("--workloads", "gemm", "--phases", "infer", "--batch-sizes", "1"),
    *("--param", "m=64", "--param", "n=64", "--param", "k=64"),
    *("--warmup", "1", "--iterations", "3", "--min-seconds", "0"),
]


def _docker_build(context: Path, tag: str, *args: str) -> None:
    done = subprocess.run(
        ["docker", "build", "--quiet", "--tag", tag, *args, str(context)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-2000:]


@pytest.fixture
def relabelled(
    docker_daemon: docker.DockerClient, example_image: str, tmp_path: Path
) -> Iterator[Path]:
    """A folder in which `_relabel` writes images: the example with other labels (one LABEL
    instruction, no new layer to build), removed at the end."""
    made: list[str] = []
    yield tmp_path
    for tag in tmp_path.glob("tag-*"):
        made.append(tag.read_text())
    for tag in made:
        docker_daemon.images.remove(tag, force=True)


def _relabel(folder: Path, name: str, base: str, labels: dict[str, str]) -> str:
    tag = f"fwbench-test/relabelled-{name}:{os.getpid()}"
    context = folder / name
    context.mkdir()
    pairs = " ".join(f"{key}='{value}'" for key, value in labels.items())
    (context / "Dockerfile").write_text(f"FROM {base}\n" + (f"LABEL {pairs}\n" if pairs else ""))
    _docker_build(context, tag)
    (folder / f"tag-{name}").write_text(tag)
    return tag


def _collector(tmp: Path, *args: str, env: dict[str, str] | None = None):
    return subprocess.run(
        [str(BIN / "collector"), *args],
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=600,
        env={
            **os.environ,
            "COLUMNS": "200",
            "FWBENCH_STORE": str(tmp / "store.sqlite"),
            **(env or {}),
        },
    )


def test_an_image_by_reference_runs_beside_a_manifest_agent(
    example_image: str, fake_manifests: Path, tmp_path: Path
) -> None:
    out = tmp_path / "run"
    done = _collector(
        tmp_path,
        *("run", "--launcher", "docker", "--agents", f"{example_image},test-fake", *TINY),
        *("--aa", "numpy-gemm"),  # the name its label declares: a second instance of it
        *("--dtypes", "float32,float64", "--out", str(out)),
        env={"FWBENCH_MANIFEST_PATH": str(fake_manifests)},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = pd.read_parquet(out / "results.parquet")
    assert (rows.status == "ok").all() and set(rows.launcher) == {"docker"}
    assert set(rows.agent) == {"numpy-gemm", "numpy-gemm#2", "test-fake"}
    ours = rows[rows.agent == "numpy-gemm"]  # the name its label declares
    assert sorted(ours.dtype) == ["float32", "float64"] and (ours.framework == "numpy").all()
    assert set(ours.image) == {example_image} and ours.image_id.str.startswith("sha256:").all()
    # The label's env reached the container (the image does not set it itself).
    assert all(json.loads(e) == {"NUMPY_GEMM_CHECK": "1"} for e in ours.environment)
    assert ours.telemetry_scrapes.isna().all()  # metrics 0: no /metrics, nothing scraped
    assert set(rows[rows.agent == "test-fake"].image) == {"fwbench/test-fake:latest"}
    meta = json.loads((out / "run.json").read_text())["agents"]["numpy-gemm"]
    assert meta["declared_by"] == "image" and meta["manifest"] is None
    assert meta["image"]["labels"]["fwbench.label-schema"] == "1"
    assert json.loads(meta["image"]["labels"]["fwbench.manifest"])["name"] == "numpy-gemm"


def test_an_image_by_id_sweeps_threads_with_a_container_per_count(
    docker_daemon: docker.DockerClient, example_image: str, tmp_path: Path
) -> None:
    image_id = docker_daemon.images.get(example_image).id
    out = tmp_path / "run"
    done = _collector(
        tmp_path,
        *("run", "--launcher", "docker", "--agents", image_id, *TINY, "--threads", "1,2"),
        *("--out", str(out)),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    rows = pd.read_parquet(out / "results.parquet")
    # The agent sizes its BLAS pool at start-up (Describe says so): FWBENCH_THREADS per count.
    ran = zip(rows.threads_requested, rows.intra_op_threads, strict=True)
    assert sorted(ran) == [(1, 1), (2, 2)]
    assert (rows.status == "ok").all() and set(rows.image_id) == {image_id}
    listed = _collector(tmp_path, "agents", "--json")
    assert listed.returncode == 0, listed.stderr
    images = [r for r in json.loads(listed.stdout) if r["source"] == "image"]
    assert {"agent": "numpy-gemm", "image_id": image_id} in [
        {"agent": r["agent"], "image_id": r["image_id"]} for r in images
    ]
    listed = _collector(tmp_path, "images", "list", "--json")
    assert listed.returncode == 0, listed.stderr
    sources = {(i["tag"], i["id"]): i["source"] for i in json.loads(listed.stdout)}
    assert sources[example_image, image_id] == "image"
    built = [src for (tag, _), src in sources.items() if tag == "fwbench/test-fake:latest"]
    assert set(built) <= {"manifest"}  # made by `collector images build`


def _refused(tmp_path: Path, agents: str) -> str:
    out = tmp_path / "run"
    done = _collector(
        tmp_path, "run", "--launcher", "docker", "--agents", agents, *TINY, "--out", str(out)
    )
    assert done.returncode == ExitCode.NOT_STARTED, done.stderr[-3000:]
    assert not out.exists() and not (tmp_path / "store.sqlite").exists()
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    return " ".join(lines)  # rich wraps the one line at the terminal's width


def test_an_unlabelled_image_is_refused_saying_which_labels_it_lacks(
    relabelled: Path, tmp_path: Path
) -> None:
    bare = _relabel(relabelled, "bare", "fwbench/base:bookworm", {})
    said = _refused(tmp_path, bare)
    assert f"image {bare} is not an fwbench agent image" in said
    assert "no label fwbench.label-schema and no label fwbench.manifest" in said
    assert "docs/image-labels.md" in said


def test_bad_labels_are_refused_naming_the_label(
    example_image: str, relabelled: Path, tmp_path: Path
) -> None:
    bad_port = json.dumps(
        {"name": "numpy-gemm", "framework": "numpy", "variant": "x"}
        | {"description": "", "requires_gpu": False, "env": {}, "ports": {"grpc": "50070"}}
    )
    tag = _relabel(relabelled, "port", example_image, {"fwbench.manifest": bad_port})
    said = _refused(tmp_path, tag)
    assert f"image {tag}: label fwbench.manifest: key 'grpc' must be an integer" in said
    tag = _relabel(relabelled, "schema", example_image, {"fwbench.label-schema": "2"})
    said = _refused(tmp_path, tag)
    assert f"image {tag}: label fwbench.label-schema is '2'; this collector reads schema 1" in said


def test_an_image_whose_agent_calls_itself_otherwise_is_refused(
    example_image: str, relabelled: Path, tmp_path: Path
) -> None:
    labels = json.loads(docker.from_env().images.get(example_image).labels["fwbench.manifest"])
    tag = _relabel(
        relabelled,
        "name",
        example_image,
        {"fwbench.manifest": json.dumps({**labels, "name": "other"})},
    )
    said = _refused(tmp_path, tag)
    assert f"image {tag} declares agent 'other'" in said
    assert "the agent in it says it is 'numpy-gemm'" in said


def test_an_absent_image_is_refused(docker_daemon: docker.DockerClient, tmp_path: Path) -> None:
    said = _refused(tmp_path, "fwbench-test/absent:never")
    assert "image fwbench-test/absent:never is not in the local Docker engine" in said


def test_a_killed_run_of_an_image_resumes_with_the_same_image(
    docker_daemon: docker.DockerClient, example_image: str, tmp_path: Path
) -> None:
    """The run records the image's id; `--resume` starts that image again, though the
    command line that resumes names no image (and the killed run's container is swept)."""
    out = tmp_path / "run"
    command = [str(BIN / "collector"), "run", "--launcher", "docker", "--agents", example_image]
    command += [*TINY, "--batch-sizes", "1,2,3,4", "--min-seconds", "1", "--out", str(out)]
    env = {**os.environ, "FWBENCH_STORE": str(tmp_path / "store.sqlite")}
    process = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 300
        while not (out / "results.csv").is_file() or len(pd.read_csv(out / "results.csv")) < 2:
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        process.kill()
        process.wait()
    run_id = json.loads((out / "run.json").read_text())["run_id"]
    done = _collector(tmp_path, "run", "--resume", run_id)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = pd.read_parquet(out / "results.parquet")
    assert sorted(rows.batch_size) == [1, 2, 3, 4] and (rows.status == "ok").all()
    assert set(rows.image_id) == {docker_daemon.images.get(example_image).id}
    gone = docker_daemon.containers.list(
        all=True, ignore_removed=True, filters={"label": f"fwbench.run_id={run_id}"}
    )
    assert gone == []
