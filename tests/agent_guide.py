"""docs/writing-an-agent.md as a script: its fenced blocks whose info string carries
`file=NAME` (a file of the example agent, verbatim) or `run=STEP` (shell commands, run as
written), and the guide's procedure on a copy of agents/examples/numpy-gemm outside the
repository tree: the example's files replaced by the guide's, then the guide's `stubs`,
`wheels` and `build` steps in a bash of their own. The image's tag is the one substitution:
the guide's `example/numpy-gemm:1.0` becomes the test's, so no test leaves the guide's tag in
the engine. Used by tests/docker (the build, conformance) and tests/examples (the text)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GUIDE = REPO / "docs" / "writing-an-agent.md"
EXAMPLE = REPO / "agents" / "examples" / "numpy-gemm"
PROTO = REPO / "proto" / "fwbench" / "agent" / "v1" / "agent.proto"
GUIDE_TAG = "example/numpy-gemm:1.0"  # the tag the guide's commands build and use
BIN = Path(sys.executable).parent  # python, pip and collector, as the guide's commands name them

_FENCE = re.compile(r"^```(\S*)(.*)$")


def guide_blocks(text: str | None = None) -> dict[str, str]:
    """{"file=Dockerfile": contents, "run=stubs": commands, ...} for the marked blocks."""
    blocks: dict[str, str] = {}
    lines = (GUIDE.read_text("utf-8") if text is None else text).splitlines(keepends=True)
    index = 0
    while index < len(lines):
        fence = _FENCE.match(lines[index].rstrip("\n"))
        index += 1
        if not fence:
            continue
        body = []
        while not lines[index].startswith("```"):
            body.append(lines[index])
            index += 1
        index += 1
        for marker in fence.group(2).split():
            if marker.startswith(("file=", "run=")):
                assert marker not in blocks, f"{GUIDE.name}: two blocks marked {marker}"
                blocks[marker] = "".join(body)
    return blocks


def guide_environment(store: Path) -> dict[str, str]:
    """The shell the guide's commands run in: this venv's python, pip and collector first on
    PATH, a store of the test's own."""
    path = os.pathsep.join([str(BIN), os.environ.get("PATH", "")])
    return {**os.environ, "PATH": path, "FWBENCH_STORE": str(store), "COLUMNS": "200"}


def run_step(
    step: str, folder: Path, tag: str, *, extra: str = "", timeout: float = 900
) -> subprocess.CompletedProcess[str]:
    """The guide's `run=STEP` block in `folder` (bash -e), its tag replaced by `tag`; `extra`
    is appended to its one command (e.g. --json)."""
    script = guide_blocks()[f"run={step}"]
    if extra:
        assert script.strip().count("\n") == 0, f"run={step} is not one command"
        script = f"{script.strip()} {extra}\n"
    script = script.replace(GUIDE_TAG, tag)
    return subprocess.run(
        ["bash", "-e", "-o", "pipefail", "-c", script],
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=guide_environment(folder.parent / "store.sqlite"),
        check=False,
    )


@dataclass(frozen=True)
class GuideBuild:
    tag: str
    context: Path  # the copy the guide's steps ran in
    seconds: dict[str, float]  # each step's wall time


def build_as_the_guide_says(context: Path, tag: str) -> GuideBuild:
    """A copy of the example (its agent.py; the guide's own Dockerfile and requirements.txt,
    which must be the example's) and agent.proto in `context`, then the guide's stubs, wheels
    and build steps. Fails the calling test with the step's output when one fails."""
    ignore = shutil.ignore_patterns("*.whl", "agent.proto", "app", "__pycache__")
    shutil.copytree(EXAMPLE, context, ignore=ignore)
    shutil.copy(PROTO, context / "agent.proto")
    for marker, text in guide_blocks().items():
        if marker.startswith("file="):
            name = marker.removeprefix("file=")
            assert text == (EXAMPLE / name).read_text("utf-8"), (
                f"{GUIDE.name}'s {name} differs from {EXAMPLE / name}: make them one text"
            )
            (context / name).write_text(text, "utf-8")
    seconds = {}
    for step in ("stubs", "wheels", "build"):
        start = time.monotonic()
        done = run_step(step, context, tag)
        seconds[step] = time.monotonic() - start
        assert done.returncode == 0, f"the guide's {step} step failed:\n" + (
            done.stdout[-3000:] + done.stderr[-3000:]
        )
    assert tag in done.stdout, done.stdout[-3000:]  # `collector agents` lists the image
    return GuideBuild(tag, context, seconds)
