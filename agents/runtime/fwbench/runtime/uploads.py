"""UploadModel on the agent's side (protocol 1.9): the chunks a client sends (fwbench/spec/
uploads.py makes them) checked as they come and written to a staging folder, then the whole
checked against the digest the first chunk said and moved into place, in a folder of the
agent's own by digest: FWBENCH_UPLOAD_DIR, else ~/.cache/fwbench/uploads (XDG_CACHE_HOME).
What it already holds is answered at once. Limits: FWBENCH_MAX_UPLOAD_BYTES (default
MAX_UPLOAD_BYTES) and the folder's free space. A failed upload leaves nothing behind."""

from __future__ import annotations

import os
import re
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import BinaryIO

import grpc

from fwbench.agent.v1 import agent_pb2
from fwbench.spec import model_files
from fwbench.spec.uploads import CHUNK_BYTES

MAX_UPLOAD_BYTES = 16 << 30  # 16 GiB, the default limit of one upload
_DIGEST = re.compile(r"[0-9a-f]{64}")


class UploadRefused(Exception):
    """An upload the agent does not keep: the status and the one line saying why."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _invalid(message: str) -> UploadRefused:
    return UploadRefused(grpc.StatusCode.INVALID_ARGUMENT, f"upload: {message}")


def upload_dir() -> Path:
    given = os.environ.get("FWBENCH_UPLOAD_DIR")
    if given:
        return Path(given)
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "fwbench" / "uploads"


def max_upload_bytes() -> int:
    """FWBENCH_MAX_UPLOAD_BYTES, else MAX_UPLOAD_BYTES; ValueError for what is not a count."""
    given = os.environ.get("FWBENCH_MAX_UPLOAD_BYTES", "")
    value = int(given) if given else MAX_UPLOAD_BYTES
    if value < 0:
        raise ValueError(f"FWBENCH_MAX_UPLOAD_BYTES={given}: a number of bytes, 0 or more")
    return value


def _header(first: agent_pb2.ModelChunk | None, limit: int) -> tuple[str, str]:
    """The upload's digest and name, checked; UploadRefused otherwise."""
    if first is None:
        raise _invalid("no chunk came")
    if not _DIGEST.fullmatch(first.sha256):
        raise _invalid("the first chunk names no sha256 (64 lower-case hex digits)")
    name = first.name
    if not name or "/" in name or "\\" in name or name in (".", "..") or "\0" in name:
        raise _invalid(f"the first chunk's name {name!r} is not a file's or a folder's name")
    if first.total_bytes > limit:
        raise UploadRefused(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"upload: {name} is {first.total_bytes} bytes; this agent takes at most {limit} "
            "(FWBENCH_MAX_UPLOAD_BYTES)",
        )
    return first.sha256, name


def _inner(path: str, folder: bool) -> str:
    """A chunk's path within the upload, checked: "" for a file; for a folder, a relative
    path that stays inside it."""
    if not folder:
        if path:
            raise _invalid(f"a file's chunks name no path (got {path!r})")
        return ""
    parts = PurePosixPath(path).parts
    if not path or path.startswith("/") or ".." in parts or "\\" in path or "\0" in path:
        raise _invalid(f"path {path!r} leaves the folder")
    return path


def receive(
    chunks: Iterator[agent_pb2.ModelChunk], root: Path, limit: int
) -> agent_pb2.UploadModelResponse:
    """Keeps the upload under ROOT/SHA256/NAME and answers where; UploadRefused when it is
    not what its first chunk said, or too big."""
    first = next(chunks, None)
    sha256, name = _header(first, limit)
    assert first is not None
    kept = root / sha256 / name
    if kept.exists():  # moved into place only once checked: whole
        return agent_pb2.UploadModelResponse(
            model=agent_pb2.ModelFile(path=str(kept), sha256=sha256), held=True
        )
    root.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(root).free
    if first.total_bytes > free:
        raise UploadRefused(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"upload: {name} is {first.total_bytes} bytes; {root} has {free} free",
        )
    staging = root / f".{sha256}.{secrets.token_hex(4)}"
    try:
        _write(chunks, staging / name, first.folder, first.total_bytes)
        found = model_files.digest(staging / name)
        if found != sha256:
            raise _invalid(f"{name} has digest {found[:12]}..., not the {sha256[:12]}... said")
        try:
            staging.rename(root / sha256)
        except OSError:  # another upload of the same digest finished first: keep that one
            if not kept.exists():
                raise
        return agent_pb2.UploadModelResponse(
            model=agent_pb2.ModelFile(path=str(kept), sha256=sha256),
            received_bytes=first.total_bytes,
        )
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _write(chunks: Iterator[agent_pb2.ModelChunk], target: Path, folder: bool, total: int) -> None:
    """The pieces into TARGET (a file, or a folder's files), each file's in order."""
    if folder:
        target.mkdir(parents=True)
    else:
        target.parent.mkdir(parents=True)
    received, current, expected = 0, None, 0
    seen: set[str] = set()
    handle: BinaryIO | None = None
    try:
        for chunk in chunks:
            if chunk.sha256 or chunk.name or chunk.total_bytes:
                raise _invalid("only the first chunk says what comes")
            if len(chunk.data) > CHUNK_BYTES:
                raise _invalid(f"a chunk of {len(chunk.data)} bytes, over {CHUNK_BYTES}")
            path = _inner(chunk.path, folder)
            if path != current or handle is None:
                if path in seen or chunk.offset != 0:
                    raise _invalid(f"{path or target.name}: its pieces are not in order")
                if handle is not None:
                    handle.close()
                seen.add(path)
                current, expected = path, 0
                file = target / path if folder else target
                file.parent.mkdir(parents=True, exist_ok=True)
                handle = file.open("xb")
            elif chunk.offset != expected:
                raise _invalid(f"{path or target.name}: a piece at {chunk.offset}, not {expected}")
            received += len(chunk.data)
            if received > total:
                raise _invalid(f"more than the {total} bytes said")
            handle.write(chunk.data)
            expected += len(chunk.data)
    finally:
        if handle is not None:
            handle.close()
    if received != total:
        raise _invalid(f"{received} bytes came of the {total} said")
