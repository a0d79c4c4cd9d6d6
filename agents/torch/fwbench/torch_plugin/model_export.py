"""A user's exported program (`.pt2`) written as ONNX by PyTorch's own exporter (capability
"model_export", protocol 1.8): `torch.onnx.export(program, dynamo=True)`, the exporter that
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

from fwbench.torch_plugin import model_file

FORMATS = ("onnx",)


def formats() -> tuple[str, ...]:
    """The formats this agent writes: none where the exporter's packages are missing."""
    needed = ("onnxscript", "onnx")
    if model_file.available() and all(importlib.util.find_spec(m) for m in needed):
        return FORMATS
    return ()


def export(path: str, dest: str) -> str:
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
