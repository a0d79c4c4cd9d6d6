"""The training step a distributed strategy runs its model with, once the strategy has wrapped
(DDP: distributed.py) or sharded (tensor parallelism: tensor.py) it: SGD on a synthetic batch
of the catalogue model, as the single-process step (plugin.py)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from fwbench.runtime.plugin import WorkloadSpec
from fwbench.torch_plugin import models


def training_step(
    model: nn.Module, spec: WorkloadSpec, dtype: torch.dtype, device: torch.device, data_seed: int
) -> tuple[Callable[[], object], Callable[[], float]]:
    """One SGD step (lr 0.01, momentum 0.9, as the single-process step) of `model` (wrapped by
    the strategy) on a synthetic batch drawn from `data_seed`, and the first step's loss."""
    generator = torch.Generator(device=device).manual_seed(data_seed)
    inputs, labels = models.example_batch(
        spec.workload.name,
        spec.batch_size,
        image_size=spec.params.get("image_size", 224),
        seq_len=spec.params.get("seq_len", 200),
        dtype=dtype,
        device=device,
        generator=generator,
    )
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    first_loss: list[float] = []
    model.train()

    def step() -> object:
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(inputs), labels)
        loss.backward()
        optimizer.step()
        if not first_loss:
            first_loss.append(float(loss.detach()))
        return loss

    return step, lambda: first_loss[0] if first_loss else float("nan")
