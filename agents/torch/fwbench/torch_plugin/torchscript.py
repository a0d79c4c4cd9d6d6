"""TorchScript files (format "torchscript", `.pt` or `.torchscript`; capability "model_files"):
what every torch since 1.0 reads, where torch.export's programs need 2.1 (the Debian torch
images' 1.13 among them). A TorchScript file keeps its code and weights but not its inputs'
shapes or dtypes, so fwbench reads those a file carries in an extra file of its archive,
`fwbench/signature.json` (SIGNATURE): {"inputs": [{"name", "shape" (null: open), "dtype"}],
"outputs": [...]}. `--export` writes it with the program traced (below); a TorchScript file
saved by hand adds it with `torch.jit.save(module, path, _extra_files={...})`
(docs/your-model.md). Without it the file is refused in one line.

Names and outputs follow model_file.py's rules (outputs `output_0`, ... in pytree order). A
TorchScript module runs as it was scripted or traced: eager mode only, inference only.

Export (capability "model_export"): an exported program (`.pt2`) traced into TorchScript with
`torch.jit.trace` on its module at the program's shapes (an open dimension at 2), saved with
its signature; the collector then checks its outputs against the program's at every batch
size before anything is timed, which catches a trace that did not generalise."""

from __future__ import annotations

import json
import threading
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils import _pytree as pytree

from fwbench.runtime.model_files import ModelSignature, reject_unreadable
from fwbench.runtime.plugin import FlopCount, UnsupportedWorkload, WorkloadSpec
from fwbench.spec import model_files
from fwbench.spec.model_files import DTYPES, TensorInfo
from fwbench.torch_plugin import model_file

FORMAT = "torchscript"
SIGNATURE = "fwbench/signature.json"
MODE = "eager"
TRAIN_REASON = "a TorchScript file carries no loss or optimizer: inference only"
_KEPT = 2  # modules kept loaded: the file of a run, and one more

_loaded: dict[tuple[str, str], tuple[torch.jit.ScriptModule, model_file.Program]] = {}
_lock = threading.Lock()


def _infos(items: Any, kind: str) -> tuple[TensorInfo, ...]:
    infos = []
    for item in items:
        shape = tuple(None if d is None else int(d) for d in item["shape"])
        if item["dtype"] not in DTYPES:
            raise ValueError(f"{kind} {item['name']!r} has dtype {item['dtype']}")
        infos.append(TensorInfo(str(item["name"]), shape, str(item["dtype"])))
    return tuple(infos)


def load(path: str, sha256: str = "") -> tuple[torch.jit.ScriptModule, model_file.Program]:
    """The module in `path` and its signature (kept per path and digest); ModelRejected, one
    line, for a file torch cannot read or one without the signature."""
    key = (path, sha256 or model_files.digest(Path(path)))
    with _lock:
        found = _loaded.get(key)
    if found is not None:
        return found
    extra = {SIGNATURE: ""}
    try:
        with warnings.catch_warnings():  # torch 2.13 deprecates TorchScript; 1.13 reads no more
            warnings.simplefilter("ignore", DeprecationWarning)
            module = torch.jit.load(path, map_location="cpu", _extra_files=extra)
    except Exception as error:  # noqa: BLE001 (the framework's reason, in one line)
        raise reject_unreadable(path, FORMAT, error) from None
    if not extra[SIGNATURE]:
        raise reject_unreadable(
            path,
            FORMAT,
            ValueError(
                f"it carries no {SIGNATURE}: a TorchScript file keeps no input shapes or dtypes, "
                "so fwbench reads those saved with it (torch.jit.save(..., _extra_files=...), "
                "docs/your-model.md; --export from a .pt2 writes them)"
            ),
        )
    try:
        said = json.loads(extra[SIGNATURE])
        program = model_file.Program(
            _infos(said["inputs"], "input"), _infos(said["outputs"], "output")
        )
    except (ValueError, KeyError, TypeError) as error:
        raise reject_unreadable(path, FORMAT, ValueError(f"its {SIGNATURE}: {error}")) from None
    module.eval()
    with _lock:
        while len(_loaded) >= _KEPT:
            _loaded.pop(next(iter(_loaded)))
        _loaded[key] = (module, program)
    return module, program


def inspect(path: str) -> ModelSignature:
    module, program = load(path)
    return ModelSignature(
        inputs=program.inputs,
        outputs=program.outputs,
        parameters=sum(int(t.numel()) for t in module.state_dict().values()),
        phases=("infer",),
        unsupported_reasons={"train": TRAIN_REASON},
        details={"torch": torch.__version__, "signature": SIGNATURE},
    )


class ScriptRun:
    """One cell of a TorchScript module: the module on the device, its inputs there."""

    def __init__(
        self,
        module: torch.jit.ScriptModule,
        program: model_file.Program,
        inputs: Mapping[str, np.ndarray],
        device: torch.device,
    ) -> None:
        missing = [t.name for t in program.inputs if t.name not in inputs]
        if missing:
            raise UnsupportedWorkload(f"the cell gives no input {missing[0]!r} of the module")
        self.module = module.to(device)
        self.args = [
            torch.from_numpy(np.ascontiguousarray(inputs[t.name])).to(device)
            for t in program.inputs
        ]

    def step(self) -> object:
        with torch.inference_mode():
            return self.module(*self.args)

    def outputs(self) -> dict[str, np.ndarray]:
        leaves = pytree.tree_flatten(self.step())[0]  # tree_leaves came after torch 1.13
        return {
            f"output_{index}": model_file.numpy_of(leaf)
            for index, leaf in enumerate(leaves)
            if isinstance(leaf, torch.Tensor)
        }

    def flops(self) -> FlopCount:
        """FlopCounterMode sees the operators TorchScript's interpreter dispatches."""
        return model_file.count_flops(lambda: self.module(*self.args))


def build(spec: WorkloadSpec, device: torch.device) -> ScriptRun:
    model = spec.model
    assert model is not None  # the plugin calls it for model cells only
    if spec.phase != "infer":
        raise UnsupportedWorkload(f"phase {spec.phase} for {spec.workload.name}: {TRAIN_REASON}")
    if spec.mode != MODE:
        raise UnsupportedWorkload(
            f"mode {spec.mode} for a TorchScript file: it runs as it was scripted or traced "
            f"({MODE} only)"
        )
    module, program = load(model.path, model.sha256)
    return ScriptRun(module, program, model.arrays(spec.seed), device)


def export(path: str, dest: str) -> str:
    """The exported program in `path` traced into TorchScript at `dest`, its signature with
    it; the tool that did it."""
    program = model_file.load(path)
    found = model_file.read_signature(program)
    example = [
        torch.zeros(tuple(2 if d is None else d for d in t.shape), dtype=getattr(torch, t.dtype))
        for t in found.inputs
    ]
    args, kwargs = pytree.tree_unflatten(example, program.call_spec.in_spec)
    if kwargs:
        raise UnsupportedWorkload("a program with keyword inputs is not traced into TorchScript")
    signature = {
        "inputs": [_said(t) for t in found.inputs],
        "outputs": [_said(t) for t in found.outputs],
    }
    with warnings.catch_warnings():  # the program's shape guards, which tracing drops, and
        warnings.simplefilter("ignore", torch.jit.TracerWarning)  # torch 2.13 deprecating
        warnings.simplefilter("ignore", DeprecationWarning)  # TorchScript: 1.13 reads no more
        traced = torch.jit.trace(program.module(), tuple(args), strict=False, check_trace=False)
        torch.jit.save(traced, dest, _extra_files={SIGNATURE: json.dumps(signature)})
    return f"torch.jit.trace torch {torch.__version__}"


def _said(tensor: TensorInfo) -> dict[str, Any]:
    return {"name": tensor.name, "shape": list(tensor.shape), "dtype": tensor.dtype}
