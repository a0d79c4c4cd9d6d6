"""Ranks of a distributed world on PyTorch's own engine: torch.distributed's process group
(gloo on a CPU, NCCL on a GPU), rendezvous over TCP at MASTER_ADDR:MASTER_PORT with torchrun's
rank conventions, DistributedDataParallel for data-parallel training, and the backend's
allreduce for the collective microbenchmark.

Model parallelism: "pipeline" splits a ResNet into one stage per rank with
torch.distributed.pipelining (GPipe schedule, pipeline.py).

torch.nn.DataParallel is not offered: it splits a batch over several GPUs of one process and
is unsupported on a CPU (docs/distributed.md)."""

from __future__ import annotations

import atexit
import contextlib
import datetime
import importlib.util
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn

from fwbench.runtime.plugin import Capability, RankReport, UnsupportedWorkload, WorkloadSpec
from fwbench.runtime.world import World
from fwbench.torch_plugin import models
from fwbench.torch_plugin.pipeline_stages import STAGES
from fwbench.torch_plugin.training import training_step


def pipelining_available() -> bool:
    return importlib.util.find_spec("torch.distributed.pipelining") is not None


def tensor_parallel_available() -> bool:
    return importlib.util.find_spec("torch.distributed.tensor.parallel") is not None


DDP = "ddp"
COLLECTIVE = "collective"
PIPELINE = "pipeline"
DATA_PARALLEL = "data_parallel"  # torch.nn.DataParallel: several GPUs of one process
TENSOR = "tensor"  # tensor.py: Linear layers sharded over the ranks
ELEMENTS_PER_ITEM = 1024  # the catalogue's allreduce item
LEAVE_SECONDS = 5  # _leave's barrier
_LAST_WORK: list[object] = []  # _leave's barrier, alive until the interpreter clears it


def start(world: World, device: torch.device) -> str:
    """Joins the world's process group (blocks until every rank has joined); returns the
    backend. Called once, from the plugin's constructor."""
    backend = world.backend or ("nccl" if device.type == "cuda" else "gloo")
    seconds = world.timeout_seconds  # FWBENCH_DIST_TIMEOUT_SECONDS
    dist.init_process_group(
        backend,
        init_method=f"tcp://{world.rendezvous}",
        rank=world.rank,
        world_size=world.size,
        timeout=datetime.timedelta(seconds=seconds),
    )
    atexit.register(_leave)
    return backend


def _leave() -> None:
    """At exit, while the interpreter is whole: on gloo, wait (LEAVE_SECONDS at most) until
    the group's work is done, then take the group down. Without it a gloo worker thread could
    still be dropping a finished allreduce (DDP's) when the interpreter finalized; the work's
    thread-local state holds a Python object, so its destructor waits for the GIL, and a
    thread taking the GIL during finalization is ended: SIGABRT, "terminate called without
    an active exception", after the rank's results were written (gdb on core dumps; 9 of 140
    two-rank worlds on the 2-vCPU host). gloo's barrier waits for all work queued before it;
    its own work stays referenced here (_LAST_WORK), so a worker never drops it last. A peer
    already gone fails the barrier at once; one hung costs LEAVE_SECONDS. NCCL needs none."""
    if not dist.is_initialized():
        return
    with contextlib.suppress(Exception):
        if dist.get_backend() == "gloo":
            _LAST_WORK.append(work := dist.barrier(async_op=True))
            work.wait(timeout=datetime.timedelta(seconds=LEAVE_SECONDS))
    with contextlib.suppress(Exception):
        dist.destroy_process_group()


def capabilities(
    base: Capability, model_names: tuple[str, ...], world: World
) -> dict[str, Capability]:
    """What a rank distributes: every model's training step under DDP (eager: compiled DDP
    graphs are left for later), the ResNets also as pipeline stages, and allreduce. A process
    started with several devices (FWBENCH_LOCAL_DEVICES) is offered DataParallel only, which
    build() refuses with the reason."""
    if world.local_devices > 1:
        several = Capability(("train",), base.dtypes, ("eager",), (DATA_PARALLEL,))
        return {name: several for name in model_names}
    sharded = (TENSOR,) if tensor_parallel_available() else ()
    train = Capability(("train",), base.dtypes, ("eager",), (DDP, *sharded))
    staged = Capability(("train",), base.dtypes, ("eager",), (DDP, PIPELINE, *sharded))
    if not pipelining_available():
        staged = train
    return {
        **{name: staged if name in STAGES else train for name in model_names},
        "allreduce": Capability(("train",), base.dtypes, ("eager",), (COLLECTIVE,)),
    }


def device_for(world: World, device: torch.device) -> torch.device:
    """A CUDA rank uses the GPU of its local rank; a CPU rank the CPU."""
    if device.type == "cuda":
        return torch.device(f"cuda:{world.local_rank % max(torch.cuda.device_count(), 1)}")
    return device


def build(
    spec: WorkloadSpec, dtype: torch.dtype, device: torch.device, world: World, backend: str
) -> tuple[Callable[[], object], RankReport]:
    if spec.strategy == DATA_PARALLEL:
        raise UnsupportedWorkload(
            "torch.nn.DataParallel splits a batch over several GPUs of one process: on a CPU "
            "it is unsupported (torch has one CPU device), and on GPUs it is not built here "
            "(no GPU was lent to this work); use --world-sizes N for DDP"
        )
    if spec.strategy == COLLECTIVE and spec.workload.name == "allreduce":
        return _allreduce(spec, dtype, device, backend)
    if spec.strategy == DDP and spec.workload.name in models.MODEL_NAMES:
        return _ddp_train(spec, dtype, device, world, backend)
    if spec.strategy == PIPELINE and spec.workload.name in STAGES:
        from fwbench.torch_plugin import pipeline  # torch >= 2.4 (pipelining_available)

        step, first_loss = pipeline.build(spec, dtype, device, world)
        return step, RankReport(backend, first_step_loss=first_loss)
    if spec.strategy == TENSOR and spec.workload.name in models.MODEL_NAMES:
        from fwbench.torch_plugin import tensor  # torch >= 2.3 (tensor_parallel_available)

        step, first_loss = tensor.build(spec, dtype, device, world)
        return step, RankReport(backend, first_step_loss=first_loss)
    raise UnsupportedWorkload(f"torch: no strategy {spec.strategy!r} for {spec.workload.name}")


def _allreduce(
    spec: WorkloadSpec, dtype: torch.dtype, device: torch.device, backend: str
) -> tuple[Callable[[], object], RankReport]:
    message = torch.ones(spec.batch_size * ELEMENTS_PER_ITEM, dtype=dtype, device=device)

    def step() -> object:
        dist.all_reduce(message)
        return message

    return step, RankReport(backend, collective_bytes=message.numel() * message.element_size())


def _ddp_train(
    spec: WorkloadSpec, dtype: torch.dtype, device: torch.device, world: World, backend: str
) -> tuple[Callable[[], object], RankReport]:
    """The catalogue model under DDP: identical initial weights on every rank (the seed; DDP
    broadcasts rank 0's anyway), each rank its own shard of synthetic data (seed + rank)."""
    torch.manual_seed(spec.seed)
    model = models.build_model(spec.workload.name).to(device=device, dtype=dtype)
    ddp_device = [device.index] if device.type == "cuda" else None
    wrapped = nn.parallel.DistributedDataParallel(model, device_ids=ddp_device)
    wrapped._set_ddp_runtime_logging_sample_rate(1)  # timings of every step, not every 100th
    step, first_loss = training_step(wrapped, spec, dtype, device, spec.seed + world.rank)

    def engine() -> dict[str, int]:
        data = wrapped._get_ddp_logging_data()
        names = {
            "forward_compute": "avg_forward_compute_time",
            "backward_compute": "avg_backward_compute_time",
            "backward_communication": "avg_backward_comm_time",
            "backward_overlap": "avg_backward_compute_comm_overlap_time",
        }
        found = {key: int(data[field]) for key, field in names.items() if field in data}
        if "backward_communication" in found and "backward_overlap" in found:
            exposed = found["backward_communication"] - found["backward_overlap"]
            found["communication_not_overlapped"] = max(exposed, 0)
        return found

    return step, RankReport(backend, engine_nanoseconds=engine, first_step_loss=first_loss)
