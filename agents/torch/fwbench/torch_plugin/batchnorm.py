"""A training cell that torch's own rule forbids, refused before it is built: BatchNorm in
training mode needs more than one value per channel (batch x height x width > 1), and raises
"Expected more than 1 value per channel when training" otherwise. At batch size 1 an image
model whose maps shrink to 1x1 (resnet*, mobilenet_v2, efficientnet_b0 at image_size 32) hits
it in its first step. Other frameworks compute such a batch's variance as zero and train on;
torch does not, so the cell is unsupported here, with a reason that names the layer and the
map, instead of a failure with a framework traceback.

The check is a forward pass on the "meta" device (shapes only, no data, milliseconds) with a
hook on every BatchNorm layer."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from fwbench.runtime.plugin import UnsupportedWorkload
from fwbench.torch_plugin import models

_BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
_TORCH_SAYS = "Expected more than 1 value per channel when training"


class _OneValue(Exception):
    """Raised by the hook at the first BatchNorm that would see one value per channel."""

    def __init__(self, layer: str, shape: tuple[int, ...]) -> None:
        super().__init__(layer)
        self.layer, self.shape = layer, shape


def one_value_layer(name: str, batch_size: int, image_size: int) -> tuple[str, tuple[int, ...]]:
    """The first BatchNorm layer of model `name` that a training step at this batch and image
    size feeds one value per channel, and its input shape; ("", ()) when there is none."""
    with torch.device("meta"):
        model = models.build_model(name)
        inputs, _ = models.example_batch(name, batch_size, image_size=image_size, device="meta")
    model.train()

    def hook(layer: str) -> Callable[[nn.Module, tuple[torch.Tensor, ...]], None]:
        def check(module: nn.Module, args: tuple[torch.Tensor, ...]) -> None:
            shape = tuple(args[0].shape)
            if shape[0] * int(torch.Size(shape[2:]).numel()) == 1:
                raise _OneValue(layer, shape)

        return check

    for layer, module in model.named_modules():
        if isinstance(module, _BATCH_NORMS):
            module.register_forward_pre_hook(hook(layer))
    try:
        model(inputs)
    except _OneValue as found:
        return found.layer, found.shape
    return "", ()


def refuse_one_value_batch_norm(name: str, batch_size: int, image_size: int) -> None:
    """Raises UnsupportedWorkload when torch would refuse to train this cell (module doc)."""
    if batch_size > 1 or not any(isinstance(m, _BATCH_NORMS) for m in _layers(name)):
        return
    layer, shape = one_value_layer(name, batch_size, image_size)
    if not layer:
        return
    feature_map = "x".join(map(str, shape[2:])) or "1"
    runs = next(
        (size for size in range(image_size + 32, 513, 32) if not one_value_layer(name, 1, size)[0]),
        None,
    )
    raise UnsupportedWorkload(
        f"torch cannot train {name} at batch size 1 with image_size {image_size}: its BatchNorm "
        f"layer {layer} gets a {feature_map} feature map ({shape[1]} channels), one value per "
        f"channel, and torch's BatchNorm refuses to train on that ('{_TORCH_SAYS}'); it runs "
        "at batch size 2 or more" + (f", or at image_size {runs} or more" if runs else "")
    )


def _layers(name: str) -> list[nn.Module]:
    with torch.device("meta"):
        return list(models.build_model(name).modules())
