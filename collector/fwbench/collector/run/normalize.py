"""Turns what an agent returned (or why it could not) into one row of the results table."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.calibration.ceiling import ceiling_columns, observe
from fwbench.collector.launchers import AgentHandle
from fwbench.collector.run.generation import bandwidth_fraction, generation_columns
from fwbench.collector.run.plan import Cell
from fwbench.collector.stats.samples import sample_stats, throughput
from fwbench.collector.store.cell_key import params_text
from fwbench.collector.store.schema import SCHEMA_VERSION
from fwbench.spec import Catalogue
from fwbench.spec.enums import DTYPE_NAMES
from fwbench.spec.model_files import is_model_workload


def identity_columns(
    run_id: str,
    index: int,
    handle: AgentHandle,
    describe: agent_pb2.DescribeResponse,
    cell: Cell,
    catalogue: Catalogue,
) -> dict[str, Any]:
    """Columns known before the cell runs: who, where (launcher, address, image), what."""
    workload = catalogue.get(cell.workload)
    cpu = next((d for d in describe.devices if d.kind == agent_pb2.DEVICE_KIND_CPU), None)
    # Before a result says which device ran the cell, only a CPU-only agent's is known: one
    # that also has a GPU leaves it empty (a cell that never ran is not labelled with the CPU).
    gpu = any(d.kind == agent_pb2.DEVICE_KIND_GPU for d in describe.devices)
    return {
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "cell": index,
        "launcher": handle.kind,
        "agent": cell.agent,
        "address": handle.address,
        "agent_pid": handle.host_pid or describe.pid or None,
        **handle.identity(),
        "framework": describe.identity.framework,
        "framework_version": describe.identity.framework_version,
        "family": describe.identity.family or describe.identity.framework,
        "family_version": describe.identity.family_version,
        "variant": describe.identity.variant,
        "plugin_version": describe.identity.plugin_version,
        "libraries": json.dumps(dict(sorted(describe.libraries.items()))),
        "environment": json.dumps(dict(sorted(describe.environment.items()))),
        "device_name": cpu.name if cpu and not gpu else "",
        "host": describe.host.hostname,
        "cpu_model": describe.host.cpu_model,
        "usable_cores": describe.host.usable_cores,
        "in_container": describe.host.in_container,
        "workload": cell.workload,
        "kind": workload.kind,
        "phase": cell.phase,
        "batch_size": cell.batch_size,
        "dtype": cell.dtype,
        "mode": cell.mode,
        "strategy": cell.strategy or None,  # a world's: the rank's RankResult fills in the default
        "threads_requested": cell.threads,
        "params": params_text(cell.params),
        # A user's model file has no catalogue FLOPs (None: unknown, never 0 FLOP/s): the
        # reference agent's counter gives them (run/model_prepared.py, flops_columns).
        "flops_per_item": None
        if is_model_workload(cell.workload)
        else catalogue.flops_per_item(cell.workload, cell.phase, cell.params),
        "flops_counter": None if is_model_workload(cell.workload) else "catalogue",
    }


def result_row(
    identity: dict[str, Any],
    describe: agent_pb2.DescribeResponse,
    seed: int,
    result: agent_pb2.RunResult,
    catalogue: Catalogue,
) -> dict[str, Any]:
    """A measured cell: identity, effective settings and statistics of the raw samples."""
    settings = result.settings
    stats = sample_stats(list(result.sample_nanoseconds))
    row = dict(identity)
    row.update(stats)
    items = result.items_per_sample or identity["batch_size"]
    row.update(throughput(items, stats["median_seconds"], identity["flops_per_item"]))
    row.update(
        {
            "dtype": DTYPE_NAMES.get(settings.dtype, identity["dtype"]),
            "mode": settings.mode,
            "layout": settings.layout,
            "device": settings.device,
            "device_name": _device_name(describe, settings.device, identity["device_name"]),
            "intra_op_threads": settings.intra_op_threads,
            "inter_op_threads": settings.inter_op_threads,
            "seed": seed,
            "first_iteration_seconds": result.first_iteration_nanoseconds / 1e9,
            "build_seconds": result.build_nanoseconds / 1e9,
            "warmup_iterations": result.warmup_iterations,
            "measure_started_at": pd.Timestamp(result.measure_started_unix_nanoseconds, tz="UTC"),
            "measure_ended_at": pd.Timestamp(result.measure_ended_unix_nanoseconds, tz="UTC"),
            "settings": json.dumps(dict(sorted(settings.extra.items()))),
            "items_per_sample": items,
            "status": "ok",
        }
    )
    row["settings_mismatch"] = settings_mismatch(identity, row)
    if result.HasField("accuracy"):
        row.update(accuracy_columns(result.accuracy))
    if result.HasField("generation"):
        params = json.loads(identity["params"])
        row.update(
            generation_columns(
                result,
                catalogue,
                identity["workload"],
                params,
                identity["batch_size"],
                row["dtype"],
            )
        )
    return row


def settings_mismatch(asked: dict[str, Any], ran: dict[str, Any]) -> str:
    """What the agent ran otherwise than asked ("" when nothing): a thread count other than
    the one requested (0 asks for the agent's default, so anything goes), another dtype, or
    another mode than one named. The row keeps what was in effect; this says it differs."""
    differences = []
    threads = asked["threads_requested"]
    if threads and ran["intra_op_threads"] and ran["intra_op_threads"] != threads:
        differences.append(f"threads: asked {threads}, ran {ran['intra_op_threads']}")
    if ran["dtype"] != asked["dtype"]:
        differences.append(f"dtype: asked {asked['dtype']}, ran {ran['dtype']}")
    if asked["mode"] and ran["mode"] != asked["mode"]:
        differences.append(f"mode: asked {asked['mode']}, ran {ran['mode'] or '(none said)'}")
    return "; ".join(differences)


def accuracy_columns(accuracy: agent_pb2.AccuracyResult) -> dict[str, Any]:
    history = [
        {
            "epoch": e.epoch,
            "train_seconds": e.train_nanoseconds / 1e9,
            "eval_seconds": e.eval_nanoseconds / 1e9,
            "validation_accuracy": e.validation_accuracy,
        }
        for e in accuracy.history
    ]
    return {
        "target_accuracy": accuracy.target_accuracy,
        "reached_target": accuracy.reached,
        "time_to_target_seconds": (
            accuracy.time_to_target_nanoseconds / 1e9 if accuracy.reached else None
        ),
        "epochs_to_target": accuracy.epochs_to_target if accuracy.reached else None,
        "epochs": accuracy.epochs,
        "final_accuracy": accuracy.final_accuracy,
        "accuracy_history": json.dumps(history),
    }


def failure_row(
    identity: dict[str, Any], seed: int, status: str, error_code: str, error: str
) -> dict[str, Any]:
    row = dict(identity)
    row.update(
        {"seed": seed, "status": status, "error_code": error_code, "error": " ".join(error.split())}
    )
    return row


LOOPBACK = ("127.0.0.1", "localhost", "[::1]", "::1")


def on_this_host(row: dict[str, Any]) -> bool:
    """Whether the row ran on the CPUs the calibration measured: not on a GPU, by an agent on
    the collector's machine (started here, in a process or a container, or attached at a
    loopback address)."""
    # torch "cpu", jax "cpu:0", TensorFlow "/CPU:0"
    if str(row.get("device") or "cpu").lstrip("/").split(":")[0].lower() != "cpu":
        return False
    if row.get("launcher") != "attached":
        return True
    return str(row.get("address", "")).rpartition(":")[0] in LOOPBACK


Annotate = Callable[[dict[str, Any]], dict[str, Any]]


def ceilings(catalogue: Catalogue, calibration: dict[str, Any] | None) -> Annotate:
    """Adds the ceiling columns to a row: its arithmetic intensity (catalogue byte model, for
    the dtype it ran) and, for agents on this machine, this machine's calibrated peak for its
    dtype and threads, the fraction of it achieved, and the bandwidth (calibration/ceiling.py)."""

    def annotate(row: dict[str, Any]) -> dict[str, Any]:
        intensity = None
        if row.get("workload") and row.get("batch_size"):
            params = json.loads(row.get("params") or "{}")
            intensity = catalogue.arithmetic_intensity(
                row["workload"], row["phase"], params, row["batch_size"], str(row.get("dtype"))
            )
        if intensity is None:  # a model file's own (run/model_prepared.py, flops_columns)
            intensity = row.get("arithmetic_intensity")
        here = calibration if on_this_host(row) else None
        annotated = {**row, **ceiling_columns(row, here, intensity)}
        if row.get("decode_bandwidth_bytes_per_second") is not None:
            annotated["decode_bandwidth_fraction"] = bandwidth_fraction(annotated)
        return annotated

    return annotate


@dataclass
class RunCeilings:
    """A run's ceilings: the columns of its rows from the run's calibration, which a row of
    this host that achieved more than its ceiling raises (calibration/ceiling.py, observe)."""

    catalogue: Catalogue
    calibration: dict[str, Any] | None
    annotate: Annotate = field(init=False)

    def __post_init__(self) -> None:
        self.annotate = ceilings(self.catalogue, self.calibration)  # reads it as it is raised

    def raised_by(self, row: dict[str, Any], run_id: str) -> bool:
        """Whether the (annotated) row raised a ceiling: the rows annotated before need their
        columns again."""
        if self.calibration is None or row.get("peak_fraction") is None:
            return False
        return bool(row["peak_fraction"] > 1 and observe(self.calibration, row, run_id))


def _device_name(describe: agent_pb2.DescribeResponse, device: str, fallback: str) -> str:
    """The described name of the device the result says ran the cell."""
    if device.startswith("cuda") or device.startswith("gpu"):
        index = int(device.rpartition(":")[2] or 0) if ":" in device else 0
        for d in describe.devices:
            if d.kind == agent_pb2.DEVICE_KIND_GPU and d.index == index:
                return d.name
    if device.startswith("cpu"):
        for d in describe.devices:
            if d.kind == agent_pb2.DEVICE_KIND_CPU:
                return d.name
    return fallback
