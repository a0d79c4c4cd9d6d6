"""The results table's columns of what a step achieved against what it could: items and FLOPs
per second, where the FLOPs come from, and this host's ceilings (calibration/ceiling.py;
docs/calibration.md)."""

from __future__ import annotations

from fwbench.collector.store.columns_base import Column

THROUGHPUT_COLUMNS: tuple[Column, ...] = (
    Column("items_per_second", "Float64", "items_per_sample / median_seconds"),
    Column(
        "flops_per_item",
        "Float64",
        "FLOPs of one item for this phase (the catalogue's formula, or a model file's counter)",
    ),
    Column(
        "flops_counter",
        "string",
        "where flops_per_item comes from: 'catalogue' (workloads.toml's formula); for a model "
        "file, the reference agent's own counter ('AGENT: COUNTER (VERSION)', the same count "
        "on every agent's row), or 'not counted: WHY'",
    ),
    Column("gflops_per_second", "Float64", "Achieved GFLOP/s at the median step time"),
    Column(
        "arithmetic_intensity",
        "Float64",
        "FLOPs per byte of a step, catalogue byte model (docs/calibration.md; an upper bound)",
    ),
    Column(
        "peak_flops_per_second",
        "Float64",
        "This host's CPU peak GEMM FLOP/s for the row's dtype and threads: calibrated, or the "
        "best a row reached if higher (empty: GPU cells, other hosts, dtype or run not "
        "calibrated; docs/calibration.md)",
    ),
    Column(
        "peak_fraction",
        "Float64",
        "gflops_per_second x 1e9 / peak_flops_per_second (at most 1 for inference: a faster "
        "inference row raises the peak; never clipped, so a training row above 1 did less "
        "than the catalogue's 3x-forward model counts)",
    ),
    Column(
        "bandwidth_bytes_per_second",
        "Float64",
        "This host's calibrated triad bandwidth at the row's threads (the roofline's slope)",
    ),
    Column(
        "read_bandwidth_bytes_per_second",
        "Float64",
        "This host's calibrated read-only bandwidth at the row's threads (a pass summing one "
        "large array: above triad's counted bytes where stores cost a write-allocate read); "
        "decode_bandwidth_fraction's ceiling",
    ),
    Column("calibration_id", "string", "The host calibration of the ceiling columns"),
)
