"""The report's section on the user's model file (`collector run --model`): for every
inference row of the model, the file the agent ran (its format, and the exporter that made it
from the user's file), and how far its outputs are from the reference agent's for the same
inputs (docs/your-model.md's tolerances). Nothing for a run without a model file."""

from __future__ import annotations

from typing import Any

import pandas as pd

from fwbench.collector.analysis.contenders import RunData
from fwbench.spec.model_files import is_model_workload

HEADERS = (
    "model",
    "agent",
    "bs",
    "file",
    "made by",
    "outputs",
    "max abs diff",
    "max rel diff",
    "where they differ",
)


def _outputs(row: pd.Series) -> str:
    match = row.get("outputs_match")
    if pd.isna(match):
        return "not compared"
    return "same" if bool(match) else "DIFFER"


def _maker(made: Any) -> str:
    """The agent and exporter, its versions' detail left to the model_export column."""
    return "-" if pd.isna(made) else str(made).split(" (")[0]


def _number(value: Any) -> str:
    return "-" if pd.isna(value) else f"{float(value):.2g}"


def model_section(run: RunData) -> dict[str, Any] | None:
    """Headers, rows and caption of the model's outputs table; None without a model file."""
    rows = run.results
    if rows.empty or "outputs_reference" not in rows:
        return None
    mask = rows["workload"].map(is_model_workload) & (rows["status"] == "ok")
    model = rows[mask & (rows["phase"] == "infer")]
    if model.empty:
        return None
    model = model.sort_values(["workload", "batch_size", "agent"], kind="stable")
    table = [
        [
            row["workload"],
            row["agent"] + (f" ({row['mode']})" if row.get("mode") else ""),
            str(int(row["batch_size"])),
            str(row["model_format"]),
            _maker(row.get("model_export")),
            _outputs(row),
            _number(row.get("output_max_abs_diff")),
            _number(row.get("output_max_rel_diff")),
            "" if pd.isna(row.get("outputs_note")) else str(row["outputs_note"]),
        ]
        for _, row in model.iterrows()
    ]
    references = ", ".join(sorted(set(model["outputs_reference"].dropna())))
    caption = (
        f"Each row's outputs against {references}'s for the same inputs, element by element, "
        "within the dtype's tolerance (float32: |a - r| <= 1e-4 + 1e-3 |r|; docs/your-model.md). "
        "A row whose outputs DIFFER is kept out of every verdict above."
    )
    differ = int((model["outputs_match"] == False).sum())  # noqa: E712 (NA stays NA)
    return {"headers": list(HEADERS), "rows": table, "caption": caption, "differ": differ}
