"""The distributed world an agent process is one rank of, decided at start-up (a framework
initialises its distributed runtime once per process), with torchrun's conventions: WORLD_SIZE,
RANK, LOCAL_RANK, MASTER_ADDR and MASTER_PORT, plus FWBENCH_DIST_BACKEND (empty: the
framework's choice for its device, e.g. gloo on a CPU and nccl on a GPU for torch) and
FWBENCH_PEERS (every rank's HOST:PORT in rank order, for frameworks that address each rank).

Every framework plugin reads the same variables: TensorFlow's plugin turns them into a
TF_CONFIG, JAX's into jax.distributed's coordinator address (docs/distributed.md). An agent
without WORLD_SIZE runs alone; nothing here imports a framework.

FWBENCH_LOCAL_DEVICES=D (with WORLD_SIZE=1) makes the one process D replicas on D devices of
its own: TensorFlow's MirroredStrategy over D logical CPUs, a JAX mesh over D host devices."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from fwbench.runtime.invalid_context import InvalidContext
from fwbench.spec import startup

WORLD_VARIABLES = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")
BACKEND_VARIABLE = startup.DIST_BACKEND
PEERS_VARIABLE = startup.PEERS
# Devices of this one process that its strategy spreads each step over (TensorFlow's
# MirroredStrategy over logical CPUs, a JAX mesh over forced host devices); 1 by default.
LOCAL_DEVICES_VARIABLE = startup.LOCAL_DEVICES
MAX_WORLD_SIZE = 4096
# Model-parallel strategies, whose batch_size is the world's (every replica works on the same
# batch), not each replica's: a step covers batch_size items however many devices it spans.
WHOLE_BATCH_STRATEGIES = frozenset({"pipeline", "tensor"})
MAX_LOCAL_DEVICES = 64
# How long a rank waits for its peers (joining, and in a collective) before it raises instead
# of blocking for good (a rank died or hung): the collector then fails the cell and restarts
# the world. Every plugin's engine is given it.
TIMEOUT_VARIABLE = startup.DIST_TIMEOUT_SECONDS
DEFAULT_TIMEOUT_SECONDS = 120


@dataclass(frozen=True)
class World:
    """One rank's view of its world."""

    size: int
    rank: int
    local_rank: int
    address: str  # MASTER_ADDR: where rank 0's rendezvous listens
    port: int  # MASTER_PORT
    backend: str = ""  # "" = the framework's default for its device
    # HOST:PORT of every rank, in rank order, for frameworks that address each rank
    # (TensorFlow's TF_CONFIG): FWBENCH_PEERS; () when the launcher gave none.
    peers: tuple[str, ...] = ()
    # FWBENCH_LOCAL_DEVICES: replicas in this process, each with batch_size items of its own.
    local_devices: int = 1
    timeout_seconds: int = DEFAULT_TIMEOUT_SECONDS  # FWBENCH_DIST_TIMEOUT_SECONDS

    @property
    def rendezvous(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{host}:{self.port}"


def _integer(environ: Mapping[str, str], name: str, low: int, high: int) -> int:
    raw = environ.get(name, "").strip()
    try:
        value = int(raw)
    except ValueError:
        raise InvalidContext(f"{name}={raw!r}: expected an integer {low}..{high}") from None
    if not low <= value <= high:
        raise InvalidContext(f"{name}={value}: allowed {low}..{high}")
    return value


def world_from_environment(environ: Mapping[str, str] = os.environ) -> World | None:
    """The world the variables describe, or None without WORLD_SIZE; raises InvalidContext
    naming the variable when one is missing or out of range."""
    if not environ.get("WORLD_SIZE", "").strip():
        return None
    size = _integer(environ, "WORLD_SIZE", 1, MAX_WORLD_SIZE)
    for name in WORLD_VARIABLES[1:]:
        if not environ.get(name, "").strip():
            raise InvalidContext(f"WORLD_SIZE is set, so {name} is required (torchrun's names)")
    rank = _integer(environ, "RANK", 0, size - 1)
    local_rank = _integer(environ, "LOCAL_RANK", 0, size - 1)
    port = _integer(environ, "MASTER_PORT", 1, 65535)
    backend = environ.get(BACKEND_VARIABLE, "").strip()
    if backend and not backend.replace("_", "").isalnum():
        raise InvalidContext(f"{BACKEND_VARIABLE}={backend!r}: expected a backend name")
    peers = tuple(p.strip() for p in environ.get(PEERS_VARIABLE, "").split(",") if p.strip())
    if peers and len(peers) != size:
        raise InvalidContext(f"{PEERS_VARIABLE} names {len(peers)} ranks; WORLD_SIZE is {size}")
    devices = 1
    if environ.get(LOCAL_DEVICES_VARIABLE, "").strip():
        devices = _integer(environ, LOCAL_DEVICES_VARIABLE, 1, MAX_LOCAL_DEVICES)
    if devices > 1 and size > 1:
        raise InvalidContext(
            f"{LOCAL_DEVICES_VARIABLE}={devices} with WORLD_SIZE={size}: several devices in each "
            "of several processes is not built (JAX's host devices cannot meet multi-process); "
            "use one or the other"
        )
    timeout = DEFAULT_TIMEOUT_SECONDS
    if environ.get(TIMEOUT_VARIABLE, "").strip():
        timeout = _integer(environ, TIMEOUT_VARIABLE, 1, 86400)
    address = environ["MASTER_ADDR"].strip()
    return World(size, rank, local_rank, address, port, backend, peers, devices, timeout)


CPUS_VARIABLE = startup.CPUS


def pin_cpus(environ: Mapping[str, str] = os.environ) -> None:
    """Pins this process to FWBENCH_CPUS ("0,1"), before any framework sizes its thread
    pools: ranks sharing a host get disjoint CPUs. Raises InvalidContext when malformed or
    outside this process's CPUs."""
    raw = environ.get(CPUS_VARIABLE, "").strip()
    if not raw:
        return
    try:
        cpus = {int(item) for item in raw.split(",") if item.strip()}
    except ValueError:
        raise InvalidContext(f"{CPUS_VARIABLE}={raw!r}: expected CPU numbers, e.g. 0,1") from None
    allowed = os.sched_getaffinity(0)
    if not cpus or not cpus <= allowed:
        raise InvalidContext(
            f"{CPUS_VARIABLE}={raw!r}: this process may use CPUs {sorted(allowed)} only"
        )
    os.sched_setaffinity(0, cpus)
