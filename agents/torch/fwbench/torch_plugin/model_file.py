"""The user's programs saved by `torch.export.save` (capability "model_files", format
"torch_export", a `.pt2` file): the signature read from the program's graph, the program run
as the module `ep.module()` gives, eagerly or under the plugin's torch.compile.

Names. The inputs are the program's user inputs in order, named as its graph signature names
them (the forward's parameter names). The outputs are named by position: `output_0`,
`output_1`, ... in the order of the program's outputs flattened (torch's pytree: a tuple's
items, a dict's values in its keys' order, nested ones depth first), tensors only (an output
that is not a tensor keeps its number and is not sent). The same rule names every other
runtime's outputs of one network: an ONNX export made with `torch.onnx.export(...,
output_names=["output_0", ...])` is compared to this one output by output.

Only inference: an exported program carries no loss or optimizer. The loaded program is kept
per file and digest, so that the cells of one file (batch sizes, modes) read it once."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils import _pytree as pytree

from fwbench.runtime.model_files import ModelSignature, reject_unreadable
from fwbench.runtime.plugin import FlopCount, UnsupportedWorkload, WorkloadSpec
from fwbench.spec import model_files
from fwbench.spec.model_files import DTYPES, TensorInfo

FORMAT = "torch_export"
TRAIN_REASON = "an exported program carries no loss or optimizer: inference only"
_KEPT = 2  # programs kept loaded: the file of a run, and one more

Wrap = Callable[[Callable[..., object]], Callable[..., object]]


def available() -> bool:
    """Whether this torch reads exported programs (torch.export.load came with 2.1)."""
    export = getattr(torch, "export", None)
    return export is not None and hasattr(export, "load")


_programs: dict[tuple[str, str], torch.export.ExportedProgram] = {}
_lock = threading.Lock()


def load(path: str, sha256: str = "") -> torch.export.ExportedProgram:
    """The program in `path` (kept per path and digest); ModelRejected, one line, for a file
    torch cannot read."""
    key = (path, sha256 or model_files.digest(Path(path)))
    with _lock:
        program = _programs.get(key)
    if program is not None:
        return program
    try:
        program = torch.export.load(path)
    except Exception as error:  # noqa: BLE001 (the framework's reason, in one line)
        raise reject_unreadable(path, FORMAT, error) from None
    with _lock:
        while len(_programs) >= _KEPT:
            _programs.pop(next(iter(_programs)))
        _programs[key] = program
    return program


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _tensor(name: str, value: object, kind: str) -> TensorInfo:
    """A placeholder's or output's meta["val"] (a fake tensor) as a TensorInfo; a symbolic
    dimension is None."""
    if not isinstance(value, torch.Tensor):
        raise ValueError(f"{kind} {name!r} is not a tensor ({type(value).__name__})")
    dtype = _dtype_name(value.dtype)
    if kind == "input" and dtype not in DTYPES:
        raise ValueError(f"input {name!r} has dtype {dtype}; fwbench feeds {', '.join(DTYPES)}")
    shape = tuple(d if isinstance(d, int) else None for d in value.shape)
    return TensorInfo(name, shape, dtype)


@dataclass(frozen=True)
class Program:
    """What a run needs of an exported program: its input names in order and its outputs."""

    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]


def read_signature(program: torch.export.ExportedProgram) -> Program:
    """The user inputs and outputs of `program`; ValueError for an input that is not a tensor
    fwbench can make."""
    kinds = torch.export.graph_signature
    nodes = {node.name: node for node in program.graph.nodes}
    inputs = []
    for spec in program.graph_signature.input_specs:
        if spec.kind != kinds.InputKind.USER_INPUT:
            continue
        if not isinstance(spec.arg, kinds.TensorArgument) or spec.arg.name not in nodes:
            raise ValueError(f"input {spec.arg} is not a tensor: fwbench feeds tensors only")
        inputs.append(_tensor(spec.arg.name, nodes[spec.arg.name].meta.get("val"), "input"))
    outputs = []
    users = [
        s for s in program.graph_signature.output_specs if s.kind == kinds.OutputKind.USER_OUTPUT
    ]
    for index, spec in enumerate(users):
        node = nodes.get(getattr(spec.arg, "name", ""))
        value = None if node is None else node.meta.get("val")
        if isinstance(spec.arg, kinds.TensorArgument) and isinstance(value, torch.Tensor):
            outputs.append(_tensor(f"output_{index}", value, "output"))
    return Program(tuple(inputs), tuple(outputs))


def inspect(path: str) -> ModelSignature:
    program = load(path)
    try:
        found = read_signature(program)
    except Exception as error:  # noqa: BLE001 (a graph this reader does not know)
        raise reject_unreadable(path, FORMAT, error) from None
    ranges = ", ".join(f"{s}: {r}" for s, r in program.range_constraints.items())
    details = {"graph_nodes": str(len(program.graph.nodes))}
    if ranges:
        details["range_constraints"] = ranges
    return ModelSignature(
        inputs=found.inputs,
        outputs=found.outputs,
        parameters=sum(int(t.numel()) for t in program.state_dict.values()),
        phases=("infer",),
        unsupported_reasons={"train": TRAIN_REASON},
        details=details,
    )


def count_flops(forward: Callable[[], object]) -> FlopCount:
    """One forward pass counted by PyTorch's FlopCounterMode (torch 2.1 and later): the
    eager module (a compiled one's kernels are Triton's or C++'s, which the mode does not see;
    TorchScript's interpreter dispatches through it)."""
    try:
        from torch.utils.flop_counter import FlopCounterMode
    except ImportError:
        return FlopCount(0.0, not_counted=f"torch {torch.__version__} has no FlopCounterMode")
    counter = FlopCounterMode(display=False)
    with counter, torch.inference_mode():
        forward()
    name = f"{FlopCounterMode.__module__}.FlopCounterMode (torch {torch.__version__})"
    return FlopCount(float(counter.get_total_flops()), name)


def numpy_of(value: torch.Tensor) -> np.ndarray:
    value = value.detach().cpu()
    if value.dtype == torch.bfloat16:  # NumPy has no bfloat16: float32 holds it
        value = value.float()
    return value.numpy()


class ModelRun:
    """One cell of an exported program: the module on the device, its inputs there, the
    forward pass eager or compiled (the plugin's wrapper), under inference_mode."""

    def __init__(
        self,
        program: torch.export.ExportedProgram,
        inputs: Mapping[str, np.ndarray],
        device: torch.device,
        wrap: Wrap,
    ) -> None:
        names = [t.name for t in read_signature(program).inputs]
        missing = [name for name in names if name not in inputs]
        if missing:
            raise UnsupportedWorkload(f"the cell gives no input {missing[0]!r} of the program")
        if device.type != "cpu":
            program = torch.export.passes.move_to_device_pass(program, device)
        flat = [torch.from_numpy(np.ascontiguousarray(inputs[n])).to(device) for n in names]
        self.args, self.kwargs = pytree.tree_unflatten(flat, program.call_spec.in_spec)
        self.module = program.module()
        self.forward = wrap(self.module)

    def step(self) -> object:
        with torch.inference_mode():
            return self.forward(*self.args, **self.kwargs)

    def flops(self) -> FlopCount:
        return count_flops(lambda: self.module(*self.args, **self.kwargs))

    def outputs(self) -> dict[str, np.ndarray]:
        leaves = pytree.tree_leaves(self.step())
        return {
            f"output_{index}": numpy_of(leaf)
            for index, leaf in enumerate(leaves)
            if isinstance(leaf, torch.Tensor)
        }


def build(spec: WorkloadSpec, device: torch.device, wrap: Wrap) -> ModelRun:
    """The cell's run: the program (loaded once per file), its inputs made from the seed."""
    model = spec.model
    assert model is not None  # the plugin calls it for model cells only
    if spec.phase != "infer":
        raise UnsupportedWorkload(f"phase {spec.phase} for {spec.workload.name}: {TRAIN_REASON}")
    program = load(model.path, model.sha256)
    return ModelRun(program, model.arrays(spec.seed), device, wrap)
