"""A user's model file on the agent's side (protocol 1.7): the request checked, the file found
and its digest verified, the signature answered, the inputs made and the outputs sent.

A plugin that reads model files declares the optional capability "model_files" with the
formats it reads (`model_formats`, names from fwbench/spec/model_files.py) and implements
`inspect_model(path, format) -> ModelSignature`; its `build` then gets WorkloadSpec.model set
for such a cell and returns a BuiltStep with `outputs` (docs/plugins.md)."""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

from fwbench.agent.v1 import agent_pb2
from fwbench.runtime.model_request import ModelRequest
from fwbench.runtime.plugin import Capability, UnsupportedWorkload, WorkloadSpec
from fwbench.runtime.world import World
from fwbench.spec import model_files, sample_inputs
from fwbench.spec.catalogue import CatalogueError, UnknownWorkload, WorkloadDef
from fwbench.spec.enums import DTYPE_NAMES, PHASE_NAMES, PHASE_VALUES
from fwbench.spec.model_files import TensorInfo

if TYPE_CHECKING:
    pass


class ModelRejected(CatalogueError):
    """The file is not a model of its format, or not the one the client named (its digest):
    INVALID_ARGUMENT naming "model"."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "model")


class ModelMissing(UnknownWorkload):
    """No file or folder at the path as this agent sees it: NOT_FOUND."""

    def __init__(self, message: str) -> None:
        super().__init__(message, "model")


@dataclass(frozen=True)
class ModelSignature:
    """What a plugin's `inspect_model` answers (agent.proto's ModelSignature)."""

    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    parameters: int = 0  # 0 when unknown
    phases: tuple[str, ...] = ("infer",)
    unsupported_reasons: Mapping[str, str] = field(default_factory=dict)  # "train" -> why
    details: Mapping[str, str] = field(default_factory=dict)


class ModelPlugin(Protocol):
    model_formats: tuple[str, ...]
    # Phases, dtypes and modes it runs model files in; modes[0] is the default.
    model_capability: Capability

    def inspect_model(self, path: str, format: str) -> ModelSignature: ...


_digests: dict[tuple[str, int, int], str] = {}
_digests_lock = threading.Lock()


def file_digest(path: Path) -> str:
    """The file's digest (model_files.digest), computed once per path, size and modification
    time: checked_file's, and a plugin's key for what it loaded from the file."""
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    with _digests_lock:
        known = _digests.get(key)
    if known is None:
        known = model_files.digest(path)
        with _digests_lock:
            _digests[key] = known
    return known


T = TypeVar("T")


class LoadedModels(Generic[T]):
    """What a plugin loaded from model files, by path and digest (the request's, else
    file_digest's), the `size` most recently used: InspectModel and the cells of one run load
    a file once, and a file changed at the same path is loaded again."""

    def __init__(self, load: Callable[[str], T], size: int = 2) -> None:
        self.load = load
        self.size = size
        self._loaded: OrderedDict[tuple[str, str], T] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, path: str, sha256: str = "") -> T:
        key = (path, sha256.lower() or file_digest(Path(path)))
        with self._lock:
            if key in self._loaded:
                self._loaded.move_to_end(key)
                return self._loaded[key]
        loaded = self.load(path)  # not under the lock: loading a model takes seconds
        with self._lock:
            self._loaded[key] = loaded
            while len(self._loaded) > self.size:
                self._loaded.popitem(last=False)
        return loaded


def checked_file(message: agent_pb2.ModelFile, formats: Sequence[str]) -> Path:
    """The path of a ModelFile this agent can read: UnsupportedWorkload for a format it does
    not read, ModelMissing for no file, ModelRejected for a digest that differs."""
    if message.format not in formats:
        offered = ", ".join(formats) or "none"
        raise UnsupportedWorkload(
            f"this agent reads no {message.format or 'unnamed'} model files; it reads: {offered}"
        )
    path = Path(message.path)
    if not message.path or not path.exists():
        raise ModelMissing(f"model: no file or folder at {message.path!r} on this agent")
    if message.sha256:
        found = file_digest(path)
        if found != message.sha256.lower():
            raise ModelRejected(
                f"model: {message.path} has digest {found[:12]}..., not the "
                f"{message.sha256[:12]}... asked for: another file than the client's"
            )
    return path


def model_spec_parts(
    request: agent_pb2.RunRequest, formats: Sequence[str]
) -> tuple[WorkloadDef, ModelRequest]:
    """The workload and model of a RunRequest with `model` set, or CatalogueError /
    UnsupportedWorkload saying what is wrong."""
    try:
        model_files.check_workload_name(request.workload)
    except model_files.ModelFileError as error:
        raise CatalogueError(str(error), "workload") from None
    if request.params:
        raise CatalogueError(
            f"a model file takes no shape parameters (got {', '.join(sorted(request.params))})",
            f"params.{sorted(request.params)[0]}",
        )
    if not 1 <= request.batch_size <= model_files.MAX_BATCH_SIZE:
        raise CatalogueError(
            f"batch_size={request.batch_size} is out of range: allowed "
            f"1..{model_files.MAX_BATCH_SIZE}",
            "batch_size",
        )
    if request.phase not in PHASE_NAMES:
        raise CatalogueError("phase must be PHASE_TRAIN or PHASE_INFER", "phase")
    path = checked_file(request.model, formats)
    inputs = tuple(_input(spec) for spec in request.model.inputs)
    if not inputs:
        raise CatalogueError("model.inputs: every input of the model, with its shape", "model")
    sample = _sample(request.model, inputs)
    workload = model_files.workload_def(request.workload, f"{path.name} ({request.model.format})")
    model = ModelRequest(
        str(path),
        request.model.format,
        request.model.sha256,
        inputs,
        sample,
        count_flops=request.count_flops,
    )
    return workload, model


def _sample(message: agent_pb2.ModelFile, inputs: Sequence[TensorInfo]) -> str:
    """ModelFile.inputs_path checked (protocol 1.8): there, with its digest, able to give the
    cell's inputs; "" where the inputs come from the seed."""
    if not message.inputs_path:
        return ""
    path = Path(message.inputs_path)
    if not path.is_file():
        raise ModelMissing(f"model.inputs_path: no file at {message.inputs_path!r} on this agent")
    found = file_digest(path)
    if message.inputs_sha256 and found != message.inputs_sha256.lower():
        raise ModelRejected(
            f"model.inputs_path: {path.name} has digest {found[:12]}..., not the "
            f"{message.inputs_sha256[:12]}... asked for"
        )
    try:
        sample_inputs.feed(path, inputs)
    except model_files.ModelFileError as error:
        raise ModelRejected(f"model.inputs_path: {error}") from None
    return str(path)


def _input(spec: agent_pb2.TensorSpec) -> TensorInfo:
    if spec.dtype not in model_files.DTYPES:
        raise CatalogueError(
            f"model.inputs {spec.name!r}: dtype {spec.dtype!r}; one of "
            + ", ".join(model_files.DTYPES),
            "model",
        )
    if not spec.shape or any(d < 1 for d in spec.shape):
        raise CatalogueError(
            f"model.inputs {spec.name!r}: shape {list(spec.shape)} needs every dimension >= 1",
            "model",
        )
    return TensorInfo(spec.name, tuple(int(d) for d in spec.shape), spec.dtype)


def inspect(
    plugin: ModelPlugin, request: agent_pb2.InspectModelRequest
) -> agent_pb2.ModelSignature:
    """InspectModel: the file checked as a Run checks it, then the plugin's signature."""
    path = checked_file(request.model, plugin.model_formats)
    signature = plugin.inspect_model(str(path), request.model.format)
    return agent_pb2.ModelSignature(
        inputs=[_spec_message(t) for t in signature.inputs],
        outputs=[_spec_message(t) for t in signature.outputs],
        parameters=signature.parameters,
        phases=[PHASE_VALUES[p] for p in signature.phases],
        unsupported_reasons=dict(signature.unsupported_reasons),
        details=dict(signature.details),
    )


def _spec_message(tensor: TensorInfo) -> agent_pb2.TensorSpec:
    return agent_pb2.TensorSpec(
        name=tensor.name, shape=[-1 if d is None else d for d in tensor.shape], dtype=tensor.dtype
    )


def reject_unreadable(path: str, format: str, error: BaseException) -> ModelRejected:
    """A plugin's framework could not read the file: one line naming it and the error."""
    text = " ".join(str(error).split())[:300] or type(error).__name__
    name = os.path.basename(path.rstrip("/")) or path
    return ModelRejected(f"model: {name} is not a readable {format} model: {text}")


def model_workload_spec(
    request: agent_pb2.RunRequest,
    plugin: ModelPlugin,
    formats: Sequence[str],
    world: World | None,
) -> WorkloadSpec:
    """The WorkloadSpec of a RunRequest with `model` set: CatalogueError for a value outside
    its range, UnsupportedWorkload for what the plugin does not run, ModelMissing or
    ModelRejected for the file."""
    if world is not None:
        raise UnsupportedWorkload("a model file runs on an agent alone, not as a rank of a world")
    if not formats:
        raise UnsupportedWorkload("this agent reads no model files (Describe.model_formats)")
    capability: Capability = plugin.model_capability  # registry-checked
    workload, model = model_spec_parts(request, formats)
    phase = PHASE_NAMES[request.phase]
    if phase not in capability.phases:
        raise UnsupportedWorkload(
            f"this agent runs model files in {', '.join(capability.phases)} only"
        )
    dtype = DTYPE_NAMES.get(request.dtype)
    if dtype is None:
        raise CatalogueError(f"unknown dtype value {request.dtype}", "dtype")
    if dtype not in capability.dtypes:
        raise UnsupportedWorkload(
            f"model files run in {', '.join(capability.dtypes)} here, not {dtype}"
        )
    mode = request.mode or capability.modes[0]
    if mode not in capability.modes:
        raise UnsupportedWorkload(
            f"mode {mode!r} not offered for model files; offered: {', '.join(capability.modes)}"
        )
    if request.strategy:
        raise UnsupportedWorkload(f"strategy {request.strategy!r}: a model file runs alone")
    if request.threads > 1024:
        raise CatalogueError(
            f"threads={request.threads} is out of range: allowed 0..1024", "threads"
        )
    return WorkloadSpec(
        workload=workload,
        phase=phase,
        batch_size=request.batch_size,
        dtype=dtype,
        params={},
        threads=request.threads,
        seed=request.seed,
        mode=mode,
        model=model,
    )
