"""`collector calibrate`: this host's ceilings (peak GEMM FLOP/s per dtype, triad bandwidth),
measured once and cached; `collector run` takes them from the cache, or measures them first."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from fwbench.collector.cli.common import console, errors, fail, load_manifests, print_json

if TYPE_CHECKING:
    from fwbench.collector.agents.manifest import AgentManifest

# Agent environments whose PyTorch GEMM is tried too, when they are ready (never built here).
TORCH_AGENTS = ("torch-cpu",)


def agent_pythons(declared: dict[str, AgentManifest]) -> list[Path]:
    """The ready environments of TORCH_AGENTS. One whose lock is stale is left out: no
    environment is made from it, and it must not stop a run of other agents (on another
    Python version every shipped lock is stale, its key having the version in it)."""
    from fwbench.collector.agents.environments import environment_for
    from fwbench.collector.agents.locks import LockError

    found = []
    for name in TORCH_AGENTS:
        if name in declared:
            try:
                environment = environment_for(declared[name])
            except LockError:
                continue
            if environment.state() == "ready":
                found.append(environment.python)
    return found


def _say(text: str) -> None:
    errors.print(text, highlight=False)


def calibration_for_run(declared: dict[str, AgentManifest]) -> dict[str, Any] | None:
    """This host's calibration for `collector run`: the cached one, or measured now (a line on
    stderr says so). One that cannot be measured is a warning: the run goes on without."""
    from fwbench.collector.calibration.cache import host_calibration
    from fwbench.collector.calibration.measure import CalibrationError

    try:
        return host_calibration(agent_pythons(declared), say=_say)
    except (CalibrationError, ValueError, OSError) as error:
        _say(f"warning: no host calibration, rows carry no peak fraction: {error}")
        return None


def _table(calibration: dict[str, Any]) -> Table:
    table = Table(title=f"calibration {calibration['id']} ({calibration['effort']})")
    for column in ("ceiling", "threads", "value", "library", "size"):
        table.add_column(column)
    for dtype, by_threads in calibration["peak_flops"].items():
        for threads, trial in sorted(by_threads.items(), key=lambda item: int(item[0])):
            value = f"{trial['flops_per_second'] / 1e9:.1f} GFLOP/s"
            table.add_row(f"peak {dtype}", threads, value, trial["library"], str(trial["size"]))
    for dtype, by_threads in calibration.get("observed", {}).items():
        for threads, row in sorted(by_threads.items(), key=lambda item: int(item[0])):
            value = f"{row['flops_per_second'] / 1e9:.1f} GFLOP/s"
            source = f"run {row['run_id']} cell {row['cell']}: {row['agent']} {row['workload']}"
            table.add_row(f"raised {dtype}", threads, value, source, "")
    for kind, label, arrays in (("bandwidth", "triad", "3 x "), ("read_bandwidth", "read", "")):
        for threads, found in calibration.get(kind, {}).items():
            value = f"{found['bytes_per_second'] / 1e9:.1f} GB/s"
            size = f"{arrays}{found['array_bytes'] >> 20} MiB"
            table.add_row(f"{label} bandwidth", threads, value, found["library"], size)
    return table


def calibrate(
    force: Annotated[
        bool, typer.Option("--force", help="Measure again even when this host has one cached.")
    ] = False,
    quick: Annotated[
        bool, typer.Option("--quick", help="Tiny sizes: seconds, not a ceiling (for tests).")
    ] = False,
    python: Annotated[
        list[Path] | None,
        typer.Option(help="Another interpreter whose PyTorch GEMM is tried too (repeatable)."),
    ] = None,
    manifests: Annotated[
        list[Path] | None, typer.Option(help="Extra folder of agent manifests.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the calibration as JSON.")] = False,
) -> None:
    """This host's peak GEMM FLOP/s per dtype (1 thread and every CPU, NumPy's BLAS and, where
    a torch-cpu environment is ready or --python has torch, PyTorch's BLAS and oneDNN: the best
    is kept) and its STREAM-triad memory bandwidth; cached per host, measured again with
    --force. Ceilings that runs' rows raised (faster than calibrated) are listed too."""
    from fwbench.collector.calibration.cache import cache_path, effort_name, host_calibration
    from fwbench.collector.calibration.measure import EFFORTS, CalibrationError

    # Absolute: the probes run in a folder of their own, not this one.
    pythons = [*agent_pythons(load_manifests(manifests)), *(p.absolute() for p in python or [])]
    for path in pythons:
        if not path.exists():
            fail(f"--python {path}: no such interpreter")
    effort = "quick" if quick else effort_name()
    if effort not in EFFORTS:
        effort = "full"  # FWBENCH_CALIBRATION=off turns off runs' calibration, not this
    try:
        calibration = host_calibration(pythons, force, effort, _say)
    except CalibrationError as error:
        fail(str(error))
    assert calibration is not None
    if as_json:
        print_json(calibration)
        return
    console.print(_table(calibration))
    where = cache_path(calibration["fingerprint"], effort)
    console.print(f"cached in {where}; measured {calibration['measured_at']}", highlight=False)
