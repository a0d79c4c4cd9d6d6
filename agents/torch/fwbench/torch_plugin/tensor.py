"""Tensor parallelism on PyTorch's own engine: torch.distributed.tensor.parallel shards a
catalogue model's fully connected layers over the world's ranks, Megatron's way: two Linear
layers in a row (only element-wise modules between them: ReLU, Dropout) become a column-wise
then a row-wise shard, so the activation between them stays split and one all-reduce joins
the second's output; a Linear left alone is column-wise with its output gathered. Torch's
parallel styles shard Linear and Embedding only, so convolutions, BatchNorm and the LSTM stay
replicated: every rank computes them on the same batch (the world's, batch_size in all).

Every rank holds identical initial weights (the seed) and the same batch (the seed, not the
rank): the replicated weights get identical gradients without any all-reduce, and the
sharded ones are one layer's parts. ReLUs are made out-of-place: in place on a sharded
output, autograd refuses them (a view created by DTensor's conversion)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

from fwbench.runtime.plugin import UnsupportedWorkload, WorkloadSpec
from fwbench.runtime.world import World
from fwbench.torch_plugin import models
from fwbench.torch_plugin.training import training_step

ELEMENTWISE = (nn.ReLU, nn.Dropout, nn.GELU, nn.Tanh, nn.Identity)


def plan(model: nn.Module) -> dict[str, Any]:
    """Module name -> parallel style for every Linear of `model` (see the module's doc)."""
    found: dict[str, Any] = {}
    for parent_name, parent in model.named_modules():
        children = list(parent.named_children())
        index = 0
        while index < len(children):
            name, child = children[index]
            if not isinstance(child, nn.Linear):
                index += 1
                continue
            qualified = f"{parent_name}.{name}" if parent_name else name
            following = index + 1
            while following < len(children) and isinstance(children[following][1], ELEMENTWISE):
                following += 1
            paired = following < len(children) and isinstance(children[following][1], nn.Linear)
            if paired and isinstance(parent, nn.Sequential):
                second = (
                    f"{parent_name}.{children[following][0]}"
                    if parent_name
                    else children[following][0]
                )
                found[qualified], found[second] = ColwiseParallel(), RowwiseParallel()
                index = following + 1
            else:
                found[qualified] = ColwiseParallel(output_layouts=Replicate())
                index += 1
    return found


def build(
    spec: WorkloadSpec, dtype: torch.dtype, device: torch.device, world: World
) -> tuple[Callable[[], object], Callable[[], float]]:
    """The model's training step with its Linear layers sharded over the world's ranks
    (training_step: SGD as the single-process step); the first step's loss (every rank's)."""
    name = spec.workload.name
    torch.manual_seed(spec.seed)
    model = models.build_model(name).to(device=device, dtype=dtype)
    styles = plan(model)
    if not styles:
        raise UnsupportedWorkload(f"tensor: {name} has no Linear layer to shard")
    for module in model.modules():
        if isinstance(module, nn.ReLU):
            module.inplace = False
    mesh = init_device_mesh(device.type, (world.size,))
    parallelize_module(model, mesh, styles)
    return training_step(model, spec, dtype, device, spec.seed)  # one batch for all ranks
