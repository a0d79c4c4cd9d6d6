"""The user's model as this run's agents measure it (model_prepare.py makes it): the user's
file and the files exported from it (--export, model_export.py), which of them each agent runs,
each batch size's input shapes, the reference outputs, and a model row's own columns.

An agent runs the user's file when it reads its format, else the first export it reads. An
export's inputs are the user's file's inputs, matched by name where the names agree and by
position where an exporter renamed them: each agent is sent the same shapes in the same order
under its file's own names, so every agent feeds the same numbers (model_files.make_inputs)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.run.model_file import ModelAsked, ModelRefused
from fwbench.collector.run.model_upload import Uploads
from fwbench.collector.run.plan import Cell
from fwbench.spec import model_files
from fwbench.spec.enums import PHASE_NAMES
from fwbench.spec.model_files import ModelFileError, TensorInfo

if TYPE_CHECKING:
    import numpy as np

    from fwbench.collector.run.work import AgentWork

NOT_COMPARED_TRAIN = "a training step changes the weights: outputs are compared on inference cells"


@dataclass(frozen=True)
class ModelVariant:
    """One file of the model: the user's, or one exported from it."""

    path: Path
    format: str
    sha256: str
    names: tuple[str, ...]  # its inputs' names, in the order of the user's file's inputs
    phases: tuple[str, ...]  # the phases its readers can run it in
    unsupported_reasons: dict[str, str] = field(default_factory=dict)
    made_by: str = ""  # an export: "AGENT: TOOL"; the user's file: ""
    parameters: int = 0  # as its signature counts them; 0: unknown


@dataclass
class PreparedModel:
    """The model as this run's agents measure it: its signature (from `reader`), its files by
    format (the user's first), each batch size's input shapes and reference outputs, and the
    format of the file each agent runs (settled by `cells`)."""

    asked: ModelAsked
    reader: str
    signature: agent_pb2.ModelSignature
    shapes: dict[int, tuple[TensorInfo, ...]]
    reference: dict[int, dict[str, np.ndarray]] = field(default_factory=dict)
    variants: dict[str, ModelVariant] = field(default_factory=dict)
    runs: dict[str, str] = field(default_factory=dict)  # agent -> format of its file
    # Formats an agent of the run could export the file to, and which one (hints without
    # --export).
    exporters: dict[str, str] = field(default_factory=dict)
    sample: tuple[Path, str] | None = None  # --inputs: the run's copy and its digest
    # Each batch size's forward FLOPs, as the reference's framework counted them (1.9).
    flops: dict[int, agent_pb2.FlopCount] = field(default_factory=dict)
    # Files sent to agents that do not see this host's (model_upload.py), and where they are.
    uploads: Uploads = field(default_factory=Uploads)

    def __post_init__(self) -> None:
        if not self.variants:
            names = tuple(t.name for t in self.signature.inputs)
            phases = tuple(PHASE_NAMES[p] for p in self.signature.phases if p in PHASE_NAMES)
            reasons = dict(self.signature.unsupported_reasons)
            own = ModelVariant(
                self.asked.path,
                self.asked.format,
                self.asked.sha256,
                names,
                phases,
                reasons,
                parameters=int(self.signature.parameters),
            )
            self.variants[self.asked.format] = own

    def variant_of(self, agent: str) -> ModelVariant:
        return self.variants[self.runs.get(agent, self.asked.format)]

    def model_file(self, batch_size: int, agent: str = "") -> agent_pb2.ModelFile:
        """The RunRequest.model of `agent`'s cell at `batch_size` (the reference's: "")."""
        variant = self.variant_of(agent)
        sample_path, sample_sha256 = self.sample or ("", "")
        if sample_path:
            sample_path = self.uploads.known(agent, sample_path)
        return agent_pb2.ModelFile(
            path=self.uploads.known(agent, variant.path),
            format=variant.format,
            sha256=variant.sha256,
            inputs_path=str(sample_path),
            inputs_sha256=sample_sha256,
            inputs=[
                agent_pb2.TensorSpec(name=name, shape=[int(d or 0) for d in t.shape], dtype=t.dtype)
                for name, t in zip(variant.names, self.shapes[batch_size], strict=True)
            ],
        )

    def _files(self, agent: str) -> list[tuple[Path, str]]:
        """What `agent` reads of the model: the file it runs, and the sample inputs."""
        variant = self.variant_of(agent)
        return [(variant.path, variant.sha256), *([self.sample] if self.sample else [])]

    def check_files(self, item: AgentWork) -> None:
        """ModelRefused, before anything is timed, when `item` does not see this host's files
        and cannot take them (model_upload.py)."""
        for path, _ in self._files(item.handle.name):
            self.uploads.check(item, path)

    def send_files(self, item: AgentWork) -> str:
        """The files `item` reads sent to its current process where it does not see this
        host's files (each process once: a pod started again may be on another node); why
        they could not be, or ""."""
        try:
            for path, sha256 in self._files(item.handle.name):
                self.uploads.path(item, path, sha256)
        except ModelRefused as error:
            return str(error)
        return ""

    def cells(self, cells: Sequence[Cell], describe: agent_pb2.DescribeResponse) -> list[Cell]:
        """The agent's planned cells with its model cells' reasons settled: none where it reads
        one of the model's files and can run the phase and mode, else why not (plan.py planned
        the modes from Describe.model_files); the file it runs noted in `runs`."""
        agent = next((c.agent for c in cells), "")
        read = [f for f in self.variants if f in describe.model_formats]
        if read:
            self.runs[agent] = read[0]
        settled = []
        for cell in cells:
            if cell.workload != self.asked.workload:
                settled.append(cell)
                continue
            why = self._why_not(cell, describe, read[0] if read else "")
            if read and not why:  # a mode it lacks (plan.py, from Describe.model_files)
                why = cell.unsupported_reason
            settled.append(dataclasses.replace(cell, unsupported_reason=why))
        return settled

    def _why_not(self, cell: Cell, describe: agent_pb2.DescribeResponse, fmt: str) -> str:
        if not fmt:
            formats = "/".join(self.variants)
            why = (
                f"agent reads no {formats} model files (it reads: "
                f"{', '.join(describe.model_formats) or 'none'})"
            )
            hint = [
                f"{f} with {a}" for f, a in self.exporters.items() if f in describe.model_formats
            ]
            return why + (f"; --export makes {hint[0]}" if hint else "")
        variant = self.variants[fmt]
        if cell.phase not in variant.phases:
            reason = variant.unsupported_reasons.get(cell.phase, "")
            what = "the model" if not variant.made_by else f"its {fmt} export"
            return f"{what} does not run {cell.phase} here" + (f": {reason}" if reason else "")
        if cell.dtype != "float32":
            return "a model file runs as it was saved: float32 cells only (--dtypes float32)"
        return ""

    def flops_columns(self, cell: Cell, train_factor: float) -> dict[str, Any]:
        """A model row's FLOPs: the reference's count at the cell's batch size, for every
        agent's row of the file (as a catalogue cell's formula is for every agent), a training
        step charged `train_factor` forward passes as the catalogue charges it; the counter
        that counted, or why none did. And the arithmetic intensity of the catalogue's
        minimum-traffic model: the weights read once, the inputs and outputs moved."""
        count = self.flops.get(cell.batch_size)
        if count is None or not count.forward_flops > 0:
            why = count.not_counted if count is not None else "no reference step at this batch"
            return {"flops_per_item": None, "flops_counter": f"not counted: {why}"}
        factor = train_factor if cell.phase == "train" else 1.0
        flops = count.forward_flops * factor
        columns: dict[str, Any] = {
            "flops_per_item": flops / cell.batch_size,
            "flops_counter": f"{self.reader}: {count.counter}",
        }
        moved = self._bytes_moved(cell.batch_size)
        if moved:
            columns["arithmetic_intensity"] = flops / (moved * factor)
        return columns

    def _bytes_moved(self, batch: int) -> int:
        """The weights (float32), the inputs and the outputs at `batch` (the signature's
        outputs, the batch axis its first open one); 0 when the weights or an output's size
        are not known."""
        import numpy as np

        parameters = self.variants[self.asked.format].parameters
        outputs = []
        for tensor in self.signature.outputs:
            dims = [int(d) for d in tensor.shape]
            if -1 in dims:
                dims[dims.index(-1)] = batch
            outputs.append((dims, tensor.dtype))
        if not parameters or any(d < 0 for dims, _ in outputs for d in dims):
            return 0
        tensors = [*((t.shape, t.dtype) for t in self.shapes[batch]), *outputs]
        return 4 * parameters + sum(
            math.prod(int(d or 0) for d in shape) * np.dtype(dtype).itemsize
            for shape, dtype in tensors
        )

    def columns(self, cell: Cell, result: agent_pb2.RunResult) -> dict[str, Any]:
        """A model row's own columns: the file, and its outputs against the reference's."""
        variant = self.variant_of(cell.agent)
        row: dict[str, Any] = {
            "model_format": variant.format,
            "model_sha256": variant.sha256,
            "model_export": variant.made_by or None,
            "model_parameters": variant.parameters or None,
            "model_bytes": model_files.size(variant.path),
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
