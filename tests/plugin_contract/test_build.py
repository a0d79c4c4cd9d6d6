"""build(), the step and synchronize(): every claimed workload and phase builds, steps twice
and synchronizes; settings echo what was asked; what is not claimed is refused
(docs/plugins.md, "build" and "synchronize")."""

from __future__ import annotations

import pytest

from fwbench.runtime.plugin import BuiltStep, Settings, UnsupportedWorkload, WorkloadSpec
from fwbench.spec.catalogue import DTYPES

NO_SUCH_MODE = "contract-suite-no-such-mode"


def test_the_smallest_cell_builds_steps_twice_and_synchronizes(
    plugin, cell: WorkloadSpec, built
) -> None:
    assert isinstance(built, BuiltStep) and callable(built.step)
    for _ in range(2):
        assert plugin.synchronize(built.step()) is None


def test_a_generation_comes_in_its_parts_with_the_catalogues_decode_steps(plugin, cell, built):
    if cell.workload.kind != "generation":
        assert built.generation is None, "only a generation workload is built in parts"
        return
    assert built.generation is not None, "a generation is built with BuiltStep.for_generation"
    assert built.generation.decode_steps == cell.workload.decode_steps(cell.params)
    plugin.synchronize(built.generation.prefill())
    for _ in range(built.generation.decode_steps):
        plugin.synchronize(built.generation.decode())


def test_settings_echo_the_dtype_and_mode_asked_for(cell, built):
    settings = built.settings
    assert isinstance(settings, Settings)
    assert (settings.dtype, settings.mode) == (cell.dtype, cell.mode)
    assert settings.intra_op_threads >= 1 and settings.inter_op_threads >= 1
    assert isinstance(settings.device, str) and settings.device
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in settings.extra.items())


def test_an_unclaimed_phase_is_refused(plugin, catalogue, cell_for, workload):
    claimed = plugin.describe().capabilities[workload].phases
    others = [p for p in catalogue.get(workload).phases if p not in claimed]
    if not others:
        pytest.skip(f"{workload}: every phase is claimed")
    with pytest.raises(UnsupportedWorkload):
        plugin.build(cell_for(workload, phase=others[0]))


def test_an_unclaimed_dtype_is_refused(plugin, cell_for, workload):
    claimed = plugin.describe().capabilities[workload].dtypes
    others = [d for d in DTYPES if d not in claimed]
    if not others:
        pytest.skip(f"{workload}: every dtype is claimed")
    with pytest.raises(UnsupportedWorkload):
        plugin.build(cell_for(workload, dtype=others[0]))


def test_an_unknown_mode_is_refused(plugin, cell_for, workload):
    with pytest.raises(UnsupportedWorkload):
        plugin.build(cell_for(workload, mode=NO_SUCH_MODE))


def test_an_unclaimed_workload_is_refused(plugin, catalogue, smallest):
    claimed = plugin.describe().capabilities
    others = [
        w
        for n, w in catalogue.workloads.items()
        if w.kind in ("op", "model", "generation") and n not in claimed
    ]
    if not others:
        pytest.skip("every op and model workload is claimed")
    mode = next(iter(claimed.values())).modes[0]
    with pytest.raises(UnsupportedWorkload):
        plugin.build(smallest(others[0], others[0].phases[0], "float32", mode))


def test_a_thread_count_is_honoured_or_refused_as_described(plugin, cell_for):
    description = plugin.describe()
    first = next(iter(description.capabilities))
    if description.threads_fixed_at_startup:
        other = description.intra_op_threads + 1
        with pytest.raises(UnsupportedWorkload):
            plugin.build(cell_for(first, threads=other))
        same = plugin.build(cell_for(first, threads=description.intra_op_threads))
        assert same.settings.intra_op_threads == description.intra_op_threads
    else:
        assert plugin.build(cell_for(first, threads=1)).settings.intra_op_threads == 1
        plugin.build(cell_for(first))  # threads=0: back to the framework's default
