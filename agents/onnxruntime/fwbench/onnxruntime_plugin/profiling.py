"""A catalogue graph cell's steps under ONNX Runtime's own profiler (session profiling,
protocol 1.10's RunRequest.profile): ORT profiles a session made with profiling on, so the
cell's graph gets a second session, its inputs and output bound as the timed one's, which
the step runs while the profile lasts. ORT writes its trace (a Chrome trace, every node's
kernel time) itself; the operations are the nodes' types (Conv, MatMul, ...), each node's
kernel time its self time. The warm-up step's nodes, those of the trace's first model_run,
are left out."""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import onnxruntime as ort

from fwbench.onnxruntime_plugin.session import BoundRun
from fwbench.runtime.profiling import OperationSample, ProfiledSteps, RunSteps

PROFILER = f"onnxruntime session profiling (onnxruntime {ort.__version__})"
NOT_PROFILED = (
    "ONNX Runtime profiles the catalogue's graph cells only (not generate, not model files)"
)


@dataclass(frozen=True)
class Profilable:
    """A graph cell's bound run, and what makes another session of its graph whose profile
    files start with a prefix."""

    bound: BoundRun
    session: Callable[[str], ort.InferenceSession]


def profile(cell: Profilable | None, run_steps: RunSteps, trace_dir: Path | None) -> ProfiledSteps:
    if cell is None:
        raise RuntimeError(NOT_PROFILED)
    scratch = None if trace_dir is not None else Path(tempfile.mkdtemp(prefix="fwbench-ort-"))
    folder = trace_dir if trace_dir is not None else scratch
    assert folder is not None
    try:
        profiled = cell.session(str(folder / "onnxruntime"))
        with cell.bound.running_on(profiled):
            run_steps(lambda _: None)
        trace = Path(profiled.end_profiling())
        operations = list(_operations(json.loads(trace.read_text())))
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
    if trace_dir is None:
        return ProfiledSteps(operations)
    return ProfiledSteps(operations, str(trace), "chrome-trace")


def _operations(events: Iterable[Mapping[str, Any]]) -> Iterable[OperationSample]:
    events = list(events)
    runs = sorted((e for e in events if e.get("name") == "model_run"), key=lambda e: e["ts"])
    after = runs[0]["ts"] + runs[0]["dur"] if runs else 0  # the warm-up step's run ends
    for event in events:
        name = str(event.get("name", ""))
        if event.get("cat") != "Node" or not name.endswith("_kernel_time"):
            continue
        if event["ts"] < after:
            continue
        op = str(event.get("args", {}).get("op_name") or name.removesuffix("_kernel_time"))
        yield OperationSample(op, int(float(event["dur"]) * 1000), 1)
