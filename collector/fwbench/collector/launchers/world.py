"""A distributed world: W agent processes, one per rank, started together with torchrun's
variables (WORLD_SIZE, RANK, LOCAL_RANK, MASTER_ADDR, MASTER_PORT), each pinned to its own CPUs
(FWBENCH_CPUS) when they share a host, and seen by the rest of the collector as ONE agent: a
WorldHandle whose client (WorldClient, world_call.py) sends each Run to every rank at once and
answers with one combined result (run/combine.py). Frameworks initialise their distributed
runtime once per process, so a world is started per world size, as agents are per thread
count (docs/distributed.md).

Where a rank runs is its launcher's business (a local process, a container, a Slurm task, a
pod: Launcher.place_world); this module only says what each rank is told, so that every
launcher places ranks the same way."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from functools import partial
from typing import Any, ClassVar

from fwbench.collector.agents.client import AgentUnavailable
from fwbench.collector.agents.manifest import AgentManifest
from fwbench.collector.agents.specs import Instance
from fwbench.collector.launchers.base import AgentHandle, Launcher, Placement
from fwbench.collector.launchers.world_call import Combine, WorldClient
from fwbench.spec import startup

CPUS_VARIABLE = startup.CPUS  # the CPUs a rank pins itself to (runtime/cli.py)
PEERS_VARIABLE = startup.PEERS  # every rank's HOST:PORT, for TensorFlow's TF_CONFIG
DEVICES_VARIABLE = startup.LOCAL_DEVICES  # NAME~w1xD: the devices of the one process


def rank_cpus(world_size: int, per_rank: int, usable: Sequence[int]) -> list[list[int]]:
    """Disjoint CPU sets of `per_rank` CPUs for each rank, in the order of `usable`; where the
    host has too few, sets wrap around (shared CPUs: the row says so through rank_cpus)."""
    cpus = list(usable)
    return [
        [cpus[(rank * per_rank + i) % len(cpus)] for i in range(per_rank)]
        for rank in range(world_size)
    ]


@dataclass
class WorldHandle(AgentHandle):
    """One agent made of the world's rank processes; rank 0's address and /metrics."""

    sees_files: ClassVar[bool] = True  # its ranks' launchers' hosts: this one, or Slurm's
    ranks: list[AgentHandle] = field(default_factory=list)
    cpus: list[list[int]] = field(default_factory=list)
    placement: str = "local"
    release: Callable[[], None] = field(default=lambda: None)  # Placement.release

    @property
    def kind(self) -> str:  # type: ignore[override]
        """The launcher's that started the ranks (local, docker): the `launcher` column."""
        return self.ranks[0].kind if self.ranks else "local"

    def alive(self) -> bool:
        return all(rank.alive() for rank in self.ranks)

    def exit_reason(self) -> str:
        broken = getattr(self.client, "broken", "")
        for index, rank in enumerate(self.ranks):
            if not rank.alive():
                return f"rank {index}: {rank.exit_reason()}"
        return broken or "a rank stopped answering"

    def settle(self, seconds: float) -> None:
        for rank in self.ranks:
            rank.settle(seconds)

    def stop(self, grace_seconds: float = 10.0) -> None:
        """Every rank, side by side: a rank blocked in a collective waits for no one."""
        with ThreadPoolExecutor(max_workers=max(len(self.ranks), 1)) as pool:
            list(pool.map(lambda rank: rank.stop(grace_seconds), self.ranks))
        self.release()

    def identity(self) -> dict[str, Any]:
        """Rank 0's, but a world that a scheduler spread names all its nodes, in rank order."""
        first = self.ranks[0].identity()
        nodes = dict.fromkeys(node_of(rank) for rank in self.ranks)
        if any(nodes):
            first["node"] = ",".join(node for node in nodes if node)
        return first

    def metadata(self) -> dict[str, Any]:
        return {
            **self.ranks[0].metadata(),
            "world_size": len(self.ranks),
            "placement": self.placement,
            "ranks": [
                {"address": r.address, "pid": r.host_pid, "cpus": cpus, "node": node_of(r)}
                for r, cpus in zip(self.ranks, self.cpus, strict=True)
            ],
        }


def node_of(handle: AgentHandle) -> str:
    """The scheduler node of a rank ("" where no scheduler placed it)."""
    return str(handle.identity().get("node") or "")


def _none() -> None:
    pass


# How often a world is placed and started again when a port it was given was taken first.
PLACEMENTS = 3
_PORT_TAKEN = ("address already in use", "eaddrinuse", "errno: 98", "errno 98")


def port_taken(error: str) -> bool:
    """Whether a rank's start failed because its port was taken (torch's TCPStore, gRPC and
    gloo word it differently; the message carries the rank's log tail)."""
    return any(words in error.lower() for words in _PORT_TAKEN)


def start_world(
    launcher: Launcher,
    manifest: AgentManifest,
    instance: Instance,
    per_rank_threads: int,
    combine: Combine,
) -> WorldHandle:
    """Starts every rank side by side (each blocks in its framework's rendezvous until all
    have joined) and waits until all are healthy; on any failure stops them all and raises.
    The ports a placement chose free can be taken before the ranks bind them: a start that
    failed with "address already in use" is placed and started again, up to PLACEMENTS
    times."""
    world_size, devices = instance.ranks, instance.devices
    usable = sorted(os.sched_getaffinity(0))
    pinned = rank_cpus(world_size, per_rank_threads, usable)
    for attempt in range(1, PLACEMENTS + 1):
        place = launcher.place_world(manifest, instance, per_rank_threads)
        cpus = pinned if place.pins_cpus else [[] for _ in range(world_size)]

        def one(
            rank: int,
            abandon: threading.Event,
            place: Placement = place,
            cpus: list[list[int]] = cpus,
        ) -> AgentHandle:
            environment = {
                "WORLD_SIZE": str(world_size),
                "RANK": str(rank),
                "LOCAL_RANK": str(rank),
                "MASTER_ADDR": place.address,
                "MASTER_PORT": str(place.port),
                PEERS_VARIABLE: ",".join(place.peers),
                **({CPUS_VARIABLE: ",".join(map(str, cpus[rank]))} if place.pins_cpus else {}),
                **({DEVICES_VARIABLE: str(devices)} if devices > 1 else {}),
            }
            one = instance.of_rank(rank)
            return launcher.start(manifest, one, per_rank_threads, environment, abandon=abandon)

        starts = [partial(one, rank) for rank in range(world_size)]
        try:
            ranks = _every_rank(str(instance), starts, place.release)
            break
        except AgentUnavailable as error:
            if attempt == PLACEMENTS or not port_taken(str(error)):
                raise
    first = ranks[0]
    client = WorldClient(instance, ranks, combine)
    return WorldHandle(
        instance=instance,
        address=first.address,
        client=client,  # type: ignore[arg-type]
        manifest=manifest,
        threads=per_rank_threads,
        metrics_address=first.metrics_address,
        log_path=first.log_path,
        host_pid=first.host_pid,
        ranks=ranks,
        cpus=cpus,
        placement=place.kind,
        release=place.release,
    )


def _every_rank(
    name: str,
    starts: Sequence[Callable[[threading.Event], AgentHandle]],
    release: Callable[[], None] = _none,
) -> list[AgentHandle]:
    """Every rank's handle, started (or attached) side by side: each blocks in its framework's
    rendezvous until all have joined. The first rank to fail gives the others' starts up (the
    event each start is handed: they would wait for it until their timeout), then those that
    started are stopped, the placement released, and that first failure raised."""
    abandon = threading.Event()
    with ThreadPoolExecutor(max_workers=len(starts)) as pool:
        futures = [pool.submit(start, abandon) for start in starts]
        first: BaseException | None = None
        for future in as_completed(futures):
            if future.exception() is not None and first is None:
                first = future.exception()
                abandon.set()
    ranks = [f.result() for f in futures if f.exception() is None]
    if first is not None:
        for rank in ranks:
            rank.stop(1.0)
        release()
        raise AgentUnavailable(f"world {name} of {len(starts)} ranks: {first}")
    return ranks


def attach_world(
    instance: Instance,
    combine: Combine,
    attach: Callable[[Instance, str], AgentHandle],
) -> WorldHandle:
    """A world someone else started (NAME@HOST:PORT+HOST:PORT, ranks in rank order): each rank
    attached side by side with `attach(rank, address)`. Whoever started the ranks chose
    their rendezvous; WorldClient.describe then checks that each is the rank its place says, of
    a world of that size, and the same agent as rank 0."""
    starts = [
        partial(_attach, attach, instance.of_rank(rank), address)
        for rank, address in enumerate(instance.addresses)
    ]
    ranks = _every_rank(str(instance), starts)  # attaching waits for nothing to release
    return WorldHandle(
        instance=instance,
        address=ranks[0].address,
        client=WorldClient(instance, ranks, combine),  # type: ignore[arg-type]
        ranks=ranks,
        cpus=[[] for _ in ranks],
        placement="attached",
    )


def _attach(
    attach: Callable[[Instance, str], AgentHandle],
    rank: Instance,
    address: str,
    _: threading.Event,
) -> AgentHandle:
    return attach(rank, address)
