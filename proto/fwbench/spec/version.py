"""Protocol version, and the one interval the protocol fixes. Both are stated in agent.proto's
header ("Version: 1.10", "Heartbeat interval: 2 s"); tests/spec/test_protocol_text.py holds
these constants to that text. The major number is the proto package version
(fwbench.agent.v1); the minor number grows with backward-compatible changes of the wire
contract (a rule the text states more plainly changes no version)."""

SPEC_VERSION = "1.10"

# While a run is active an agent sends a Progress at least this often (agent.proto, Run): the
# runtime's heartbeat, and what the collector's liveness limits (run/liveness.py) build on.
HEARTBEAT_SECONDS = 2.0


def spec_major(version: str) -> int:
    """Major number of a "MAJOR.MINOR" version; raises ValueError when malformed."""
    major, _, minor = version.partition(".")
    if not major.isdigit() or not minor.isdigit():
        raise ValueError(f"malformed spec version {version!r}, expected MAJOR.MINOR")
    return int(major)


def versions_compatible(ours: str, theirs: str) -> bool:
    """A peer is compatible when it speaks the same major version."""
    try:
        return spec_major(ours) == spec_major(theirs)
    except ValueError:
        return False
