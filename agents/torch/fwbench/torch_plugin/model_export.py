"""A user's exported program (`.pt2`) written in other formats by PyTorch's own tools
(capability "model_export", protocol 1.8): TorchScript by torch.jit.trace (torchscript.py), for
the torch that reads no programs (Debian's 1.13); ONNX by `torch.onnx.export(program,
dynamo=True)`, the exporter that
translates an ExportedProgram with onnxscript. Its symbolic dimensions stay open, its inputs
keep the program's names and its outputs are named `output_0`, `output_1`, ... as this
plugin names them (model_file.py), so every runtime's outputs are compared output by output.
Offered where onnxscript and onnx are installed (the torch-cpu agent's lock has them)."""

from __future__ import annotations

import importlib
import importlib.util
import warnings
from typing import Any

import torch

from fwbench.runtime.plugin import UnsupportedWorkload
from fwbench.torch_plugin import model_file, torchscript


def formats() -> tuple[str, ...]:
    """The formats this agent writes from an exported program: TorchScript wherever torch
    reads programs (torchscript.py traces them), ONNX where the exporter's packages are
    installed too."""
    if not model_file.available():
        return ()
    onnx = all(importlib.util.find_spec(m) for m in ("onnxscript", "onnx"))
    return ("onnx", torchscript.FORMAT) if onnx else (torchscript.FORMAT,)


def export(path: str, source: str, target: str, dest: str) -> str:
    """Writes the program in `path` (format `source`) to `dest` in `target`; the tool that
    did it, with versions. Only programs are exported: a TorchScript file is run as it is."""
    if source != model_file.FORMAT:
        raise UnsupportedWorkload(
            f"the torch plugin exports programs (torch_export), not {source} files"
        )
    if target == torchscript.FORMAT:
        return torchscript.export(path, dest)
    return _onnx(path, dest)


def _onnx(path: str, dest: str) -> str:
    """Writes the program in `path` to `dest` as ONNX; the tool that did it, with versions."""
    program = model_file.load(path)
    outputs = model_file.read_signature(program).outputs
    with warnings.catch_warnings():
        # torch's own deprecations inside its exporter (pytree's LeafSpec, ...): nothing the
        # user's export can act on.
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        onnx_program = torch.onnx.export(
            program, dynamo=True, verbose=False, output_names=[t.name for t in outputs]
        )
    if onnx_program is None:
        raise RuntimeError("torch.onnx.export returned no program")
    onnx_program.save(dest)
    return (
        f"torch.onnx.export (dynamo) torch {torch.__version__}, onnxscript "
        f"{_version('onnxscript')}, onnx {_version('onnx')}"
    )


def _version(module: str) -> str:
    imported: Any = importlib.import_module(module)
    return str(getattr(imported, "__version__", "?"))
