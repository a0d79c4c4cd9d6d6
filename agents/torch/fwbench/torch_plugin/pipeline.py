"""Model parallelism on PyTorch's own engine: a catalogue ResNet split into one pipeline stage
per rank by torch.distributed.pipelining (pipeline() traces the model and cuts it at the
split points; ScheduleGPipe runs the micro-batches forward through every stage, then
backward). The batch is the world's: rank 0 feeds it, the last rank computes the loss, every
stage steps its own optimizer (SGD lr 0.01, momentum 0.9, as the single-process step)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from torch.distributed.pipelining import ScheduleGPipe, SplitPoint
from torch.distributed.pipelining import pipeline as trace_pipeline

from fwbench.runtime.plugin import UnsupportedWorkload, WorkloadSpec
from fwbench.runtime.world import World
from fwbench.torch_plugin import models
from fwbench.torch_plugin.pipeline_stages import split_points


def build(
    spec: WorkloadSpec, dtype: torch.dtype, device: torch.device, world: World
) -> tuple[Callable[[], object], Callable[[], float]]:
    """This rank's stage and its training step; the last stage knows the first step's loss
    (the mean over micro-batches; NaN on other stages)."""
    name, chunks = spec.workload.name, world.size
    if spec.batch_size % chunks:
        raise UnsupportedWorkload(
            f"pipeline: batch {spec.batch_size} does not split into {chunks} micro-batches "
            "(one per stage): use a multiple of the world size"
        )
    torch.manual_seed(spec.seed)
    model = models.build_model(name).to(device=device, dtype=dtype)
    generator = torch.Generator(device=device).manual_seed(spec.seed)
    inputs, labels = models.example_batch(
        name,
        spec.batch_size,
        image_size=spec.params.get("image_size", 224),
        dtype=dtype,
        device=device,
        generator=generator,
    )
    split = {point: SplitPoint.BEGINNING for point in split_points(name, world.size)}
    traced = trace_pipeline(model, mb_args=(inputs[: spec.batch_size // chunks],), split_spec=split)
    stage = traced.build_stage(world.rank, device)
    schedule = ScheduleGPipe(stage, n_microbatches=chunks, loss_fn=nn.CrossEntropyLoss())
    optimizer = torch.optim.SGD(stage.submod.parameters(), lr=0.01, momentum=0.9)
    first, last = world.rank == 0, world.rank == world.size - 1
    first_loss: list[float] = []

    def step() -> object:
        optimizer.zero_grad(set_to_none=True)
        losses: list[torch.Tensor] = []
        if first and last:
            schedule.step(inputs, target=labels, losses=losses)
        elif first:
            schedule.step(inputs)
        elif last:
            schedule.step(target=labels, losses=losses)
        else:
            schedule.step()
        optimizer.step()
        if losses and not first_loss:
            first_loss.append(float(torch.stack([loss.detach() for loss in losses]).mean()))
        return losses

    return step, lambda: first_loss[0] if first_loss else float("nan")
