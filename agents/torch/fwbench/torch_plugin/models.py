"""PyTorch definitions of fwbench's workload catalogue, plus their forward FLOP figures.

Everything is written with ``torch.nn`` only (torchvision is deliberately not a dependency) but
mirrors torchvision's architectures layer for layer -- same order, channels, strides, padding,
bias flags and BatchNorm settings -- because the same nets are rebuilt in TensorFlow and JAX and
their parameter counts must agree exactly.  Submodule names also follow torchvision so that
``state_dict`` keys line up with it.  The numbers (channels, depths, strides, stage tables) come
from ``fwbench.runtime.architectures``, shared with the TensorFlow and JAX plugins.  Models keep
PyTorch's default initialisation (torchvision re-initialises some layers); they are benchmarked,
not trained to accuracy.

FLOP convention: only conv / linear / matmul multiply-accumulates count, 2 FLOPs per MAC, forward
pass, one input item.  That is what ``torch.utils.flop_counter.FlopCounterMode`` counts for conv
and linear (biases, BatchNorm, activations, pooling and the SE gating product count 0).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from fwbench.runtime import architectures as arch
from fwbench.runtime.architectures import (
    LENET_IMAGE_SIZE,
    LSTM_EMBED_DIM,
    LSTM_HIDDEN_SIZE,
    LSTM_VOCAB_SIZE,
    NUM_CLASSES,
)
from fwbench.runtime.architectures import check_model_name as _check_name

MODEL_NAMES = arch.MODEL_NAMES  # re-exported: plugin.py and the tests read it here


# --------------------------------------------------------------------------------------- LeNet


class LeNet(nn.Module):
    """LeNet-5 for 1x28x28 inputs (architectures.LENET_*)."""

    def __init__(self, num_classes: int = 10) -> None:
        super().__init__()
        features: list[nn.Module] = []
        in_ch = 1
        for conv in arch.LENET_CONVS:
            features.append(nn.Conv2d(in_ch, conv.channels, conv.kernel, padding=conv.padding))
            features += [nn.ReLU(inplace=True), nn.MaxPool2d(2)]
            in_ch = conv.channels
        self.features = nn.Sequential(*features)
        classifier: list[nn.Module] = []
        width = math.prod(arch.LENET_FEATURES)
        for hidden in arch.LENET_HIDDEN:
            classifier += [nn.Linear(width, hidden), nn.ReLU(inplace=True)]
            width = hidden
        self.classifier = nn.Sequential(*classifier, nn.Linear(width, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.classifier(torch.flatten(self.features(x), 1))


# -------------------------------------------------------------------------------------- ResNet


def _conv3x3(in_ch: int, out_ch: int, stride: int = 1) -> nn.Conv2d:
    # Every conv in torchvision's ResNet is followed by BatchNorm, which makes a bias redundant.
    return nn.Conv2d(in_ch, out_ch, kernel_size=3, stride=stride, padding=1, bias=False)


def _conv1x1(in_ch: int, out_ch: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_ch, out_ch, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(
        self, in_ch: int, planes: int, stride: int = 1, downsample: nn.Module | None = None
    ):
        super().__init__()
        self.conv1 = _conv3x3(in_ch, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Module):
    """ResNet v1.5 bottleneck, as torchvision: the stride sits on the 3x3 conv, not the 1x1."""

    expansion = 4

    def __init__(
        self, in_ch: int, planes: int, stride: int = 1, downsample: nn.Module | None = None
    ):
        super().__init__()
        self.conv1 = _conv1x1(in_ch, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = _conv3x3(planes, planes, stride)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = _conv1x1(planes, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


_BLOCKS: dict[str, type[BasicBlock | Bottleneck]] = {
    "basic": BasicBlock,
    "bottleneck": Bottleneck,
}


class ResNet(nn.Module):
    def __init__(self, spec: arch.ResNetSpec, num_classes: int):
        super().__init__()
        block = _BLOCKS[spec.block]
        stem = arch.RESNET_STEM_CHANNELS
        self.in_ch = stem  # running channel count while the stages are built
        self.conv1 = nn.Conv2d(3, stem, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(stem)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        widths, depths = arch.RESNET_STAGE_WIDTHS, spec.depths
        self.layer1 = self._make_layer(block, widths[0], depths[0], stride=1)
        self.layer2 = self._make_layer(block, widths[1], depths[1], stride=2)
        self.layer3 = self._make_layer(block, widths[2], depths[2], stride=2)
        self.layer4 = self._make_layer(block, widths[3], depths[3], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(widths[3] * block.expansion, num_classes)

    def _make_layer(
        self, block: type[BasicBlock | Bottleneck], planes: int, blocks: int, stride: int
    ) -> nn.Sequential:
        out_ch = planes * block.expansion
        downsample = None
        # The shortcut needs a projection whenever the block changes resolution or width.
        if stride != 1 or self.in_ch != out_ch:
            downsample = nn.Sequential(_conv1x1(self.in_ch, out_ch, stride), nn.BatchNorm2d(out_ch))
        layers = [block(self.in_ch, planes, stride, downsample)]
        self.in_ch = out_ch
        layers += [block(out_ch, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# ----------------------------------------------------------------------------------------- VGG


class VGG(nn.Module):
    def __init__(self, cfg: tuple[int, ...], num_classes: int):
        super().__init__()
        layers: list[nn.Module] = []
        in_ch = 3
        for width in cfg:
            if width == arch.POOL:
                layers.append(nn.MaxPool2d(kernel_size=2, stride=2))
            else:
                # No BatchNorm in plain vgg16, so these convs keep their bias.
                conv = nn.Conv2d(in_ch, width, kernel_size=3, padding=1)
                layers += [conv, nn.ReLU(inplace=True)]
                in_ch = width
        self.features = nn.Sequential(*layers)
        # Adaptive pooling keeps the 25088-wide classifier valid for any image size >= 32.
        pooled, hidden, rate = arch.VGG_POOLED_SIZE, arch.VGG_HIDDEN, arch.VGG_DROPOUT
        self.avgpool = nn.AdaptiveAvgPool2d((pooled, pooled))
        self.classifier = nn.Sequential(
            nn.Linear(in_ch * pooled * pooled, hidden),
            nn.ReLU(inplace=True),
            nn.Dropout(p=rate),
            nn.Linear(hidden, hidden),
            nn.ReLU(inplace=True),
            nn.Dropout(p=rate),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


# ---------------------------------------------------------------- MobileNetV2 / EfficientNet-B0
#
# At width multiplier 1.0, torchvision's _make_divisible(c, 8) returns every channel count used
# below unchanged (all are already multiples of 8), so it is left out.


def _conv_bn_act(
    in_ch: int,
    out_ch: int,
    kernel: int,
    stride: int = 1,
    groups: int = 1,
    activation: type[nn.Module] | None = nn.ReLU6,
    bn_eps: float = arch.BN_EPS,
) -> nn.Sequential:
    """torchvision's Conv2dNormActivation: bias-free conv, BatchNorm, optional activation."""
    layers: list[nn.Module] = [
        nn.Conv2d(
            in_ch, out_ch, kernel, stride, padding=(kernel - 1) // 2, groups=groups, bias=False
        ),
        nn.BatchNorm2d(out_ch, eps=bn_eps),
    ]
    if activation is not None:
        layers.append(activation(inplace=True))
    return nn.Sequential(*layers)


class InvertedResidual(nn.Module):
    """MobileNetV2 block: 1x1 expand -> 3x3 depthwise -> linear 1x1 project (+ identity)."""

    def __init__(self, in_ch: int, out_ch: int, stride: int, expand_ratio: int):
        super().__init__()
        hidden = in_ch * expand_ratio
        self.use_res_connect = stride == 1 and in_ch == out_ch
        layers: list[nn.Module] = []
        if expand_ratio != 1:
            layers.append(_conv_bn_act(in_ch, hidden, kernel=1))
        layers += [
            _conv_bn_act(hidden, hidden, kernel=3, stride=stride, groups=hidden),
            # The projection is linear on purpose: ReLU6 here would destroy information.
            nn.Conv2d(hidden, out_ch, kernel_size=1, bias=False),
            nn.BatchNorm2d(out_ch),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.conv(x)
        return x + out if self.use_res_connect else out


class MobileNetV2(nn.Module):
    def __init__(self, num_classes: int):
        super().__init__()
        in_ch, head = arch.MOBILENET_V2_STEM, arch.MOBILENET_V2_HEAD
        layers: list[nn.Module] = [_conv_bn_act(3, in_ch, kernel=3, stride=2)]
        for t, c, n, s in arch.MOBILENET_V2_STAGES:
            for i in range(n):
                layers.append(InvertedResidual(in_ch, c, stride=s if i == 0 else 1, expand_ratio=t))
                in_ch = c
        layers.append(_conv_bn_act(in_ch, head, kernel=1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Dropout(p=arch.MOBILENET_V2_DROPOUT), nn.Linear(head, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), (1, 1))
        return self.classifier(torch.flatten(x, 1))


_EFFNET_BN_EPS = arch.EFFICIENTNET_BN_EPS


class SqueezeExcitation(nn.Module):
    """Channel gating; its 1x1 convs act on a pooled 1x1 map, so their FLOPs ignore image size."""

    def __init__(self, channels: int, squeeze_channels: int):
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc1 = nn.Conv2d(channels, squeeze_channels, kernel_size=1)
        self.fc2 = nn.Conv2d(squeeze_channels, channels, kernel_size=1)
        self.activation = nn.SiLU(inplace=True)
        self.scale_activation = nn.Sigmoid()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scale = self.fc2(self.activation(self.fc1(self.avgpool(x))))
        return self.scale_activation(scale) * x


class MBConv(nn.Module):
    """EfficientNet block.

    torchvision applies StochasticDepth to the residual branch during training; it is omitted
    here.  It never changes parameter counts or FLOPs (torchvision still computes the branch and
    then masks it) and is the identity in eval mode, so only training-time numerics differ.
    """

    def __init__(self, in_ch: int, out_ch: int, expand_ratio: int, kernel: int, stride: int):
        super().__init__()
        self.use_res_connect = stride == 1 and in_ch == out_ch
        expanded = in_ch * expand_ratio
        layers: list[nn.Module] = []
        if expanded != in_ch:
            layers.append(
                _conv_bn_act(in_ch, expanded, 1, activation=nn.SiLU, bn_eps=_EFFNET_BN_EPS)
            )
        layers += [
            _conv_bn_act(
                expanded,
                expanded,
                kernel,
                stride,
                groups=expanded,
                activation=nn.SiLU,
                bn_eps=_EFFNET_BN_EPS,
            ),
            SqueezeExcitation(expanded, arch.squeeze_channels(in_ch)),
            _conv_bn_act(expanded, out_ch, 1, activation=None, bn_eps=_EFFNET_BN_EPS),
        ]
        self.block = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.block(x)
        return out + x if self.use_res_connect else out


class EfficientNet(nn.Module):
    def __init__(self, num_classes: int):
        super().__init__()
        stem, head = arch.EFFICIENTNET_B0_STEM, arch.EFFICIENTNET_B0_HEAD
        layers: list[nn.Module] = [
            _conv_bn_act(3, stem, 3, stride=2, activation=nn.SiLU, bn_eps=_EFFNET_BN_EPS)
        ]
        for expand, kernel, stride, in_ch, out_ch, repeats in arch.EFFICIENTNET_B0_STAGES:
            # One Sequential per stage, as torchvision, so state_dict keys match features.N.M.
            layers.append(
                nn.Sequential(
                    *(
                        MBConv(
                            in_ch if i == 0 else out_ch,
                            out_ch,
                            expand,
                            kernel,
                            stride if i == 0 else 1,
                        )
                        for i in range(repeats)
                    )
                )
            )
        last = arch.EFFICIENTNET_B0_STAGES[-1].out_channels
        layers.append(_conv_bn_act(last, head, 1, activation=nn.SiLU, bn_eps=_EFFNET_BN_EPS))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.classifier = nn.Sequential(
            nn.Dropout(p=arch.EFFICIENTNET_B0_DROPOUT, inplace=True), nn.Linear(head, num_classes)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


# ---------------------------------------------------------------------------------------- LSTM


class SingleBiasLSTM(nn.Module):
    """One-layer, batch-first LSTM with one bias vector, as Keras and Flax build it.

    ``nn.LSTM`` carries two (``bias_ih`` and ``bias_hh``, the cuDNN convention), which gives it
    4*hidden more parameters than the same layer in TensorFlow or JAX. This module keeps one
    trainable bias and passes a zero, non-trainable second bias to the same ATen kernel
    (``torch.lstm``) that ``nn.LSTM`` calls, so speed is unchanged and parameter counts agree.
    Gate order is input, forget, cell, output.
    """

    def __init__(self, input_size: int, hidden_size: int) -> None:
        super().__init__()
        self.hidden_size = hidden_size
        bound = hidden_size**-0.5  # nn.LSTM's default initialisation
        self.weight_ih_l0 = nn.Parameter(torch.empty(4 * hidden_size, input_size))
        self.weight_hh_l0 = nn.Parameter(torch.empty(4 * hidden_size, hidden_size))
        self.bias_l0 = nn.Parameter(torch.empty(4 * hidden_size))
        for weight in (self.weight_ih_l0, self.weight_hh_l0, self.bias_l0):
            nn.init.uniform_(weight, -bound, bound)
        self.register_buffer("zero_bias", torch.zeros(4 * hidden_size), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Returns the last time step's hidden state, shape (batch, hidden)."""
        zeros = x.new_zeros(1, x.shape[0], self.hidden_size)
        weights = [self.weight_ih_l0, self.weight_hh_l0, self.bias_l0, self.zero_bias]
        _, h_n, _ = torch.lstm(x, (zeros, zeros), weights, True, 1, 0.0, self.training, False, True)
        return h_n[-1]


class LSTMClassifier(nn.Module):
    """IMDB-style sentiment model: embedding -> one-layer LSTM -> last hidden state -> linear."""

    def __init__(self, num_classes: int = 2):
        super().__init__()
        self.embedding = nn.Embedding(LSTM_VOCAB_SIZE, LSTM_EMBED_DIM)
        self.lstm = SingleBiasLSTM(LSTM_EMBED_DIM, LSTM_HIDDEN_SIZE)
        self.fc = nn.Linear(LSTM_HIDDEN_SIZE, num_classes)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.fc(self.lstm(self.embedding(tokens)))


# ------------------------------------------------------------------------------------ public API

_BUILDERS: dict[str, Callable[[int], nn.Module]] = {
    "lenet": LeNet,
    "resnet18": lambda n: ResNet(arch.RESNETS["resnet18"], n),
    "resnet50": lambda n: ResNet(arch.RESNETS["resnet50"], n),
    "resnet152": lambda n: ResNet(arch.RESNETS["resnet152"], n),
    "vgg16": lambda n: VGG(arch.VGG16_CONFIG, n),
    "mobilenet_v2": MobileNetV2,
    "efficientnet_b0": EfficientNet,
    "lstm": LSTMClassifier,
}


def build_model(name: str, *, num_classes: int | None = None) -> nn.Module:
    """A freshly initialised model (deterministic under ``torch.manual_seed``)."""
    _check_name(name)
    if num_classes is None:
        num_classes = NUM_CLASSES[name]
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")
    return _BUILDERS[name](num_classes)


def example_batch(
    name: str,
    batch_size: int,
    *,
    image_size: int = 224,
    seq_len: int = 200,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Synthetic ``(inputs, labels)`` drawn on ``device`` from ``generator``.

    Labels are int64 in ``[0, default class count)``.  lenet always gets 1x28x28 images; lstm
    gets int64 token ids of shape ``(batch_size, seq_len)`` and ignores ``dtype``.
    """
    _check_name(name)
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    # Draw on the target device directly: no host->device copy inside a benchmark setup.
    if name == "lstm":
        if seq_len < 1:
            raise ValueError(f"seq_len must be >= 1, got {seq_len}")
        inputs = torch.randint(
            0,
            LSTM_VOCAB_SIZE,
            (batch_size, seq_len),
            dtype=torch.int64,
            device=device,
            generator=generator,
        )
    else:
        if name == "lenet":
            shape = (batch_size, 1, LENET_IMAGE_SIZE, LENET_IMAGE_SIZE)
        elif image_size < arch.MIN_IMAGE_SIZE:
            raise ValueError(f"image_size must be >= 32 for {name}, got {image_size}")
        else:
            shape = (batch_size, 3, image_size, image_size)
        inputs = torch.randn(shape, dtype=dtype, device=device, generator=generator)
    labels = torch.randint(
        0,
        NUM_CLASSES[name],
        (batch_size,),
        dtype=torch.int64,
        device=device,
        generator=generator,
    )
    return inputs, labels
