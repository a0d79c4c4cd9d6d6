"""Runs from two hosts: compared as fractions of each host's own calibrated peak, not seconds.

A cell's peak fraction is its FLOPs / (seconds x peak), so the ratio of two fractions is the
ratio of the times once each is multiplied by its own host's peak. `collector compare RUN_A
RUN_B` on different hosts therefore scales RUN_B's samples by peak_B / peak_A (the cell's
peak_flops_per_second on either side) and compares as usual: every interval, test and verdict
is then about peak fractions. A cell without a calibrated peak on either side is not
compared. Runs of one host compare seconds, unchanged."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from fwbench.collector.analysis.contenders import Contender, RunData

SECONDS, PEAK_FRACTION = "seconds", "peak fraction"


def host_of(run: RunData) -> dict[str, Any]:
    """The run's host: its calibration's fingerprint, else what the run recorded of it."""
    return host_of_metadata(run.run_id, run.metadata)


def host_of_metadata(run_id: str, metadata: Mapping[str, Any]) -> dict[str, Any]:
    """host_of from a run's id and metadata alone (the store's run.json), without its rows."""
    calibration = metadata.get("calibration") or {}
    host = metadata.get("host") or {}
    return {
        "run_id": run_id,
        "hostname": calibration.get("fingerprint", {}).get("hostname", host.get("hostname")),
        "fingerprint_id": calibration.get("fingerprint_id"),
        "calibration_id": calibration.get("id"),
    }


def comparison_basis(before: RunData, after: RunData) -> str:
    """SECONDS when both runs are of one host (same fingerprint, or same hostname where a run
    has no calibration), else PEAK_FRACTION."""
    a, b = host_of(before), host_of(after)
    if a["fingerprint_id"] and b["fingerprint_id"]:
        return SECONDS if a["fingerprint_id"] == b["fingerprint_id"] else PEAK_FRACTION
    return SECONDS if a["hostname"] == b["hostname"] else PEAK_FRACTION


def _peak(run: RunData, cell: Contender) -> float | None:
    rows = run.results[run.results["cell"] == cell.first_cell]
    if rows.empty or "peak_flops_per_second" not in rows:
        return None
    value = rows["peak_flops_per_second"].iloc[0]
    return float(value) if value is not None and value == value and value > 0 else None


def to_peak_fraction(
    before: RunData, base: Contender, after: RunData, cell: Contender
) -> tuple[Contender | None, str]:
    """`cell` of `after` with its times scaled by its host's peak over `before`'s (so that its
    speedup over `base` is the ratio of peak fractions) and a note; None and the reason when
    either side has no calibrated peak."""
    peak_before, peak_after = _peak(before, base), _peak(after, cell)
    if peak_before is None or peak_after is None:
        missing = before.run_id if peak_before is None else after.run_id
        return None, f"{cell.agent} {cell.key.label()}: no calibrated peak in run {missing}"
    factor = peak_after / peak_before
    groups = tuple(np.asarray(group) * factor for group in cell.groups)
    note = f"peak fraction: times x{factor:.3g} (peak {after.run_id} / peak {before.run_id})"
    return replace(cell, groups=groups), note
