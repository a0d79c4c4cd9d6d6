"""ExportModel on the agent's side (protocol 1.8): a model file the agent reads, written in
another format by its framework's own exporter.

A plugin that exports declares the optional capability "model_export" with the formats it
writes (`export_formats`, names from fwbench/spec/model_files.py) and implements
`export_model(path, format, target, dest) -> str`: it writes the model at `path` (of a format
it reads) to `dest` in the format `target`, and returns the tool that did it with its version
("tf2onnx 1.17.0 (keras 3.15.1)"). The runtime checks the request first (the source as a Run
checks it, the destination absent, its folder present), has the plugin write to a staging
name beside the destination, and moves it into place only when the export succeeded: a
failed or interrupted export leaves nothing at the path the client named."""

from __future__ import annotations

import os
import secrets
import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from fwbench.agent.v1 import agent_pb2
from fwbench.runtime.model_files import ModelPlugin, checked_file
from fwbench.runtime.plugin import UnsupportedWorkload
from fwbench.spec import model_files
from fwbench.spec.catalogue import CatalogueError


class ExportPlugin(ModelPlugin, Protocol):
    export_formats: tuple[str, ...]

    def export_model(self, path: str, format: str, target: str, dest: str) -> str: ...


class ExportFailed(RuntimeError):
    """The framework's exporter failed on this model (INTERNAL, its message in one line)."""


def destination(path: str) -> Path:
    """ExportModelRequest.path checked: absolute, not there yet, in a folder that is; else
    CatalogueError (INVALID_ARGUMENT) naming "path"."""
    dest = Path(path)
    if not path or not dest.is_absolute():
        raise CatalogueError(f"path {path!r}: give an absolute path to write the export to", "path")
    if dest.exists() or dest.is_symlink():
        raise CatalogueError(f"path {path!r} exists: an export never overwrites a file", "path")
    if not dest.parent.is_dir():
        raise CatalogueError(
            f"path {path!r}: its folder {str(dest.parent)!r} does not exist", "path"
        )
    return dest


def export(
    plugin: ExportPlugin, request: agent_pb2.ExportModelRequest, formats: Sequence[str]
) -> agent_pb2.ExportModelResponse:
    """ExportModel: the request checked, the plugin's export made at a staging name and moved
    to ExportModelRequest.path, its digest taken."""
    if request.format not in formats:
        writes = ", ".join(formats) or "none"
        raise UnsupportedWorkload(
            f"this agent writes no {request.format} model files; it writes: {writes}"
        )
    source = checked_file(request.model, plugin.model_formats)
    if request.format == request.model.format:
        raise CatalogueError(f"the model is a {request.format} file already", "format")
    dest = destination(request.path)
    staging = dest.with_name(f".{secrets.token_hex(4)}-partial-{dest.name}")
    try:
        try:
            tool = plugin.export_model(
                str(source), request.model.format, request.format, str(staging)
            )
        except (CatalogueError, UnsupportedWorkload, MemoryError):
            raise
        except Exception as error:  # noqa: BLE001 (the exporter's own failure, said in a line)
            text = " ".join(str(error).split())[:500] or type(error).__name__
            raise ExportFailed(
                f"the {request.format} exporter failed on {source.name}: "
                f"{type(error).__name__}: {text}"
            ) from None
        if not staging.exists():
            raise ExportFailed(f"the {request.format} exporter wrote nothing for {source.name}")
        try:
            model_files.detect_format(staging)  # a folder without saved_model.pb, say
        except model_files.ModelFileError as error:
            raise ExportFailed(
                f"the {request.format} exporter wrote no such file: {error}"
            ) from None
        os.replace(staging, dest)
    finally:
        _remove(staging)
    return agent_pb2.ExportModelResponse(
        model=agent_pb2.ModelFile(
            path=str(dest), format=request.format, sha256=model_files.digest(dest)
        ),
        tool=tool,
    )


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    elif path.exists() or path.is_symlink():
        path.unlink(missing_ok=True)
