"""PyTorch side of the ReferencePlugin interface: canonical weights are exactly the models'
``state_dict`` (minus ``num_batches_tracked``), so loading and exporting is a copy."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
import torch
from torch import nn

from fwbench.runtime.architectures import TRANSFORMER_NAMES
from fwbench.runtime.plugin import Settings
from fwbench.runtime.reference import (
    EquivalenceCase,
    EquivalenceResult,
    OptimizerSpec,
    param_count,
)
from fwbench.runtime.world import World
from fwbench.torch_plugin import models, transformers

_SKIPPED = ("num_batches_tracked",)


def export(model: nn.Module) -> dict[str, np.ndarray]:
    return {
        name: tensor.detach().to("cpu", torch.float32).numpy().copy()
        for name, tensor in model.state_dict().items()
        if not name.endswith(_SKIPPED)
    }


def _fresh(name: str, params: Mapping[str, int] | None = None) -> nn.Module:
    """A freshly initialised catalogue model: a transformer shaped by `params`."""
    if name in TRANSFORMER_NAMES:
        return transformers.build_transformer(transformers.config_for(name, params or {}))
    return models.build_model(name)


def load(
    name: str,
    weights: Mapping[str, np.ndarray],
    *,
    dropout: bool = True,
    params: Mapping[str, int] | None = None,
) -> nn.Module:
    """A float32 CPU model holding `weights`; every key must match and every weight be set."""
    model = _fresh(name, params)
    if not dropout:
        for module in model.modules():
            if isinstance(module, nn.Dropout):
                module.p = 0.0
    expected = set(export(model))
    if set(weights) != expected:
        missing, extra = sorted(expected - set(weights)), sorted(set(weights) - expected)
        raise ValueError(f"{name}: canonical weights missing {missing[:5]}, unexpected {extra[:5]}")
    state = {
        key: torch.from_numpy(np.array(value, dtype=np.float32)) for key, value in weights.items()
    }
    model.load_state_dict(state, strict=False)  # num_batches_tracked keeps its default
    return model


def canonical_weights(
    name: str, seed: int, params: Mapping[str, int] | None = None
) -> dict[str, np.ndarray]:
    torch.manual_seed(seed)
    return export(_fresh(name, params))


def make_optimizer(model: nn.Module, spec: OptimizerSpec) -> torch.optim.Optimizer:
    # torch's SGD momentum is the canonical one: v = m*v + g; w -= lr*v.
    return torch.optim.SGD(model.parameters(), lr=spec.learning_rate, momentum=spec.momentum)


def equivalence(case: EquivalenceCase, world: World | None = None) -> EquivalenceResult:
    """The steps EquivalenceCase documents. As a rank of a world, the optimizer step is
    DistributedDataParallel's: each rank trains on its contiguous shard of the batch and DDP
    averages the gradients, which for equal shards and a model without BatchNorm is the full
    batch's gradient; the losses are the full batch's (tests/distributed)."""
    if case.model in TRANSFORMER_NAMES:
        return transformer_equivalence(case)
    model = load(case.model, case.weights, dropout=False)
    inputs = torch.from_numpy(np.asarray(case.inputs))
    labels = torch.from_numpy(np.asarray(case.labels, dtype=np.int64))
    loss_fn = nn.CrossEntropyLoss()
    model.eval()
    with torch.no_grad():
        logits = model(inputs)
    model.train()
    optimizer = make_optimizer(model, case.optimizer)
    if world is None:
        loss = loss_fn(model(inputs), labels)
        loss.backward()
    else:
        with torch.no_grad():
            loss = loss_fn(model(inputs), labels)
        shard = slice(*_shard(len(inputs), world.rank, world.size))
        wrapped = nn.parallel.DistributedDataParallel(model)
        loss_fn(wrapped(inputs[shard]), labels[shard]).backward()
    optimizer.step()
    with torch.no_grad():
        after = loss_fn(model(inputs), labels)
    return EquivalenceResult(
        param_count=param_count(case.weights),
        eval_logits=logits.numpy(),
        loss_before=float(loss.detach()),
        loss_after=float(after),
    )


def transformer_equivalence(case: EquivalenceCase) -> EquivalenceResult:
    """EquivalenceCase's steps for bert or gpt (the language-model loss over the labelled
    positions), and for gpt with new_tokens the generate workload's greedy decoding, eager, on
    the loaded weights before the optimizer step."""
    model = load(case.model, case.weights, params=case.params)
    tokens = torch.from_numpy(np.asarray(case.inputs, dtype=np.int64))
    labels = torch.from_numpy(np.asarray(case.labels, dtype=np.int64))
    model.eval()
    with torch.no_grad():
        logits = model(tokens)
    generated = gaps = None
    if case.new_tokens:
        params = {**case.params, "prompt_len": tokens.shape[1], "new_tokens": case.new_tokens}
        steps, run = transformers.build_generation(
            params,
            tokens.shape[0],
            torch.float32,
            torch.device("cpu"),
            torch.Generator(),
            "eager",
            lambda fn: fn,
            model=model,
            prompt=tokens,
            keep_gaps=True,
        )
        steps.generate()
        generated = torch.stack(run.tokens, dim=1).numpy()
        gaps = torch.stack(run.gaps, dim=1).numpy()
    model.train()
    optimizer = make_optimizer(model, case.optimizer)
    loss = transformers.language_model_loss(model(tokens), labels)
    loss.backward()
    optimizer.step()
    with torch.no_grad():
        after = transformers.language_model_loss(model(tokens), labels)
    return EquivalenceResult(
        param_count=param_count(case.weights),
        eval_logits=logits.numpy(),
        loss_before=float(loss.detach()),
        loss_after=float(after),
        generated=generated,
        generated_gaps=gaps,
    )


def _shard(batch: int, rank: int, size: int) -> tuple[int, int]:
    if batch % size:
        raise ValueError(f"a batch of {batch} does not split into {size} equal shards")
    step = batch // size
    return rank * step, (rank + 1) * step


class TorchTrainer:
    """Trains a loaded model on host batches; `wrap` applies the mode (eager or compile)."""

    def __init__(
        self,
        model: nn.Module,
        optimizer: OptimizerSpec,
        device: torch.device,
        dtype: torch.dtype,
        wrap: Callable[[nn.Module], Callable[[torch.Tensor], torch.Tensor]],
        settings: Settings,
    ) -> None:
        self._model = model.to(device=device, dtype=dtype).train()
        self._forward = wrap(self._model)
        self._optimizer = make_optimizer(self._model, optimizer)
        self._loss = nn.CrossEntropyLoss()
        self._device, self._dtype = device, dtype
        self.settings = settings

    def _tensor(self, images: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(images).to(self._device, self._dtype)

    def train_step(self, images: np.ndarray, labels: np.ndarray) -> object:
        self._optimizer.zero_grad(set_to_none=True)
        targets = torch.from_numpy(labels).to(self._device)
        loss = self._loss(self._forward(self._tensor(images)), targets)
        loss.backward()
        self._optimizer.step()
        return loss

    def predict(self, images: np.ndarray) -> np.ndarray:
        self._model.eval()
        try:
            with torch.inference_mode():
                return self._model(self._tensor(images)).argmax(dim=1).cpu().numpy()
        finally:
            self._model.train()
