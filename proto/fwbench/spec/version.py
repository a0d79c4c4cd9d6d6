"""Protocol version. The major number is the proto package version (fwbench.agent.v1); the
minor number grows with backward-compatible additions."""

SPEC_VERSION = "1.6"


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
