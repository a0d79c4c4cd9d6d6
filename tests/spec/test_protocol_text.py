"""agent.proto states its version and its heartbeat interval once, in its header ("Version:",
"Heartbeat interval:"); the constants both sides use (fwbench.spec) are those lines, and the
limits built on the interval (the collector's liveness, the conformance suite's heartbeat
check, the runtime's heartbeat) agree with it."""

from __future__ import annotations

import re
from pathlib import Path

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.conformance import heartbeat
from fwbench.collector.run import liveness
from fwbench.runtime import service
from fwbench.spec import HEARTBEAT_SECONDS, SPEC_VERSION, spec_major

PROTO = Path(agent_pb2.__file__).with_name("agent.proto")


def _text() -> str:
    return PROTO.read_text()


def _prose() -> str:
    """The comments as one line of words (a statement may wrap)."""
    lines = [line.strip() for line in _text().splitlines()]
    return " ".join(line.removeprefix("//").strip() for line in lines if line.startswith("//"))


def _header(field: str) -> str:
    found = re.findall(rf"^// {field}: (.+)$", _text(), flags=re.MULTILINE)
    assert len(found) == 1, f"agent.proto states {field!r} {len(found)} times, not once"
    return str(found[0]).strip()


def test_the_proto_states_the_version_both_sides_speak() -> None:
    assert _header("Version") == SPEC_VERSION
    package = agent_pb2.DESCRIPTOR.package  # fwbench.agent.v1: the major version
    assert package.endswith(f".v{spec_major(SPEC_VERSION)}")


def test_the_proto_states_the_heartbeat_interval_once() -> None:
    assert _header("Heartbeat interval") == f"{HEARTBEAT_SECONDS:g} s"
    # Elsewhere the text refers to the header: no second number that could drift from it.
    assert "heartbeat interval (the header's)" in _prose()
    assert not re.search(r"at least every \d", _prose())


def test_the_limits_built_on_the_heartbeat_agree_with_it() -> None:
    prose = _prose()
    assert f"silent for {liveness.STALL_GAP_SECONDS:g} s as stalled" in prose
    assert f"silent for {liveness.HANG_SECONDS:g} s as hung" in prose
    assert f"silent for {liveness.MEASURE_GAP_SECONDS:g} s while it measures" in prose
    assert f"without progress for {liveness.HANG_SECONDS:g} s as stuck" in prose
    # A stall is several heartbeats missed in a row (three while measuring: no sample may span
    # a longer gap), a hang more than a stall.
    assert liveness.MEASURE_GAP_SECONDS == 3 * HEARTBEAT_SECONDS
    assert liveness.STALL_GAP_SECONDS >= 5 * HEARTBEAT_SECONDS
    assert liveness.HANG_SECONDS > liveness.STALL_GAP_SECONDS
    # The runtime beats at the protocol's interval; conformance fails a gap of two intervals
    # (a heartbeat missed) and watches a run past the collector's stall limit.
    assert service.HEARTBEAT_SECONDS == HEARTBEAT_SECONDS
    assert heartbeat.LATE_SECONDS == 2 * HEARTBEAT_SECONDS < liveness.MEASURE_GAP_SECONDS
    assert heartbeat.WINDOW_SECONDS > liveness.STALL_GAP_SECONDS
