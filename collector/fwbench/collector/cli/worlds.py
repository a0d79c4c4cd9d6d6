"""`collector run --world-sizes`: the world sizes a user asked for, checked before anything
starts (docs/distributed.md)."""

from __future__ import annotations

from collections.abc import Sequence

from fwbench.collector.agents.specs import (
    DEVICES_SEPARATOR,
    MAX_LOCAL_DEVICES,
    MAX_WORLD_SIZE,
    Instance,
)
from fwbench.collector.run.plan import SelectionError, split_list
from fwbench.spec import Catalogue

# Workload kinds measured only across the ranks of a world (the catalogue's kinds).
WORLD_KINDS = ("collective",)

# Every rank of a world runs the same number of timed steps: --iterations, or this many.
DEFAULT_WORLD_ITERATIONS = 10


def parse_world_sizes(
    text: str,
    min_seconds: float | None,
    threads: str = "0",
    strategies: str = "default",
) -> tuple[tuple[int, int], ...]:
    """The sizes, in the order given, each (ranks, devices): N (N ranks of one device) or NxD
    (N ranks of D devices each: 1xD, one process spreading its step over D devices of its
    own); () without --world-sizes. Raises SelectionError."""
    sizes: list[tuple[int, int]] = []
    for item in split_list(text):
        sizes.append(_world_size(item))
    if not sizes:
        if text.strip():
            raise SelectionError("--world-sizes needs sizes, e.g. 1,2")
        if strategies.strip() != "default":
            raise SelectionError("--strategies chooses how worlds distribute: add --world-sizes")
        return ()
    check_world_loop(min_seconds, threads)
    return tuple(dict.fromkeys(sizes))


def _world_size(item: str) -> tuple[int, int]:
    """(ranks, devices) of N or NxD."""
    ranks, sep, devices = item.lower().partition(DEVICES_SEPARATOR)
    if not ranks.isdigit() or not 1 <= int(ranks) <= MAX_WORLD_SIZE:
        raise SelectionError(
            f"invalid world size {item!r}: allowed 1..{MAX_WORLD_SIZE} ranks, or 1xD: one "
            f"process of D devices, D 1..{MAX_LOCAL_DEVICES}"
        )
    if not sep or devices == "1":
        return int(ranks), 1
    if not devices.isdigit() or not 1 <= int(devices) <= MAX_LOCAL_DEVICES:
        raise SelectionError(
            f"invalid world size {item!r}: D in NxD is the devices of each process, "
            f"1..{MAX_LOCAL_DEVICES}"
        )
    if int(ranks) > 1:
        raise SelectionError(
            f"world size {item!r}: several devices in each of several processes is not built "
            "(JAX's host devices cannot meet multi-process); use 1xD or N"
        )
    return int(ranks), int(devices)


def has_worlds(
    sizes: tuple[tuple[int, int], ...],
    instances: tuple[Instance, ...],
    min_seconds: float | None,
    threads: str,
) -> bool:
    """Whether the run measures worlds: --world-sizes, or a world someone else started
    (NAME@HOST:PORT+HOST:PORT), whose loop is checked as --world-sizes' is."""
    attached = any(instance.ranks for instance in instances)
    if attached and not sizes:
        check_world_loop(min_seconds, threads)
    return bool(sizes) or attached


def check_world_workloads(catalogue: Catalogue, workloads: Sequence[str], worlds: bool) -> None:
    """A collective (allreduce) runs across the ranks of a world: refused without one, rather
    than run as cells every agent says it does not implement."""
    alone = [name for name in workloads if catalogue.get(name).kind in WORLD_KINDS]
    if alone and not worlds:
        raise SelectionError(
            f"{', '.join(alone)} {'is a collective' if len(alone) == 1 else 'are collectives'}: "
            "measured across the ranks of a distributed world, so it needs --world-sizes "
            "(e.g. --world-sizes 1,2; docs/distributed.md)"
        )


def check_world_loop(min_seconds: float | None, threads: str) -> None:
    """Every rank of a world runs the same steps, with the threads it was started with."""
    if split_list(threads) not in (["0"], []):
        raise SelectionError(
            "--threads cannot be used with worlds: each rank gets this host's CPUs shared by "
            "the largest world (2 CPUs and --world-sizes 1,2: one each)"
        )
    if min_seconds:
        raise SelectionError(
            "--min-seconds cannot be used with worlds: every rank of a world runs the same "
            "number of steps, so give --iterations instead"
        )
