"""What to run: the user's selection, validated against the catalogue before anything
starts, expanded into cells per agent and filtered by what each agent's Describe says."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass, field

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.run.validate import iteration_limit
from fwbench.spec import Catalogue, CatalogueError
from fwbench.spec.catalogue import DTYPES, PHASES
from fwbench.spec.enums import DTYPE_VALUES, PHASE_VALUES

MAX_REPEAT = 100
MAX_SEED = 2**64 - 1  # RunRequest.seed is a uint64
MAX_THREADS = 4096  # RunRequest.threads is a uint32; no host has more cores than this


class SelectionError(ValueError):
    """Bad user input; the message is one line naming the problem and the valid choices."""


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
    params: Mapping[str, int] = field(default_factory=dict)
    loop: LoopSettings = LoopSettings()
    seed: int = 0
    # Each agent runs each cell this many times, agents alternating (schedule.py).
    repeat: int = 1
    # With repeat > 1: a fresh process of each agent for every repetition (schedule.py).
    fresh_process: bool = True


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


def split_list(text: str) -> list[str]:
    return [item.strip() for item in text.split(",") if item.strip()]


def _choices(kind: str, given: list[str], valid: tuple[str, ...]) -> tuple[str, ...]:
    if not given:
        raise SelectionError(f"no {kind} given; valid: {', '.join(valid)}")
    for item in given:
        if item not in valid:
            raise SelectionError(f"unknown {kind[:-1]} {item!r}; valid: {', '.join(valid)}")
    return tuple(dict.fromkeys(given))


def _integers(kind: str, given: list[str], minimum: int) -> tuple[int, ...]:
    values = []
    for item in given:
        try:
            value = int(item)
        except ValueError:
            raise SelectionError(f"invalid {kind} {item!r}: must be an integer") from None
        if value < minimum:
            raise SelectionError(f"invalid {kind} {value}: must be >= {minimum}")
        values.append(value)
    if not values:
        raise SelectionError(f"no {kind} given")
    return tuple(dict.fromkeys(values))


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
) -> Selection:
    """Parses comma-separated CLI values; raises SelectionError on anything invalid."""
    selection = Selection(
        workloads=_choices("workloads", split_list(workloads), tuple(catalogue.workloads)),
        phases=_choices("phases", split_list(phases), PHASES),
        batch_sizes=_integers("batch size", split_list(batch_sizes), 1),
        dtypes=_choices("dtypes", split_list(dtypes), DTYPES),
        threads=_integers("thread count", split_list(threads), 0),
        modes=_modes(split_list(modes)),
        params=_parse_params(params or []),
        loop=loop,
        seed=seed,
        repeat=repeat,
        fresh_process=fresh_process,
    )
    if not 1 <= repeat <= MAX_REPEAT:
        raise SelectionError(f"invalid repeat {repeat}: allowed 1..{MAX_REPEAT}")
    if not 0 <= seed <= MAX_SEED:
        raise SelectionError(f"invalid seed {seed}: allowed 0..{MAX_SEED} (2^64 - 1)")
    too_many = [t for t in selection.threads if t > MAX_THREADS]
    if too_many:
        raise SelectionError(f"invalid thread count {too_many[0]}: allowed 0..{MAX_THREADS}")
    _check_limits(catalogue, selection)
    return selection


def _modes(given: list[str]) -> tuple[str, ...]:
    if not given:
        raise SelectionError("no mode given; use default, all or mode names (eager, jit, ...)")
    for mode in given:
        if not mode.replace("_", "").replace("-", "").isalnum():
            raise SelectionError(f"invalid mode {mode!r}")
    if len(given) > 1 and {"default", "all"} & set(given):
        raise SelectionError("--modes default or all cannot be combined with other modes")
    return tuple(dict.fromkeys(given))


def _parse_params(items: list[str]) -> dict[str, int]:
    parsed = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SelectionError(f"invalid --param {item!r}: expected NAME=INTEGER")
        try:
            parsed[key.strip()] = int(value)
        except ValueError:
            raise SelectionError(f"invalid --param {item!r}: value must be an integer") from None
    return parsed


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
            workload.resolve_params(_params_for(catalogue, name, selection.params))
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


def _params_for(catalogue: Catalogue, workload: str, params: Mapping[str, int]) -> dict[str, int]:
    own = catalogue.get(workload).params
    return {k: v for k, v in params.items() if k in own}


def loop_request(loop: LoopSettings) -> dict[str, object]:
    """RunRequest fields for the measurement loop (unset fields take the agent's defaults)."""
    fields: dict[str, object] = {
        "min_iterations": loop.min_iterations,
        "max_iterations": loop.max_iterations,
    }
    if loop.warmup_iterations is not None:
        fields["warmup_iterations"] = loop.warmup_iterations
    if loop.min_seconds is not None:
        fields["min_seconds"] = loop.min_seconds
    return fields


def plan_cells(
    agent: str, describe: agent_pb2.DescribeResponse, catalogue: Catalogue, selection: Selection
) -> list[Cell]:
    """The cross product for one agent, in a stable order; cells the agent does not support
    carry the reason instead of being dropped. For an agent that sizes its thread pools at
    start-up, the thread count is the outermost loop, so each count needs one agent start."""
    support = {w.name: w for w in describe.workloads}
    cells = []
    for workload, phase, batch, dtype, threads in itertools.product(
        selection.workloads,
        selection.phases,
        selection.batch_sizes,
        selection.dtypes,
        selection.threads,
    ):
        params = catalogue.get(workload).resolve_params(
            _params_for(catalogue, workload, selection.params)
        )
        found = support.get(workload)
        reason = _unsupported(found, workload, phase, dtype)
        for mode, mode_reason in _cell_modes(found, workload, selection.modes):
            cells.append(
                Cell(
                    agent,
                    workload,
                    phase,
                    batch,
                    dtype,
                    threads,
                    params,
                    reason or mode_reason,
                    mode,
                )
            )
    if describe.threads.fixed_at_startup:
        cells.sort(key=lambda cell: selection.threads.index(cell.threads))  # stable
    return cells


def _cell_modes(
    support: agent_pb2.WorkloadSupport | None, workload: str, modes: tuple[str, ...]
) -> list[tuple[str, str]]:
    """(mode, unsupported reason) pairs; "" is the agent's default mode. Of explicitly named
    modes, an agent runs those it offers (so `--modes compile,xla,jit` gives each framework its
    compiled mode); one that offers none of them gets a single unsupported cell."""
    offered = list(support.modes) if support else []
    if modes == ("default",) or not offered:
        return [("", "")]
    if modes == ("all",):
        return [(mode, "") for mode in offered]
    chosen = [mode for mode in modes if mode in offered]
    if chosen:
        return [(mode, "") for mode in chosen]
    reason = f"agent offers none of the modes {', '.join(modes)} for {workload}"
    return [(modes[0], f"{reason} (it offers {', '.join(offered)})")]


def _unsupported(
    support: agent_pb2.WorkloadSupport | None, workload: str, phase: str, dtype: str
) -> str:
    if support is None:
        return f"agent does not implement {workload}"
    if PHASE_VALUES[phase] not in support.phases:
        return f"agent does not support phase {phase} for {workload}"
    if DTYPE_VALUES[dtype] not in support.dtypes:
        return f"agent does not support dtype {dtype} for {workload}"
    return ""


def check_modes_offered(
    modes: tuple[str, ...], describes: Mapping[str, agent_pb2.DescribeResponse]
) -> None:
    """Raises SelectionError for a mode named in --modes that none of the agents offers for any
    workload (a typo, most likely), listing the modes they do offer."""
    if modes in (("default",), ("all",)):
        return
    offered = {m for d in describes.values() for w in d.workloads for m in w.modes}
    unknown = [mode for mode in modes if mode not in offered]
    if unknown:
        raise SelectionError(
            f"mode {unknown[0]!r} is offered by none of the agents "
            f"({', '.join(describes)}); they offer: {', '.join(sorted(offered)) or 'no modes'}"
        )
