"""Rows to distrust: past the calibrated ceiling (past-ceiling), interfered, and run
otherwise than asked (settings-mismatch)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from fwbench.collector.analysis.contenders import RunData
from fwbench.collector.analysis.findings.cells import number
from fwbench.collector.analysis.findings.model import (
    CEILING,
    INTERFERED,
    PAST_CEILING,
    SETTINGS_MISMATCH,
    Evidence,
    Finding,
)
from fwbench.collector.store.cell_key import CellKey, clean


def _row_evidence(row: Mapping[str, Any], tag: str, shown: set[str], note: str) -> Evidence:
    median = number(row.get("median_seconds"))
    low, high = number(row.get("median_ci_low_seconds")), number(row.get("median_ci_high_seconds"))
    items = number(row.get("items_per_sample"))
    label = CellKey.of_row(row).label(tuple(shown))
    return Evidence(
        tag,
        str(row["agent"]),
        clean(row.get("mode")) or "",
        label,
        (int(row["cell"]),),
        median,
        low,
        high,
        items if items > 0 else float(row["batch_size"]),
        note,
    )


def ceiling_findings(run: RunData, rows: list[dict[str, Any]], shown: set[str]) -> list[Finding]:
    found = []
    for column, what, why in (
        (
            "peak_fraction",
            "of the calibrated peak FLOP/s",
            "its FLOPs overcounted (a training step that does less than the catalogue's 3x "
            "forward, a faster algorithm than the counted one)",
        ),
        (
            "decode_bandwidth_fraction",
            "of the calibrated memory read bandwidth while decoding",
            "weights and cache that fit in the CPU's caches, or a byte model that overcounts",
        ),
    ):
        for row in rows:
            fraction = number(row.get(column))
            if not fraction > CEILING:
                continue
            label = CellKey.of_row(row).label(tuple(shown))
            found.append(
                Finding(
                    PAST_CEILING,
                    f"{row['agent']} {label} (cell {row['cell']}): {fraction:.0%} {what}: the "
                    f"ceiling is wrong (calibrated under load, or too low), or the row is ({why})",
                    (_row_evidence(row, str(row["agent"]), shown, f"{column} {fraction:.3g}"),),
                    fraction,
                )
            )
    by_cell = {int(row["cell"]): row for row in rows}
    observed = (run.metadata.get("calibration") or {}).get("observed") or {}
    for dtype, by_threads in sorted(observed.items()):
        for threads, seen in sorted(by_threads.items()):
            raiser = by_cell.get(seen.get("cell")) if seen.get("run_id") == run.run_id else None
            calibrated = number(seen.get("calibrated_flops_per_second"))
            if raiser is None or not calibrated > 0:
                continue
            row = raiser
            raised = float(seen["flops_per_second"]) / calibrated
            label = CellKey.of_row(row).label(tuple(shown))
            found.append(
                Finding(
                    PAST_CEILING,
                    f"{row['agent']} {label} (cell {row['cell']}) raised the calibrated {dtype} "
                    f"ceiling at {threads} threads {raised:.2f}x, from "
                    f"{calibrated / 1e9:,.1f} to {seen['flops_per_second'] / 1e9:,.1f} GFLOP/s: "
                    "the ceiling is wrong (calibrated under load, with slower kernels than the "
                    "agent's), or the row is (fewer operations than the catalogue counts)",
                    (_row_evidence(row, str(row["agent"]), shown, f"raised {raised:.3g}x"),),
                    raised,
                )
            )
    return found


def marked_findings(rows: list[dict[str, Any]], shown: set[str]) -> list[Finding]:
    found = []
    interfered: dict[str, list[dict[str, Any]]] = {}
    mismatched: dict[tuple[str, str], list[dict[str, Any]]] = {}
    totals: dict[str, int] = {}
    for row in rows:
        agent = str(row["agent"])
        totals[agent] = totals.get(agent, 0) + 1
        if clean(row.get("interfered")) is True:
            interfered.setdefault(agent, []).append(row)
        if mismatch := clean(row.get("settings_mismatch")):
            mismatched.setdefault((agent, str(mismatch)), []).append(row)
    for agent, marked in sorted(interfered.items()):
        worst = max(marked, key=lambda r: (number(r.get("others_cpu_percent")), -int(r["cell"])))
        share = number(worst.get("others_cpu_percent"))
        why = clean(worst.get("interference")) or "interfered"
        evidence = tuple(
            _row_evidence(r, str(r["agent"]), shown, clean(r.get("interference")) or "interfered")
            for r in marked
        )
        found.append(
            Finding(
                INTERFERED,
                f"{agent}: {len(marked)} of its {totals[agent]} ok rows were measured while other "
                f"processes used its CPUs (worst: {why}): their times are not the agent's alone "
                "and no verdict is made from them; measure them again on a quiet host",
                evidence,
                0.0 if math.isnan(share) else share,
            )
        )
    for (agent, mismatch), marked in sorted(mismatched.items()):
        found.append(
            Finding(
                SETTINGS_MISMATCH,
                f"{agent}: {len(marked)} of its {totals[agent]} ok rows ran otherwise than asked "
                f"({mismatch}): their figures are for what ran and no verdict is made from them; "
                "ask for what the agent can do, or find why it did not",
                tuple(_row_evidence(r, str(r["agent"]), shown, mismatch) for r in marked),
                float(len(marked)),
            )
        )
    return found
