"""--export: the user's model in the formats other agents of the run read, each written by an
agent that reads the user's file with its framework's own exporter (ExportModel, protocol
1.8), and checked before anything is timed.

For each format that an agent of the run reads and no file of the model has yet, in the
order the agents were named, the first agent that reads the user's file and writes that format
exports it into the run folder (models/STEM.EXT). The collector checks what came back (the
path, the format, the digest of the file as it finds it), asks the first agent that reads the
new format for its signature, matches its inputs with the user's file's (by name, or in order
where the exporter renamed them; the same count, dtypes and fixed dimensions), and runs one
untimed step of it per batch size against the reference outputs: the console says how far the
export is from the source, and a row of an export whose outputs differ is kept out of verdicts
like any other. An exporter that fails, or a file that cannot be matched, is one line, exit 2,
before any cell is timed."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.run.model_calls import inspect, signature_inputs, untimed_outputs
from fwbench.collector.run.model_file import ModelRefused, free_path
from fwbench.collector.run.model_prepared import ModelVariant, PreparedModel
from fwbench.collector.run.plan import Selection
from fwbench.spec import model_files
from fwbench.spec.enums import PHASE_NAMES
from fwbench.spec.model_files import ModelFileError, TensorInfo

if TYPE_CHECKING:
    from fwbench.collector.run.work import AgentWork

# What a format's export is called in the run folder: STEM + this (a SavedModel is a folder).
SUFFIXES = {
    "onnx": ".onnx",
    "keras": ".keras",
    "savedmodel": ".savedmodel",
    "torch_export": ".pt2",
    "jax_export": ".jax",
    "torchscript": ".pt",
}


def exporters(prepared: PreparedModel, work: Sequence[AgentWork]) -> dict[str, str]:
    """Each format an agent of the run writes from the user's file, and the first that does."""
    found: dict[str, str] = {}
    for item in work:  # one that does not see this host's files cannot write into the run's
        if prepared.asked.format in item.describe.model_formats and item.handle.sees_files:
            for fmt in item.describe.export_formats:
                if fmt != prepared.asked.format:
                    found.setdefault(fmt, item.handle.name)
    return found


def export_all(
    prepared: PreparedModel,
    work: Sequence[AgentWork],
    selection: Selection,
    timeout: float | None,
    folder: Path,
    say: Callable[[str], object],
) -> None:
    """The exports the run's agents need, made and checked (above); ModelRefused when one
    cannot be."""
    for item in work:
        formats = item.describe.model_formats
        if any(f in prepared.variants for f in formats):
            continue  # it runs the user's file, or an export already made
        fmt = next((f for f in formats if f in prepared.exporters), None)
        if fmt is None:
            continue  # its cells say it reads none of the model's files
        variant = _export(prepared, work, fmt, timeout, folder)
        prepared.variants[fmt] = variant
        prepared.runs[item.handle.name] = fmt
        unsent = prepared.send_files(item)
        if unsent:
            raise ModelRefused(unsent)
        say(_checked(prepared, item, variant, selection, timeout))


def _export(
    prepared: PreparedModel,
    work: Sequence[AgentWork],
    fmt: str,
    timeout: float | None,
    folder: Path,
) -> ModelVariant:
    name = prepared.exporters[fmt]
    exporter = next(item for item in work if item.handle.name == name)
    asked = prepared.asked
    folder.mkdir(parents=True, exist_ok=True)
    stem = asked.path.name.removesuffix(asked.path.suffix)
    dest = free_path(folder, stem, SUFFIXES[fmt])
    request = agent_pb2.ExportModelRequest(
        model=agent_pb2.ModelFile(path=str(asked.path), format=asked.format, sha256=asked.sha256),
        format=fmt,
        path=str(dest),
    )
    said = f"--export: {name} could not write {asked.path.name} as {fmt}"
    exporter.awake()
    try:
        reply = exporter.handle.client.export_model(request, timeout or 600.0)
    except grpc.RpcError as error:
        raise ModelRefused(f"{said}: {error.details()}") from None
    try:
        found = model_files.digest(dest) if dest.exists() else "nothing there"
    except (ModelFileError, OSError) as error:
        found = str(error)
    if (reply.model.path, reply.model.format) != (str(dest), fmt) or found != reply.model.sha256:
        raise ModelRefused(
            f"{said}: it answered {reply.model.format} at {reply.model.path} with digest "
            f"{reply.model.sha256[:12]}, where {dest} holds {found[:12]}"
        )
    # Read by the first agent that reads the format: its inputs matched with the user's file's.
    reader = next(item for item in work if fmt in item.describe.model_formats)
    path = prepared.uploads.path(reader, dest, reply.model.sha256)
    signature = inspect(reader, agent_pb2.ModelFile(path=path, format=fmt), timeout)
    names = match_inputs(prepared, signature_inputs(signature), f"its {fmt} export")
    return ModelVariant(
        dest,
        fmt,
        reply.model.sha256,
        names,
        tuple(PHASE_NAMES[p] for p in signature.phases if p in PHASE_NAMES),
        dict(signature.unsupported_reasons),
        made_by=f"{name}: {reply.tool}",
        parameters=int(signature.parameters),
    )


def match_inputs(
    prepared: PreparedModel, inputs: Sequence[TensorInfo], what: str
) -> tuple[str, ...]:
    """The export's input names in the order of the user's file's inputs: by name where they
    agree, else in order; ModelRefused when they cannot be the same inputs."""
    own = [t.name for t in prepared.signature.inputs]
    by_name = {t.name: t for t in inputs}
    ordered = [by_name[n] for n in own] if set(by_name) == set(own) else list(inputs)
    if len(ordered) != len(own):
        raise ModelRefused(
            f"--export: {what} takes {len(ordered)} inputs where {prepared.asked.path.name} takes "
            f"{len(own)}"
        )
    for batch, shapes in prepared.shapes.items():
        for mine, theirs in zip(shapes, ordered, strict=True):
            fits = len(mine.shape) == len(theirs.shape) and all(
                d is None or d == m for d, m in zip(theirs.shape, mine.shape, strict=True)
            )
            if mine.dtype != theirs.dtype or not fits:
                raise ModelRefused(
                    f"--export: {what}'s input {theirs.describe()} cannot take "
                    f"{prepared.asked.path.name}'s {mine.describe()} (batch {batch})"
                )
    return tuple(t.name for t in ordered)


def _checked(
    prepared: PreparedModel,
    reader: AgentWork,
    variant: ModelVariant,
    selection: Selection,
    timeout: float | None,
) -> str:
    """One untimed step of the export per batch size on `reader`, against the reference: the
    console's line about it."""
    made = f"{variant.format} export by {variant.made_by} ({variant.path.name})"
    if not prepared.reference:
        return f"{made}: outputs not compared (no inference cells)"
    worst = 0.0
    for batch, reference in prepared.reference.items():
        outputs = untimed_outputs(prepared, reader, batch, selection.seed, timeout)
        difference = model_files.compare_outputs(outputs, reference)
        if not difference.within:
            return (
                f"{made}: its outputs on {reader.handle.name} DIFFER from the reference at batch "
                f"{batch} ({difference.why}); its rows are marked and kept out of verdicts"
            )
        worst = max(worst, difference.max_abs)
    return (
        f"{made}: its outputs on {reader.handle.name} match the reference (largest difference "
        f"{worst:.2g})"
    )
