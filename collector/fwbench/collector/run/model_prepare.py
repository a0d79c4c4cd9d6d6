"""The user's model made ready before anything is timed (`collector run --model`).

Once the agents have described themselves, `prepare` asks the first agent that reads the
file's format (the reference) for its signature, gives every input its shape for each batch
size (the open batch axis, and --input NAME=SHAPE for the others), and has that agent compute
the reference outputs: one untimed step per batch size, in which it also counts the model's
FLOPs with its framework's own counter (charged to every agent's row of the file). With
--export, the agents' own exporters then make the formats other agents read
(model_export.py), each checked against the reference the same way. Every inference row then
carries how far its outputs are from the reference's; a row whose outputs differ is kept out
of verdicts (analysis/contenders.py). Agents that read none of the model's files get
unsupported cells saying so."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.run.model_calls import inspect, signature_inputs, untimed_outputs
from fwbench.collector.run.model_export import export_all, exporters
from fwbench.collector.run.model_file import ModelAsked, ModelRefused
from fwbench.collector.run.model_prepared import PreparedModel
from fwbench.collector.run.model_sample import sample_copy, with_batch
from fwbench.collector.run.model_upload import Uploads
from fwbench.collector.run.plan import Selection, plan_cells
from fwbench.spec import Catalogue, model_files
from fwbench.spec.model_files import ModelFileError

if TYPE_CHECKING:
    from fwbench.collector.run.options import RunOptions
    from fwbench.collector.run.work import AgentWork


def plan_all(
    work: Sequence[AgentWork],
    catalogue: Catalogue,
    selection: Selection,
    options: RunOptions,
    out_dir: Path,
    say: Callable[[str], object] = lambda _: None,
) -> PreparedModel | None:
    """Every agent's cells (plan.py), and the model (--model), prepared before anything is
    timed, when the run has one: its exports (--export) made into OUT_DIR/models/ and each
    agent's model cells settled."""
    model = None
    asked, timeout = options.model, options.limits.cell_timeout_seconds
    # Absolute: the agents write there, each in a working folder of its own.
    models = (out_dir / "models").absolute()
    if asked is not None:
        resting = [item for item in work if item.idle]  # given back: woken for the model
        model = prepare(asked, work, selection, timeout, models, say)
        model.exporters = exporters(model, work)
        if asked.export:
            export_all(model, work, selection, timeout, models, say)
        for item in resting:
            item.rest()  # holds nothing again while the others measure
    for item in work:
        item.cells = plan_cells(item.handle.name, item.describe, catalogue, selection)
        if model is not None:
            item.cells = model.cells(item.cells, item.describe)
            runs = model.asked.workload
            if any(c.workload == runs and not c.unsupported_reason for c in item.cells):
                model.check_files(item)  # sent before its cells (execute.py), if it can take them
    return model


def prepare(
    asked: ModelAsked,
    work: Sequence[AgentWork],
    selection: Selection,
    timeout: float | None,
    folder: Path,
    say: Callable[[str], object] = lambda _: None,
) -> PreparedModel:
    """The signature, the shapes (and the run's copy of --inputs, in `folder`) and the
    reference outputs; ModelRefused when no agent reads the format, the file is not a model,
    an input's shape is not known, the sample inputs cannot be its inputs, or the reference
    agent cannot run it."""
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
    uploads = Uploads(timeout, say)
    seen_at = uploads.path(reader, asked.path, asked.sha256)
    signature = inspect(reader, _file(Path(seen_at), asked.format, asked.sha256), timeout)
    inputs = signature_inputs(signature)
    fixed = model_files.batch_fixed_at(inputs)
    other = [b for b in selection.batch_sizes if fixed is not None and b != fixed]
    if other:
        raise ModelRefused(
            f"--model {asked.path.name} fixes its batch at {fixed}: give --batch-sizes {fixed} "
            f"(not {other[0]})"
        )
    sample: tuple[Path, str] | None = None
    tails: dict[str, tuple[int, ...]] = {}
    if asked.sample is not None:
        path, digest, tails = sample_copy(asked, inputs, selection.batch_sizes, folder)
        sample = (path, digest)
    try:
        shapes = {
            batch: model_files.resolve_shapes(inputs, batch, with_batch(asked.shapes, tails, batch))
            for batch in selection.batch_sizes
        }
    except ModelFileError as error:
        raise ModelRefused(f"--model {asked.path.name}: {error}") from None
    prepared = PreparedModel(asked, reader.handle.name, signature, shapes, sample=sample)
    prepared.uploads = uploads
    unsent = prepared.send_files(reader)  # the sample inputs too
    if unsent:
        raise ModelRefused(unsent)
    for batch in selection.batch_sizes:  # a training row's FLOPs are counted on inference
        prepared.reference[batch] = untimed_outputs(
            prepared, reader, batch, selection.seed, timeout, count_flops=True
        )
    return prepared


def _file(path: Path, fmt: str, sha256: str) -> agent_pb2.ModelFile:
    return agent_pb2.ModelFile(path=str(path), format=fmt, sha256=sha256)
