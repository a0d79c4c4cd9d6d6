"""UploadModel's pieces (agent.proto, protocol 1.9): a model file, a SavedModel folder or the
user's sample inputs sent to an agent that does not see the client's files, as a stream of
ModelChunk of at most CHUNK_BYTES of data each. The client side (`chunks`) is here; the
agent's side, which checks and keeps them, is fwbench/runtime/uploads.py."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from fwbench.agent.v1 import agent_pb2
from fwbench.spec import model_files

CHUNK_BYTES = 1 << 20  # the most data one ModelChunk carries


def chunks(path: Path, sha256: str = "") -> Iterator[agent_pb2.ModelChunk]:
    """The chunks of `path` (a file, or a folder's files in sorted order, as its digest
    reads them): the first names the upload, every one carries a piece of one file. Read as
    they are sent: an upload of gigabytes holds one chunk in memory at a time."""
    folder = path.is_dir()
    files = sorted(p for p in path.rglob("*") if p.is_file()) if folder else [path]
    yield agent_pb2.ModelChunk(
        sha256=sha256 or model_files.digest(path),
        total_bytes=model_files.size(path),
        name=path.name,
        folder=folder,
    )
    for item in files:
        inner = item.relative_to(path).as_posix() if folder else ""
        with item.open("rb") as handle:
            offset, data = 0, handle.read(CHUNK_BYTES)
            yield agent_pb2.ModelChunk(path=inner, offset=0, data=data)
            while len(data) == CHUNK_BYTES:
                offset += len(data)
                data = handle.read(CHUNK_BYTES)
                if data:
                    yield agent_pb2.ModelChunk(path=inner, offset=offset, data=data)
