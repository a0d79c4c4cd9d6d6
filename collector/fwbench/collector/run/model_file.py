"""`collector run --model PATH`: the user's model file as a workload (protocol 1.7).

Before any agent starts, the file is found, its format told and its digest taken
(`asked_model`); its workload ("model:STEM@DIGEST8") joins the run's catalogue. Once the agents
have described themselves, `prepare` asks the first agent that reads the format for the
file's signature, gives every input its shape for each batch size (the open batch axis, and
--input NAME=SHAPE for the others), and has that agent compute the reference outputs: one
untimed step per batch size, before anything is timed. Every inference row then carries how
far its outputs are from the reference's; a row whose outputs differ is kept out of verdicts
(analysis/contenders.py). Agents that do not read the format get unsupported cells saying so."""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.run.plan import Cell, Selection, plan_cells
from fwbench.collector.run.shapes import SelectionError
from fwbench.spec import Catalogue, model_files
from fwbench.spec.enums import PHASE_NAMES, PHASE_VALUES
from fwbench.spec.model_files import ModelFileError, TensorInfo

if TYPE_CHECKING:
    import numpy as np

    from fwbench.collector.run.work import AgentWork

# The reference step: one untimed iteration, no warm-up, whatever the run's loop settings.
_REFERENCE_LOOP = {"warmup_iterations": 0, "min_iterations": 1, "max_iterations": 1}
NOT_COMPARED_TRAIN = "a training step changes the weights: outputs are compared on inference cells"


class ModelRefused(SelectionError):
    """The model cannot be measured as asked: one line, exit 2, before any cell is timed."""


@dataclass(frozen=True)
class ModelAsked:
    """--model and --input, checked: the file's absolute path, format, digest and workload."""

    path: Path
    format: str
    sha256: str
    workload: str
    shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """For run.json (options.model)."""
        return {
            "path": str(self.path),
            "format": self.format,
            "sha256": self.sha256,
            "workload": self.workload,
            "inputs": {name: list(shape) for name, shape in self.shapes.items()},
        }


def parse_input(text: str) -> tuple[str, tuple[int, ...]]:
    """--input NAME=SHAPE, SHAPE as 1x3x224x224 (or with commas): every dimension >= 1."""
    name, sep, shape = text.partition("=")
    dims = shape.replace(",", "x").split("x") if shape else []
    if not sep or not name or not dims or not all(d.isdigit() and int(d) >= 1 for d in dims):
        raise ModelRefused(
            f"--input {text!r}: give NAME=SHAPE with every dimension a positive integer, e.g. "
            "input_ids=8x128"
        )
    return name, tuple(int(d) for d in dims)


def asked_model(path: Path, inputs: Sequence[str]) -> ModelAsked:
    """The checked --model and --input; ModelRefused (one line) when the file cannot be one."""
    shapes = dict(parse_input(text) for text in inputs)
    try:
        fmt = model_files.detect_format(path)
        digest = model_files.digest(path)
    except (ModelFileError, OSError) as error:
        raise ModelRefused(f"--model {error}") from None
    absolute = path.resolve()
    return ModelAsked(absolute, fmt, digest, model_files.workload_name(absolute, digest), shapes)


def with_model(catalogue: Catalogue, asked: ModelAsked | None) -> Catalogue:
    """The catalogue with the model's workload in it (no FLOPs known: flops_forward "0")."""
    if asked is None:
        return catalogue
    workload = model_files.workload_def(asked.workload, f"{asked.path.name} ({asked.format})")
    return dataclasses.replace(
        catalogue, workloads={**catalogue.workloads, asked.workload: workload}
    )


@dataclass
class PreparedModel:
    """The model as this run's agents measure it: its signature (from `reader`), each batch
    size's input shapes and reference outputs."""

    asked: ModelAsked
    reader: str
    signature: agent_pb2.ModelSignature
    shapes: dict[int, tuple[TensorInfo, ...]]
    reference: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)

    @property
    def phases(self) -> tuple[str, ...]:
        return tuple(PHASE_NAMES[p] for p in self.signature.phases if p in PHASE_NAMES)

    def model_file(self, batch_size: int) -> agent_pb2.ModelFile:
        return agent_pb2.ModelFile(
            path=str(self.asked.path),
            format=self.asked.format,
            sha256=self.asked.sha256,
            inputs=[
                agent_pb2.TensorSpec(
                    name=t.name, shape=[int(d or 0) for d in t.shape], dtype=t.dtype
                )
                for t in self.shapes[batch_size]
            ],
        )

    def cells(self, cells: Sequence[Cell], describe: agent_pb2.DescribeResponse) -> list[Cell]:
        """The agent's planned cells with its model cells' reasons settled: none where it reads
        the format and can run the phase, else why not (plan.py knows no model workload)."""
        reads = self.asked.format in describe.model_formats
        reads_what = ", ".join(describe.model_formats) or "none"
        settled = []
        for cell in cells:
            if cell.workload != self.asked.workload:
                settled.append(cell)
                continue
            why = ""
            if not reads:
                why = f"agent reads no {self.asked.format} model files (it reads: {reads_what})"
            elif cell.phase not in self.phases:
                reason = self.signature.unsupported_reasons.get(cell.phase, "")
                why = f"the model does not run {cell.phase} here" + (
                    f": {reason}" if reason else ""
                )
            elif cell.dtype != "float32":
                why = "a model file runs as it was saved: float32 cells only (--dtypes float32)"
            settled.append(dataclasses.replace(cell, unsupported_reason=why))
        return settled

    def columns(self, cell: Cell, result: agent_pb2.RunResult) -> dict[str, Any]:
        """A model row's own columns: the file, and its outputs against the reference's."""
        row: dict[str, Any] = {
            "model_format": self.asked.format,
            "model_sha256": self.asked.sha256,
            "outputs_reference": self.reader,
        }
        reference = self.reference.get(cell.batch_size)
        if cell.phase != "infer" or reference is None:
            row["outputs_note"] = NOT_COMPARED_TRAIN if cell.phase != "infer" else "no reference"
            return row
        try:
            outputs = model_files.output_arrays(result.outputs)
        except ModelFileError as error:
            difference = None
            note = f"outputs unreadable: {error}"
        else:
            difference = model_files.compare_outputs(outputs, reference)
            note = difference.why
        row["outputs_match"] = bool(difference and difference.within)
        row["output_max_abs_diff"] = difference.max_abs if difference else None
        row["output_max_rel_diff"] = difference.max_rel if difference else None
        row["outputs_note"] = note or None
        return row


def plan_all(
    work: Sequence[AgentWork],
    catalogue: Catalogue,
    selection: Selection,
    asked: ModelAsked | None,
    timeout: float | None,
) -> PreparedModel | None:
    """Every agent's cells (plan.py), and the model (--model), prepared before anything is
    timed, when the run has one: its cells' reasons settled per agent."""
    model = None
    if asked is not None:
        model = prepare(asked, work, selection, timeout)
    for item in work:
        item.cells = plan_cells(item.handle.name, item.describe, catalogue, selection)
        if model is not None:
            item.cells = model.cells(item.cells, item.describe)
    return model


def prepare(
    asked: ModelAsked, work: Sequence[AgentWork], selection: Selection, timeout: float | None
) -> PreparedModel:
    """The signature, the shapes and the reference outputs; ModelRefused when no agent reads
    the format, the file is not a model, an input's shape is not known, or the reference agent
    cannot run it."""
    readers = [item for item in work if asked.format in item.describe.model_formats]
    if not readers:
        said = "; ".join(
            f"{item.handle.name} reads {', '.join(item.describe.model_formats) or 'none'}"
            for item in work
        )
        raise ModelRefused(
            f"--model {asked.path.name}: no agent of this run reads {asked.format} files "
            f"({model_files.FORMATS[asked.format]}): {said}"
        )
    reader = readers[0]
    client = reader.handle.client
    try:
        signature = client.inspect_model(
            agent_pb2.InspectModelRequest(model=_file(asked)), timeout or 300.0
        )
    except grpc.RpcError as error:
        raise ModelRefused(
            f"--model {asked.path.name}: {reader.handle.name} cannot read it: {error.details()}"
        ) from None
    inputs = tuple(
        TensorInfo(t.name, tuple(None if d < 0 else int(d) for d in t.shape), t.dtype)
        for t in signature.inputs
    )
    fixed = model_files.batch_fixed_at(inputs)
    other = [b for b in selection.batch_sizes if fixed is not None and b != fixed]
    if other:
        raise ModelRefused(
            f"--model {asked.path.name} fixes its batch at {fixed}: give --batch-sizes {fixed} "
            f"(not {other[0]})"
        )
    try:
        shapes = {
            batch: model_files.resolve_shapes(inputs, batch, asked.shapes)
            for batch in selection.batch_sizes
        }
    except ModelFileError as error:
        raise ModelRefused(f"--model {asked.path.name}: {error}") from None
    prepared = PreparedModel(asked, reader.handle.name, signature, shapes)
    if "infer" in selection.phases:
        for batch in selection.batch_sizes:
            prepared.reference[batch] = _reference(prepared, reader, batch, selection.seed, timeout)
    return prepared


def _file(asked: ModelAsked) -> agent_pb2.ModelFile:
    return agent_pb2.ModelFile(path=str(asked.path), format=asked.format, sha256=asked.sha256)


def _reference(
    prepared: PreparedModel, reader: AgentWork, batch: int, seed: int, timeout: float | None
) -> dict[str, np.ndarray]:
    """One untimed step of the reader at `batch`: its outputs, the run's reference."""
    request = agent_pb2.RunRequest(
        run_id=f"reference-{secrets.token_hex(8)}",
        workload=prepared.asked.workload,
        phase=PHASE_VALUES["infer"],
        batch_size=batch,
        seed=seed,
        model=prepared.model_file(batch),
        min_seconds=0.0,
        **_REFERENCE_LOOP,  # type: ignore[arg-type]
    )
    name = reader.handle.name
    try:
        result = next(
            (e.result for e in reader.handle.client.run(request, timeout) if e.HasField("result")),
            None,
        )
    except grpc.RpcError as error:
        raise ModelRefused(
            f"--model {prepared.asked.path.name}: the reference agent {name} could not run it at "
            f"batch {batch}: {error.details()}"
        ) from None
    if result is None or not result.outputs:
        raise ModelRefused(f"the reference agent {name} sent no outputs for the model")
    try:
        return model_files.output_arrays(result.outputs)
    except ModelFileError as error:
        raise ModelRefused(f"the reference agent {name} sent unreadable outputs: {error}") from None
