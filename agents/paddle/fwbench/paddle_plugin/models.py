"""PaddlePaddle definitions of the catalogue's models, layer for layer those of the PyTorch
plugin (agents/torch/fwbench/torch_plugin/models.py, torchvision's layouts), in NCHW.

The numbers (channels, depths, strides, stage tables, epsilons, dropout rates) come from
``fwbench.runtime.architectures``. Sublayers carry the PyTorch modules' attribute names and
are registered in the same order, so a model's parameters, walked in order, are the canonical
weights in ``state_dict`` order (weights.py maps them). Paddle's own conventions, translated:

- BatchNorm ``momentum`` weighs the *old* running value: PyTorch's 0.1 is Paddle's 0.9.
  Paddle's kernel updates the running variance with the batch's biased variance (PyTorch:
  unbiased, n/(n-1) larger); normalisation itself is the same, so a training step's
  arithmetic is too, and only the running variance an eval pass after training uses differs;
- dropout is ``upscale_in_train`` (PyTorch's inverted dropout), at the same rates and places;
- the LSTM is ``paddle.nn.LSTM``, whose fused ``rnn`` kernel (gate order input, forget, cell,
  output, as PyTorch's) takes two bias vectors: the second, ``bias_hh_l0``, is held at zero,
  as the PyTorch model passes a zero second bias to ``torch.lstm``: it is left out of the
  optimizer and of the parameter count (``frozen_parameters``). Paddle's kernel still writes
  its gradient (with ``stop_gradient`` set, its backward fails on the missing gradient
  buffer), which the training step discards. Without the bias (``bias_hh_attr=False``) Paddle
  would fall back from the fused kernel to a Python loop of cell steps;
- EfficientNet's stochastic depth is left out, as in every plugin (docs/equivalence.md).

Parameters keep Paddle's default initialisers (seeded by ``paddle.seed``)."""

# Paddle types Layer.__call__ as returning Any, so every forward that returns a sublayer's
# output would need a cast to say it is a Tensor.
# mypy: disable-error-code="no-any-return"

from __future__ import annotations

import math
from collections.abc import Callable

import paddle
from paddle import nn

from fwbench.runtime import architectures as arch
from fwbench.runtime.architectures import (
    LSTM_EMBED_DIM,
    LSTM_HIDDEN_SIZE,
    LSTM_VOCAB_SIZE,
    MODEL_NAMES,
    NUM_CLASSES,
    check_model_name,
)

__all__ = ["MODEL_NAMES", "build_model", "frozen_parameters", "trainable_parameters"]

# Paddle's BatchNorm momentum is the weight of the running value (PyTorch's is the batch's).
BN_MOMENTUM = 1.0 - arch.BN_MOMENTUM


class BatchNorm2D(nn.BatchNorm2D):
    """Paddle's BatchNorm2D, whose forward warns on every training call that it "now always
    tracks global mean and variance" (as intended here); the same functional call, silent."""

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return nn.functional.batch_norm(
            x,
            self._mean,
            self._variance,
            weight=self.weight,
            bias=self.bias,
            training=self.training,
            momentum=self._momentum,
            epsilon=self._epsilon,
            data_format=self._data_format,
            use_global_stats=self._use_global_stats,
        )


def _bn(channels: int, eps: float = arch.BN_EPS) -> BatchNorm2D:
    return BatchNorm2D(channels, momentum=BN_MOMENTUM, epsilon=eps)


def _conv(
    in_ch: int, out_ch: int, kernel: int, stride: int = 1, padding: int = 0, groups: int = 1
) -> nn.Conv2D:
    """A bias-free convolution (every one followed by BatchNorm)."""
    return nn.Conv2D(in_ch, out_ch, kernel, stride, padding, groups=groups, bias_attr=False)


# ------------------------------------------------------------------------------------- LeNet


class LeNet(nn.Layer):
    def __init__(self, num_classes: int) -> None:
        super().__init__()
        features: list[nn.Layer] = []
        in_ch = 1
        for conv in arch.LENET_CONVS:
            features.append(nn.Conv2D(in_ch, conv.channels, conv.kernel, padding=conv.padding))
            features += [nn.ReLU(), nn.MaxPool2D(2, 2)]
            in_ch = conv.channels
        self.features = nn.Sequential(*features)
        classifier: list[nn.Layer] = []
        width = math.prod(arch.LENET_FEATURES)
        for hidden in arch.LENET_HIDDEN:
            classifier += [nn.Linear(width, hidden), nn.ReLU()]
            width = hidden
        self.classifier = nn.Sequential(*classifier, nn.Linear(width, num_classes))

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.classifier(paddle.flatten(self.features(x), 1))


# ------------------------------------------------------------------------------------ ResNet


class BasicBlock(nn.Layer):
    expansion = 1

    def __init__(
        self, in_ch: int, planes: int, stride: int = 1, downsample: nn.Layer | None = None
    ) -> None:
        super().__init__()
        self.conv1 = _conv(in_ch, planes, 3, stride, 1)
        self.bn1 = _bn(planes)
        self.relu = nn.ReLU()
        self.conv2 = _conv(planes, planes, 3, 1, 1)
        self.bn2 = _bn(planes)
        self.downsample = downsample

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class Bottleneck(nn.Layer):
    """ResNet v1.5: the stride sits on the 3x3 convolution."""

    expansion = 4

    def __init__(
        self, in_ch: int, planes: int, stride: int = 1, downsample: nn.Layer | None = None
    ) -> None:
        super().__init__()
        self.conv1 = _conv(in_ch, planes, 1)
        self.bn1 = _bn(planes)
        self.conv2 = _conv(planes, planes, 3, stride, 1)
        self.bn2 = _bn(planes)
        self.conv3 = _conv(planes, planes * self.expansion, 1)
        self.bn3 = _bn(planes * self.expansion)
        self.relu = nn.ReLU()
        self.downsample = downsample

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


_BLOCKS: dict[str, type[BasicBlock | Bottleneck]] = {
    "basic": BasicBlock,
    "bottleneck": Bottleneck,
}


class ResNet(nn.Layer):
    def __init__(self, spec: arch.ResNetSpec, num_classes: int) -> None:
        super().__init__()
        block = _BLOCKS[spec.block]
        stem = arch.RESNET_STEM_CHANNELS
        self._in_ch = stem
        self.conv1 = _conv(3, stem, 7, 2, 3)
        self.bn1 = _bn(stem)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2D(kernel_size=3, stride=2, padding=1)
        widths, depths = arch.RESNET_STAGE_WIDTHS, spec.depths
        self.layer1 = self._make_layer(block, widths[0], depths[0], 1)
        self.layer2 = self._make_layer(block, widths[1], depths[1], 2)
        self.layer3 = self._make_layer(block, widths[2], depths[2], 2)
        self.layer4 = self._make_layer(block, widths[3], depths[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2D(1)
        self.fc = nn.Linear(widths[3] * block.expansion, num_classes)

    def _make_layer(
        self, block: type[BasicBlock | Bottleneck], planes: int, blocks: int, stride: int
    ) -> nn.Sequential:
        out_ch = planes * block.expansion
        downsample = None
        if stride != 1 or self._in_ch != out_ch:
            downsample = nn.Sequential(_conv(self._in_ch, out_ch, 1, stride), _bn(out_ch))
        layers = [block(self._in_ch, planes, stride, downsample)]
        self._in_ch = out_ch
        layers += [block(out_ch, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(paddle.flatten(self.avgpool(x), 1))


# --------------------------------------------------------------------------------------- VGG


class VGG(nn.Layer):
    def __init__(self, cfg: tuple[int, ...], num_classes: int) -> None:
        super().__init__()
        layers: list[nn.Layer] = []
        in_ch = 3
        for width in cfg:
            if width == arch.POOL:
                layers.append(nn.MaxPool2D(kernel_size=2, stride=2))
            else:
                layers += [nn.Conv2D(in_ch, width, 3, padding=1), nn.ReLU()]
                in_ch = width
        self.features = nn.Sequential(*layers)
        pooled, hidden, rate = arch.VGG_POOLED_SIZE, arch.VGG_HIDDEN, arch.VGG_DROPOUT
        self.avgpool = nn.AdaptiveAvgPool2D((pooled, pooled))
        self.classifier = nn.Sequential(
            nn.Linear(in_ch * pooled * pooled, hidden),
            nn.ReLU(),
            nn.Dropout(rate),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Dropout(rate),
            nn.Linear(hidden, num_classes),
        )

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.classifier(paddle.flatten(self.avgpool(self.features(x)), 1))


# ---------------------------------------------------------------- MobileNetV2 / EfficientNet-B0


def _conv_bn_act(
    in_ch: int,
    out_ch: int,
    kernel: int,
    stride: int = 1,
    groups: int = 1,
    activation: type[nn.Layer] | None = nn.ReLU6,
    bn_eps: float = arch.BN_EPS,
) -> nn.Sequential:
    """torchvision's Conv2dNormActivation: bias-free conv, BatchNorm, optional activation."""
    layers: list[nn.Layer] = [
        _conv(in_ch, out_ch, kernel, stride, (kernel - 1) // 2, groups),
        _bn(out_ch, bn_eps),
    ]
    if activation is not None:
        layers.append(activation())
    return nn.Sequential(*layers)


class InvertedResidual(nn.Layer):
    def __init__(self, in_ch: int, out_ch: int, stride: int, expand_ratio: int) -> None:
        super().__init__()
        hidden = in_ch * expand_ratio
        self.use_res_connect = stride == 1 and in_ch == out_ch
        layers: list[nn.Layer] = []
        if expand_ratio != 1:
            layers.append(_conv_bn_act(in_ch, hidden, 1))
        layers += [
            _conv_bn_act(hidden, hidden, 3, stride, groups=hidden),
            _conv(hidden, out_ch, 1),
            _bn(out_ch),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        out = self.conv(x)
        return x + out if self.use_res_connect else out


class MobileNetV2(nn.Layer):
    def __init__(self, num_classes: int) -> None:
        super().__init__()
        in_ch, head = arch.MOBILENET_V2_STEM, arch.MOBILENET_V2_HEAD
        layers: list[nn.Layer] = [_conv_bn_act(3, in_ch, 3, 2)]
        for t, c, n, s in arch.MOBILENET_V2_STAGES:
            for i in range(n):
                layers.append(InvertedResidual(in_ch, c, s if i == 0 else 1, t))
                in_ch = c
        layers.append(_conv_bn_act(in_ch, head, 1))
        self.features = nn.Sequential(*layers)
        self.classifier = nn.Sequential(
            nn.Dropout(arch.MOBILENET_V2_DROPOUT), nn.Linear(head, num_classes)
        )

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        x = nn.functional.adaptive_avg_pool2d(self.features(x), 1)
        return self.classifier(paddle.flatten(x, 1))


_EFF_EPS = arch.EFFICIENTNET_BN_EPS


class SqueezeExcitation(nn.Layer):
    def __init__(self, channels: int, squeeze: int) -> None:
        super().__init__()
        self.avgpool = nn.AdaptiveAvgPool2D(1)
        self.fc1 = nn.Conv2D(channels, squeeze, 1)
        self.fc2 = nn.Conv2D(squeeze, channels, 1)
        self.activation = nn.Silu()
        self.scale_activation = nn.Sigmoid()

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        scale = self.fc2(self.activation(self.fc1(self.avgpool(x))))
        return self.scale_activation(scale) * x


class MBConv(nn.Layer):
    def __init__(self, in_ch: int, out_ch: int, expand_ratio: int, kernel: int, stride: int):
        super().__init__()
        self.use_res_connect = stride == 1 and in_ch == out_ch
        expanded = in_ch * expand_ratio
        layers: list[nn.Layer] = []
        if expanded != in_ch:
            layers.append(_conv_bn_act(in_ch, expanded, 1, activation=nn.Silu, bn_eps=_EFF_EPS))
        layers += [
            _conv_bn_act(
                expanded, expanded, kernel, stride, expanded, activation=nn.Silu, bn_eps=_EFF_EPS
            ),
            SqueezeExcitation(expanded, arch.squeeze_channels(in_ch)),
            _conv_bn_act(expanded, out_ch, 1, activation=None, bn_eps=_EFF_EPS),
        ]
        self.block = nn.Sequential(*layers)

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        out = self.block(x)
        return out + x if self.use_res_connect else out


class EfficientNet(nn.Layer):
    def __init__(self, num_classes: int) -> None:
        super().__init__()
        stem, head = arch.EFFICIENTNET_B0_STEM, arch.EFFICIENTNET_B0_HEAD
        layers: list[nn.Layer] = [_conv_bn_act(3, stem, 3, 2, activation=nn.Silu, bn_eps=_EFF_EPS)]
        for expand, kernel, stride, in_ch, out_ch, repeats in arch.EFFICIENTNET_B0_STAGES:
            blocks = (
                MBConv(in_ch if i == 0 else out_ch, out_ch, expand, kernel, stride if i == 0 else 1)
                for i in range(repeats)
            )
            layers.append(nn.Sequential(*blocks))
        last = arch.EFFICIENTNET_B0_STAGES[-1].out_channels
        layers.append(_conv_bn_act(last, head, 1, activation=nn.Silu, bn_eps=_EFF_EPS))
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2D(1)
        self.classifier = nn.Sequential(
            nn.Dropout(arch.EFFICIENTNET_B0_DROPOUT), nn.Linear(head, num_classes)
        )

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.classifier(paddle.flatten(self.avgpool(self.features(x)), 1))


# -------------------------------------------------------------------------------------- LSTM


class LSTMClassifier(nn.Layer):
    """Embedding -> one-layer LSTM (one trainable bias: see the module docstring) -> the last
    step's hidden state -> linear."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.embedding = nn.Embedding(LSTM_VOCAB_SIZE, LSTM_EMBED_DIM)
        self.lstm = nn.LSTM(LSTM_EMBED_DIM, LSTM_HIDDEN_SIZE)
        zero_bias = self.lstm.bias_hh_l0
        with paddle.no_grad():
            zero_bias.set_value(paddle.zeros_like(zero_bias))
        self.fc = nn.Linear(LSTM_HIDDEN_SIZE, num_classes)

    def forward(self, tokens: paddle.Tensor) -> paddle.Tensor:
        _, (h_n, _) = self.lstm(self.embedding(tokens))
        return self.fc(h_n[-1])


# ------------------------------------------------------------------------------ public API

_BUILDERS: dict[str, Callable[[int], nn.Layer]] = {
    "lenet": LeNet,
    "resnet18": lambda n: ResNet(arch.RESNETS["resnet18"], n),
    "resnet50": lambda n: ResNet(arch.RESNETS["resnet50"], n),
    "resnet152": lambda n: ResNet(arch.RESNETS["resnet152"], n),
    "vgg16": lambda n: VGG(arch.VGG16_CONFIG, n),
    "mobilenet_v2": MobileNetV2,
    "efficientnet_b0": EfficientNet,
    "lstm": LSTMClassifier,
}


def build_model(name: str, seed: int | None = None, dtype: str = "float32") -> nn.Layer:
    """A freshly initialised model (Paddle's initialisers, seeded when `seed` is given), in
    training mode, its floating-point parameters in `dtype`."""
    check_model_name(name)
    if seed is not None:
        paddle.seed(seed)
    # Created in `dtype` (Layer.to(dtype=...) would also cast the LSTM's empty uint8 dropout
    # state, which fails).
    previous = paddle.get_default_dtype()
    paddle.set_default_dtype(dtype)  # type: ignore[arg-type]  # its stub lists literals
    try:
        model = _BUILDERS[name](NUM_CLASSES[name])
    finally:
        paddle.set_default_dtype(previous)
    model.train()
    return model


def frozen_parameters(model: nn.Layer) -> list[paddle.Tensor]:
    """Parameters held at zero, never updated: each LSTM's second bias."""
    return [layer.bias_hh_l0 for layer in model.sublayers() if isinstance(layer, nn.LSTM)]


def trainable_parameters(model: nn.Layer) -> list[paddle.Tensor]:
    """What the optimizer updates: every parameter but BatchNorm's running statistics (Paddle
    keeps them as parameters with stop_gradient) and the frozen ones."""
    frozen = {id(p) for p in frozen_parameters(model)}
    return [p for p in model.parameters() if not p.stop_gradient and id(p) not in frozen]


def trainable_count(model: nn.Layer) -> int:
    return sum(math.prod(p.shape) for p in trainable_parameters(model))
