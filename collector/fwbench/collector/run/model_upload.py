"""The model's files sent to the agents that do not see this host's files (protocol 1.9's
UploadModel): an agent attached by address, or a Kubernetes pod. A local agent reads each file
where it is, a Docker agent through its read-only mount, a Slurm agent on the shared
filesystem; each of the others gets every file it reads (the user's, an export, the sample
inputs) once per run, in chunks of at most 1 MiB, checked against its digest, and the agent
keeps it by digest, so a file it already holds is not sent again. A RunRequest, InspectModel
or ExportModel then names the path the agent answered."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

from fwbench.collector.run.model_file import ModelRefused
from fwbench.spec import model_files, uploads

if TYPE_CHECKING:
    from fwbench.collector.run.work import AgentWork


class Uploads:
    """What this run sent to which agent: (agent, local path) -> the path the agent keeps it
    at."""

    def __init__(
        self, timeout: float | None = None, say: Callable[[str], object] = lambda _: None
    ) -> None:
        self.timeout = timeout or 3600.0
        self.say = say
        self.sent: dict[tuple[str, str], str] = {}
        self.processes: dict[tuple[str, str], object] = {}  # the handle each was sent to

    def path(self, item: AgentWork, local: Path, sha256: str) -> str:
        """The path `item` reads `local` at: where it is, or where its current process kept
        the upload (sent now if not sent to that process yet: a process given back at rest is
        started again for it); ModelRefused when it cannot have it."""
        if item.handle.sees_files:
            return str(local)
        item.awake()
        key = (item.handle.name, str(local))
        if self.processes.get(key) is not item.handle:
            self.sent[key] = self._send(item, local, sha256)
            self.processes[key] = item.handle
        return self.sent[key]

    def known(self, agent: str, local: Path | str) -> str:
        """The path `agent` reads `local` at, as far as this run sent it."""
        return self.sent.get((agent, str(local)), str(local))

    def check(self, item: AgentWork, local: Path) -> None:
        """ModelRefused when `item` does not see this host's files and cannot take `local`:
        it takes no uploads, or not this many bytes (what its Describe said)."""
        if item.handle.sees_files:
            return
        name, limit = item.handle.name, item.describe.max_upload_bytes
        said = f"--model: {name} does not see this host's files"
        if not limit:
            raise ModelRefused(
                f"{said} and takes no uploads (its Describe.max_upload_bytes is 0, protocol "
                f"{item.describe.spec_version}): run it where {local.name} is, or start it "
                "from this collector"
            )
        size = model_files.size(local)
        if size > limit:
            raise ModelRefused(
                f"{said}, and {local.name} is {size} bytes where it takes at most {limit} "
                "(its FWBENCH_MAX_UPLOAD_BYTES)"
            )

    def _send(self, item: AgentWork, local: Path, sha256: str) -> str:
        self.check(item, local)
        name = item.handle.name
        said = f"--model: {name} does not see this host's files"
        try:
            reply = item.handle.client.upload_model(uploads.chunks(local, sha256), self.timeout)
        except grpc.RpcError as error:
            why = error.details()
            raise ModelRefused(f"{said}, and sending it {local.name} failed: {why}") from None
        kept = reply.model
        if kept.sha256 != sha256 or not kept.path:
            raise ModelRefused(
                f"{said}: it answered {kept.path or 'no path'} with digest {kept.sha256[:12]} "
                f"for {local.name}, whose digest is {sha256[:12]}"
            )
        how = "held it already" if reply.held else f"received {reply.received_bytes:,} bytes"
        self.say(f"{local.name} to {name}, which does not see this host's files: {how}")
        return kept.path
