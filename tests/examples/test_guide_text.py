"""docs/writing-an-agent.md says what agent.proto and the example agent say (no Docker needed:
tests/docker/test_writing_an_agent_guide.py runs its commands): its files are the example's,
its line count is the example's, its version and heartbeat lines are the proto's header, its
table of minor versions has a row for each one up to the proto's, its table of Run's statuses
names every status and case the proto lists, and the example's .dockerignore lets in what its
Dockerfile copies."""

from __future__ import annotations

import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests/agent_guide.py
from agent_guide import EXAMPLE, GUIDE, PROTO, guide_blocks

from fwbench.spec import HEARTBEAT_SECONDS, SPEC_VERSION


def _words(text: str) -> str:
    return " ".join(text.split())


def test_the_guides_files_are_the_examples() -> None:
    blocks = guide_blocks()
    files = [marker.removeprefix("file=") for marker in blocks if marker.startswith("file=")]
    assert sorted(files) == [".dockerignore", "Dockerfile", "requirements.txt"]
    for name in files:
        assert blocks[f"file={name}"] == (EXAMPLE / name).read_text("utf-8"), name
    steps = {"run=stubs", "run=wheels", "run=build", "run=conformance", "run=attached"}
    assert steps <= set(blocks)


def test_the_guides_stubs_command_makes_its_folder_first() -> None:
    commands = [line for line in guide_blocks()["run=stubs"].splitlines() if line.strip()]
    assert commands[0] == "mkdir -p app" and "python -m grpc_tools.protoc" in commands[1]


def test_the_guide_says_how_long_the_example_is() -> None:
    said = re.findall(r"about (\d+) lines", _words(GUIDE.read_text("utf-8")))
    assert len(said) == 1
    lines = len((EXAMPLE / "agent.py").read_text("utf-8").splitlines())
    assert abs(int(said[0]) - lines) <= 0.05 * lines, (said[0], lines)


def test_the_guide_quotes_the_protos_header() -> None:
    guide = GUIDE.read_text("utf-8")
    assert f"// Version: {SPEC_VERSION}\n// Heartbeat interval: {HEARTBEAT_SECONDS:g} s\n" in guide
    assert f"(today `{SPEC_VERSION}`)" in guide
    assert f"**every {HEARTBEAT_SECONDS:g} s**" in guide
    example = (EXAMPLE / "agent.py").read_text("utf-8")
    assert f'SPEC_VERSION = "{SPEC_VERSION}"' in example


def test_the_guides_version_table_has_a_row_for_every_minor_up_to_the_protos() -> None:
    """One row a minor, 1.0 to SPEC_VERSION in order, each saying what it added and what an
    agent does: a version the proto adds without a row here fails this test."""
    guide = GUIDE.read_text("utf-8")
    table = guide[guide.index("### What each minor version added") :].split("\n\n")[2]
    rows = [line for line in table.splitlines() if re.match(r"^\| \d", line)]
    major, minor = (int(part) for part in SPEC_VERSION.split("."))
    assert [row.split(" | ")[0].strip("| ") for row in rows] == [
        f"{major}.{m}" for m in range(minor + 1)
    ]
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split(" | ")]
        assert len(cells) == 3 and all(cells), row


def test_the_examples_dockerignore_lets_in_what_its_dockerfile_copies() -> None:
    """Everything out (`*`: a virtual environment, host stubs), then each COPY source back in."""
    ignored = (EXAMPLE / ".dockerignore").read_text("utf-8").splitlines()
    patterns = [line for line in ignored if line.strip() and not line.startswith("#")]
    assert patterns[0] == "*", patterns
    allowed = {line.removeprefix("!").rstrip("/") for line in patterns[1:]}
    assert all(line.startswith("!") for line in patterns[1:]), patterns
    copies = [
        line.split()[1:-1]
        for line in (EXAMPLE / "Dockerfile").read_text("utf-8").splitlines()
        if line.startswith("COPY ")
    ]
    sources = {source.rstrip("/") for sources in copies for source in sources}
    assert sources and sources <= allowed, (sources, allowed)
    assert "app" not in allowed  # the image makes its own stubs


def test_the_guides_status_table_names_every_status_of_run() -> None:
    proto = PROTO.read_text("utf-8")
    run = proto[proto.index("// Errors (as gRPC status):") : proto.index("rpc Run(")]
    statuses = re.findall(r"^\s*//   ([A-Z][A-Z_]+[A-Z]) ", run, flags=re.MULTILINE)
    assert len(statuses) == 8, statuses
    guide = GUIDE.read_text("utf-8")
    table = guide[guide.index("### Every status `Run` answers") :].split("\n\n")[2]
    listed = re.findall(r"^\| ([A-Z_]+) \|", table, flags=re.MULTILINE)
    assert listed == statuses
    # The cases the proto spells out, each in the row of its status.
    rows = {line.split(" | ")[0].strip("| "): line for line in table.splitlines()}
    for case in (
        "`PHASE_UNSPECIFIED`",
        "outside the `DType` enum",
        "`threads` above 1024",
        "a parameter name the workload does not have",
        "`max_iterations` below `min_iterations`",
    ):
        assert case in rows["INVALID_ARGUMENT"], case
    for case in (
        "a catalogue workload you do not declare",
        "`allreduce`",
        "`threads`",
        "`strategy`",
    ):
        assert case in rows["UNIMPLEMENTED"], case
