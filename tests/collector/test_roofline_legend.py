"""The roofline's legend hides no point: it stands beside the panel, not over it. A run of one
cell far below its roof put its lone point in the corner the legend used to fill."""

from __future__ import annotations

import pandas as pd
import pytest

from fwbench.collector.analysis.contenders import RunData
from fwbench.collector.analysis.report.roofline import roofline, roofline_figure


def row(intensity: float, gflops: float, **extra: object) -> dict[str, object]:
    return {
        "status": "ok",
        "agent": "numpy-cpu",
        "phase": "infer",
        "workload": "gemm",
        "batch_size": 64,
        "dtype": "float32",
        "intra_op_threads": 4,
        "arithmetic_intensity": intensity,
        "gflops_per_second": gflops,
        "peak_flops_per_second": 1e11,  # its ridge at 10 FLOP/byte
        "bandwidth_bytes_per_second": 1e10,
        "calibration_id": "cal-1",
        **extra,
    }


@pytest.mark.parametrize(
    "points",
    [
        [(100.0, 1.0)],  # compute-bound, 1% of the roof: the lower right corner
        [(0.5, 0.004)],  # memory-bound, far below the slope: the lower left
        [(100.0, 1.0), (0.5, 4.0), (20.0, 90.0)],
    ],
)
def test_the_legend_covers_no_point(points: list[tuple[float, float]]) -> None:
    frame = pd.DataFrame([row(x, y, batch_size=i + 1) for i, (x, y) in enumerate(points)])
    run = RunData("one-point", frame, pd.DataFrame(columns=["cell", "iteration", "seconds"]))
    figure = roofline_figure(run, {"numpy-cpu": "#1f77b4"})
    assert figure is not None
    figure.draw_without_rendering()  # lays the panel and its legend out
    (ax,) = figure.axes
    legend = ax.get_legend().get_window_extent().padded(4)  # a marker's radius, about
    for x, gflops in points:
        where = ax.transData.transform((x, gflops * 1e9))
        assert not legend.contains(*where), (x, gflops, legend)
    # Everything is in the picture: the legend within the figure, beside the axes.
    assert figure.bbox.contains(*legend.min) and figure.bbox.contains(*legend.max)
    assert legend.x0 > ax.get_window_extent().x1
    assert roofline(run, {}).png  # and the PNG is drawn
