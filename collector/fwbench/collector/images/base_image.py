"""A base image made from Debian packages, for hosts that cannot pull one (no registry):
`mmdebstrap --variant=minbase bookworm` with Python 3.11, its venv module and CA certificates,
imported into the daemon. It is what python:3.11-slim-bookworm offers the agent images: the
same Debian release and Python minor version, so the same wheels install."""

from __future__ import annotations

import contextlib
import json
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import docker

from fwbench.collector.images.build import LOCAL_BASE_IMAGE, ImageBuildError

SUITE = "bookworm"
PACKAGES = ("python3.11", "python3-venv", "ca-certificates")


def make_base_image(
    client: docker.DockerClient,
    tag: str = LOCAL_BASE_IMAGE,
    report: Callable[[str], None] = lambda _: None,
) -> str:
    """Builds the base (about 20 s, needs root and Debian's mirrors) and returns its image id.
    Raises ImageBuildError when mmdebstrap is missing or fails."""
    if shutil.which("mmdebstrap") is None:
        raise ImageBuildError("mmdebstrap is not installed (apt-get install mmdebstrap)")
    with tempfile.TemporaryDirectory(prefix="fwbench-base-") as folder:
        tarball = Path(folder) / "base.tar"
        report(f"mmdebstrap {SUITE} ({', '.join(PACKAGES)})")
        done = subprocess.run(
            [
                "mmdebstrap",
                "--variant=minbase",
                f"--include={','.join(PACKAGES)}",
                "--quiet",
                SUITE,
                str(tarball),
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            raise ImageBuildError(f"mmdebstrap failed: {done.stderr.strip()[-500:]}")
        repository, _, version = tag.rpartition(":")
        changes = [
            f'LABEL org.opencontainers.image.title="Debian {SUITE} minbase with Python 3.11"',
            f'LABEL org.opencontainers.image.base.name="debian:{SUITE} (mmdebstrap)"',
            'CMD ["python3.11"]',
        ]
        reply = client.api.import_image_from_file(
            str(tarball), repository=repository, tag=version, changes=changes
        )
    image_id = _imported_id(reply)
    report(f"made {tag} ({image_id[:19]})")
    return image_id


def _imported_id(reply: str) -> str:
    """The image id from the daemon's import reply (JSON lines ending with {"status": id})."""
    for line in reversed(str(reply).strip().splitlines()):
        with contextlib.suppress(json.JSONDecodeError):
            status = str(json.loads(line).get("status", ""))
            if status.startswith("sha256:"):
                return status
    raise ImageBuildError(f"docker import gave no image id: {reply!r}")
