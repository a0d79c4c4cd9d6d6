"""What to run: the user's selection, validated against the catalogue before anything
starts, expanded into cells per agent and filtered by what each agent's Describe says."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.run.cell_choices import cell_modes, cell_strategies, unsupported
from fwbench.collector.run.shapes import SelectionError as SelectionError  # its home, for callers
from fwbench.collector.run.shapes import choices, integers, param_combinations, parse_params
from fwbench.collector.run.validate import iteration_limit
from fwbench.collector.store.cell_key import CellKey, params_text
from fwbench.spec import Catalogue, CatalogueError
from fwbench.spec.catalogue import DTYPES, PHASES
from fwbench.spec.model_files import is_model_workload
from fwbench.spec.op_classes import MAX_PROFILE_STEPS

MAX_REPEAT = 100
MAX_SEED = 2**64 - 1  # RunRequest.seed is a uint64
MAX_THREADS = 4096  # RunRequest.threads is a uint32; no host has more cores than this


@dataclass(frozen=True)
class LoopSettings:
    warmup_iterations: int | None = None  # None = catalogue default
    min_iterations: int = 0  # 0 = catalogue default
    min_seconds: float | None = None
    max_iterations: int = 0


@dataclass(frozen=True)
class Selection:
    workloads: tuple[str, ...]
    phases: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    dtypes: tuple[str, ...] = ("float32",)
    threads: tuple[int, ...] = (0,)
    # Execution modes: "default" (each agent's own default), "all" (every mode each agent
    # offers for the workload) or explicit names such as eager, compile, function, xla, jit.
    modes: tuple[str, ...] = ("default",)
    # Shape parameters (--param NAME=V or NAME=V1,V2,...: a sweep), each for the workloads
    # that have it; every combination of a workload's own values makes its cells.
    params: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    loop: LoopSettings = LoopSettings()
    seed: int = 0
    # Each agent runs each cell this many times, agents alternating (schedule.py).
    repeat: int = 1
    # With repeat > 1: a fresh process of each agent for every repetition (schedule.py).
    fresh_process: bool = True
    # Distributed strategies of worlds (--strategies): "default", "all" or names (ddp, ...).
    strategies: tuple[str, ...] = ("default",)
    # Steps each cell runs under its framework's profiler after the timed loop (0: none).
    profile_steps: int = 0

    @property
    def swept(self) -> tuple[str, ...]:
        """The shape parameters given several values (--param NAME=A,B,...)."""
        return tuple(name for name, values in self.params.items() if len(values) > 1)


@dataclass(frozen=True)
class Cell:
    agent: str
    workload: str
    phase: str
    batch_size: int
    dtype: str
    threads: int
    params: Mapping[str, int]  # resolved, defaults filled in
    unsupported_reason: str = ""  # non-empty: recorded as unsupported, not run
    mode: str = ""  # "" = the agent's default mode
    strategy: str = ""  # a world's distributed strategy; "" = the agent's default (or alone)

    @property
    def key(self) -> CellKey:
        """What every agent runs alike in this cell (the mode is each agent's own)."""
        return CellKey(
            self.workload,
            self.phase,
            self.batch_size,
            self.dtype,
            self.threads,
            params_text(self.params),
            self.strategy or None,
        )


def split_list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def build_selection(
    catalogue: Catalogue,
    *,
    workloads: str,
    phases: str,
    batch_sizes: str,
    dtypes: str = "float32",
    threads: str = "0",
    modes: str = "default",
    params: list[str] | None = None,
    loop: LoopSettings = LoopSettings(),
    seed: int = 0,
    repeat: int = 1,
    fresh_process: bool = True,
    strategies: str = "default",
    profile_steps: int = 0,
) -> Selection:
    """Parses comma-separated CLI values; raises SelectionError on anything invalid."""
    selection = Selection(
        workloads=choices("workloads", split_list(workloads), tuple(catalogue.workloads)),
        phases=choices("phases", split_list(phases), PHASES),
        batch_sizes=integers("batch size", split_list(batch_sizes), 1),
        dtypes=choices("dtypes", split_list(dtypes), DTYPES),
        threads=integers("thread count", split_list(threads), 0),
        modes=_modes(split_list(modes)),
        params=parse_params(params or []),
        loop=loop,
        seed=seed,
        repeat=repeat,
        fresh_process=fresh_process,
        strategies=_modes(split_list(strategies), "strategy"),
        profile_steps=profile_steps,
    )
    if not 0 <= profile_steps <= MAX_PROFILE_STEPS:
        raise SelectionError(
            f"invalid profile steps {profile_steps}: allowed 0..{MAX_PROFILE_STEPS}"
        )
    if not 1 <= repeat <= MAX_REPEAT:
        raise SelectionError(f"invalid repeat {repeat}: allowed 1..{MAX_REPEAT}")
    if not 0 <= seed <= MAX_SEED:
        raise SelectionError(f"invalid seed {seed}: allowed 0..{MAX_SEED} (2^64 - 1)")
    for name in selection.workloads:
        defined = catalogue.get(name).phases
        if not set(defined) & set(selection.phases):
            raise SelectionError(
                f"workload {name} has no phase {', '.join(selection.phases)}: "
                f"it has {', '.join(defined)} (--phases)"
            )
    too_many = [t for t in selection.threads if t > MAX_THREADS]
    if too_many:
        raise SelectionError(f"invalid thread count {too_many[0]}: allowed 0..{MAX_THREADS}")
    _check_limits(catalogue, selection)
    return selection


def _modes(given: list[str], kind: str = "mode") -> tuple[str, ...]:
    """--modes or --strategies: default, all, or names."""
    option = "--strategies" if kind == "strategy" else "--modes"
    if not given:
        raise SelectionError(f"no {kind} given; use default, all or names ({option})")
    for name in given:
        if not name.replace("_", "").replace("-", "").isalnum():
            raise SelectionError(f"invalid {kind} {name!r}")
    if len(given) > 1 and {"default", "all"} & set(given):
        raise SelectionError(f"{option} default or all cannot be combined with other names")
    return tuple(dict.fromkeys(given))


def _check_limits(catalogue: Catalogue, selection: Selection) -> None:
    known = {p for name in selection.workloads for p in catalogue.get(name).params}
    for key in selection.params:
        if key not in known:
            raise SelectionError(
                f"--param {key} applies to none of the selected workloads; "
                f"their parameters: {', '.join(sorted(known)) or 'none'}"
            )
    try:
        for name in selection.workloads:
            workload = catalogue.get(name)
            for size in selection.batch_sizes:
                limit = workload.max_batch_size
                if size > limit:
                    raise SelectionError(f"invalid batch size {size} for {name}: max {limit}")
            param_combinations(catalogue, name, selection.params)
        _check_loop(catalogue, selection.loop)
    except CatalogueError as error:
        raise SelectionError(str(error)) from None


def _check_loop(catalogue: Catalogue, loop: LoopSettings) -> None:
    limits = catalogue.run_limits
    if loop.warmup_iterations is not None:
        limits["warmup_iterations"].check(loop.warmup_iterations)
    if loop.min_iterations:
        limits["min_iterations"].check(loop.min_iterations)
    if loop.max_iterations:
        limits["max_iterations"].check(loop.max_iterations)
    if loop.min_seconds is not None and not 0 <= loop.min_seconds <= catalogue.min_seconds_max:
        raise SelectionError(
            f"invalid min seconds {loop.min_seconds}: allowed 0..{catalogue.min_seconds_max}"
        )
    least = iteration_limit(catalogue, "min_iterations", loop.min_iterations)
    most = iteration_limit(catalogue, "max_iterations", loop.max_iterations)
    if least > most:
        raise SelectionError(
            f"--iterations {least} exceeds --max-iterations {most}: the loop could never "
            "reach its minimum"
        )


def plan_cells(
    agent: str, describe: agent_pb2.DescribeResponse, catalogue: Catalogue, selection: Selection
) -> list[Cell]:
    """The cross product for one agent, in a stable order; cells the agent does not support
    carry the reason instead of being dropped (a phase the catalogue does not define for a
    workload, as generate's training, makes no cell at all). For an agent that sizes its thread
    pools at start-up, the thread count is the outermost loop, so each count needs one agent
    start."""
    support = {w.name: w for w in describe.workloads}
    if describe.HasField("model_files"):  # how it runs a model file (protocol 1.8)
        support.update(
            dict.fromkeys(filter(is_model_workload, selection.workloads), describe.model_files)
        )
    shapes = {w: param_combinations(catalogue, w, selection.params) for w in selection.workloads}
    cells = []
    for workload, phase, batch, dtype, threads in itertools.product(
        selection.workloads,
        selection.phases,
        selection.batch_sizes,
        selection.dtypes,
        selection.threads,
    ):
        if phase not in catalogue.get(workload).phases:
            continue  # no such cell for anyone (generate has no training): nothing to record
        for params in shapes[workload]:
            cells += _cells_of(
                agent,
                support.get(workload),
                selection,
                describe,
                (workload, phase, batch, dtype, threads),
                params,
            )
    if describe.threads.fixed_at_startup:
        cells.sort(key=lambda cell: selection.threads.index(cell.threads))  # stable
    return cells


def _cells_of(
    agent: str,
    found: agent_pb2.WorkloadSupport | None,
    selection: Selection,
    describe: agent_pb2.DescribeResponse,
    what: tuple[str, str, int, str, int],
    params: dict[str, int],
) -> list[Cell]:
    """One shape's cells: one per mode and strategy the selection names and the agent has."""
    workload, phase, batch, dtype, threads = what
    reason = unsupported(found, workload, phase, dtype, describe.unsupported_reasons)
    cells = []
    for (mode, mode_reason), (strategy, strategy_reason) in itertools.product(
        cell_modes(found, workload, selection.modes),
        cell_strategies(
            found, workload, selection.strategies, describe.HasField("world"), _known(describe)
        ),
    ):
        why = reason or mode_reason or strategy_reason
        cells.append(
            Cell(agent, workload, phase, batch, dtype, threads, params, why, mode, strategy)
        )
    return cells


def _known(describe: agent_pb2.DescribeResponse) -> set[str]:
    """The strategies an agent offers for any of its workloads."""
    return {strategy for found in describe.workloads for strategy in found.strategies}


def check_offered(
    selection: Selection, describes: Mapping[str, agent_pb2.DescribeResponse]
) -> None:
    """Raises SelectionError for a mode (--modes) or strategy (--strategies) that none of the
    agents offers for any workload (a typo, most likely), listing what they do offer."""
    for kind, named, attribute in (
        ("mode", selection.modes, "modes"),
        ("strategy", selection.strategies, "strategies"),
    ):
        if named in (("default",), ("all",)):
            continue
        offered = {
            m
            for d in describes.values()
            for w in (*d.workloads, d.model_files)
            for m in getattr(w, attribute)
        }
        unknown = [name for name in named if name not in offered]
        if unknown:
            raise SelectionError(
                f"{kind} {unknown[0]!r} is offered by none of the agents "
                f"({', '.join(describes)}); they offer: {', '.join(sorted(offered)) or 'none'}"
            )
