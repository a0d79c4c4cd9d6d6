"""The catalogue models' architecture tables, framework-free and written once: every plugin
builds its models from these numbers, so the frameworks cannot drift apart by a channel count
or a stride. The layouts are torchvision's (docs/equivalence.md); the layers, their order and
their names are each plugin's models.py."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

MODEL_NAMES: tuple[str, ...] = (
    "lenet",
    "resnet18",
    "resnet50",
    "resnet152",
    "vgg16",
    "mobilenet_v2",
    "efficientnet_b0",
    "lstm",
)
IMAGENET_CLASSES = 1000
NUM_CLASSES: Mapping[str, int] = dict.fromkeys(MODEL_NAMES, IMAGENET_CLASSES) | {
    "lenet": 10,
    "lstm": 2,
}
# Five stride-2 stages: below 32 pixels the map vanishes (vgg16 fails outright).
MIN_IMAGE_SIZE = 32

# BatchNorm as PyTorch's defaults: running = (1 - momentum) * running + momentum * batch.
BN_EPS = 1e-5
BN_MOMENTUM = 0.1


def check_model_name(name: str) -> None:
    # A ValueError listing the choices is friendlier than a bare KeyError from a dict lookup.
    if name not in MODEL_NAMES:
        raise ValueError(f"unknown model {name!r}; valid names: {', '.join(MODEL_NAMES)}")


# ------------------------------------------------------------------------------------- LeNet


class Conv(NamedTuple):
    channels: int
    kernel: int
    padding: int


# LeNet-5 for 1x28x28 inputs; padding=2 on the first conv stands in for the original 32x32
# input. Each conv is followed by ReLU and a 2x2 max-pool, leaving a 16x5x5 map.
LENET_IMAGE_SIZE = 28
LENET_CONVS = (Conv(6, 5, 2), Conv(16, 5, 0))
LENET_FEATURES = (16, 5, 5)  # (channels, height, width) flattened into the classifier
LENET_HIDDEN = (120, 84)  # the classifier's hidden widths, each followed by ReLU

# ------------------------------------------------------------------------------------ ResNet


class ResNetSpec(NamedTuple):
    block: str  # "basic" (two 3x3 convs) or "bottleneck" (1x1, 3x3, 1x1; ResNet v1.5)
    depths: tuple[int, int, int, int]  # blocks per stage


RESNET_STEM_CHANNELS = 64  # 7x7 stride-2 conv, BatchNorm, ReLU, 3x3 stride-2 max-pool
RESNET_STAGE_WIDTHS = (64, 128, 256, 512)  # stages 2-4 start with a stride-2 block
BLOCK_EXPANSION: Mapping[str, int] = {"basic": 1, "bottleneck": 4}
RESNETS: Mapping[str, ResNetSpec] = {
    "resnet18": ResNetSpec("basic", (2, 2, 2, 2)),
    "resnet50": ResNetSpec("bottleneck", (3, 4, 6, 3)),
    "resnet152": ResNetSpec("bottleneck", (3, 8, 36, 3)),
}

# --------------------------------------------------------------------------------------- VGG

POOL = 0  # a 2x2 stride-2 max-pool in a VGG configuration ("M" in torchvision)
# torchvision's configuration "D": 3x3 convs with bias and ReLU, no BatchNorm.
VGG16_CONFIG: tuple[int, ...] = (
    *(64, 64, POOL),
    *(128, 128, POOL),
    *(256, 256, 256, POOL),
    *(512, 512, 512, POOL),
    *(512, 512, 512, POOL),
)
VGG_POOLED_SIZE = 7  # adaptive average pool to 7x7 before the classifier, any image size
VGG_HIDDEN = 4096  # two hidden dense layers, each followed by ReLU and dropout
VGG_DROPOUT = 0.5

# ------------------------------------------------------------------------------ MobileNetV2


class InvertedResidualStage(NamedTuple):
    expand: int  # expansion ratio t
    channels: int  # output channels c
    repeats: int  # n
    stride: int  # s, of the stage's first block


# As torchvision at width 1.0, where its _make_divisible(c, 8) changes no channel count.
MOBILENET_V2_STAGES = (
    InvertedResidualStage(1, 16, 1, 1),
    InvertedResidualStage(6, 24, 2, 2),
    InvertedResidualStage(6, 32, 3, 2),
    InvertedResidualStage(6, 64, 4, 2),
    InvertedResidualStage(6, 96, 3, 1),
    InvertedResidualStage(6, 160, 3, 2),
    InvertedResidualStage(6, 320, 1, 1),
)
MOBILENET_V2_STEM = 32  # 3x3 stride-2 conv
MOBILENET_V2_HEAD = 1280  # final 1x1 conv
MOBILENET_V2_DROPOUT = 0.2

# --------------------------------------------------------------------------- EfficientNet-B0


class MBConvStage(NamedTuple):
    expand: int
    kernel: int
    stride: int  # of the stage's first block
    in_channels: int
    out_channels: int
    repeats: int


EFFICIENTNET_B0_STAGES = (
    MBConvStage(1, 3, 1, 32, 16, 1),
    MBConvStage(6, 3, 2, 16, 24, 2),
    MBConvStage(6, 5, 2, 24, 40, 2),
    MBConvStage(6, 3, 2, 40, 80, 3),
    MBConvStage(6, 5, 1, 80, 112, 3),
    MBConvStage(6, 5, 2, 112, 192, 4),
    MBConvStage(6, 3, 1, 192, 320, 1),
)
EFFICIENTNET_B0_STEM = 32  # 3x3 stride-2 conv
EFFICIENTNET_B0_HEAD = 1280  # final 1x1 conv
EFFICIENTNET_BN_EPS = 1e-3  # torchvision builds EfficientNet (v1) with BatchNorm2d(eps=1e-3)
EFFICIENTNET_B0_DROPOUT = 0.2


def squeeze_channels(block_in_channels: int) -> int:
    """Squeeze-excitation width: torchvision sizes it from the block's *input* width, not the
    expanded one."""
    return max(1, block_in_channels // 4)


# -------------------------------------------------------------------------------------- LSTM

# IMDB-style sentiment model: embedding -> one-layer LSTM (one bias vector) -> linear.
LSTM_VOCAB_SIZE = 20_000
LSTM_EMBED_DIM = 128
LSTM_HIDDEN_SIZE = 128

# ------------------------------------------------------------------------------ Transformers
#
# BERT as Hugging Face's BertForMaskedLM and GPT-2 as its GPT2LMHeadModel, at the sizes the
# catalogue's parameters give (workloads.toml: bert, gpt, generate). Canonical weight names are
# those models' state_dict keys, each tensor once: the tied LM decoder (BERT's
# cls.predictions.decoder.weight, GPT-2's lm_head.weight) is the word embedding and is not
# listed. Dense weights are (out, in) as everywhere in fwbench: GPT-2's c_attn, c_proj and c_fc
# are the transposes of Hugging Face's Conv1D weights. Dropout is off in both (rate 0).

TRANSFORMER_NAMES: tuple[str, ...] = ("bert", "gpt")
FFN_EXPANSION = 4  # intermediate = 4 x hidden, as both published models
BERT_POSITIONS = 512
BERT_TOKEN_TYPES = 2
BERT_LAYER_NORM_EPS = 1e-12
GPT_LAYER_NORM_EPS = 1e-5
MLM_FRACTION = 0.15  # of each sequence's positions carry a masked-LM label
IGNORED_LABEL = -100  # a label the loss skips (PyTorch's CrossEntropyLoss ignore_index)


class TransformerConfig(NamedTuple):
    """One transformer's shape. `causal` and the rest follow from the model: BERT attends both
    ways with post-LayerNorm and erf GELU; GPT-2 causally, pre-LayerNorm, tanh GELU."""

    model: str  # "bert" or "gpt"
    layers: int
    hidden: int
    heads: int
    vocab: int
    positions: int  # the position table's rows: BERT's 512, GPT-2's context

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    @property
    def intermediate(self) -> int:
        return FFN_EXPANSION * self.hidden

    @property
    def causal(self) -> bool:
        return self.model == "gpt"

    @property
    def layer_norm_eps(self) -> float:
        return GPT_LAYER_NORM_EPS if self.model == "gpt" else BERT_LAYER_NORM_EPS

    @property
    def gelu_tanh(self) -> bool:
        """GPT-2's GELU is the tanh approximation; BERT's is exact (erf)."""
        return self.model == "gpt"


def transformer_config(model: str, params: Mapping[str, int]) -> TransformerConfig:
    """The shape of `model` ("bert", or "gpt" for the gpt and generate workloads) from a
    cell's resolved parameters; raises ValueError on an unknown model or a bad shape."""
    if model not in TRANSFORMER_NAMES:
        raise ValueError(f"unknown transformer {model!r}; valid: {', '.join(TRANSFORMER_NAMES)}")
    positions = BERT_POSITIONS if model == "bert" else params["context"]
    config = TransformerConfig(
        model, params["layers"], params["hidden"], params["heads"], params["vocab"], positions
    )
    if config.hidden % config.heads:
        raise ValueError(f"heads={config.heads} does not divide hidden={config.hidden}")
    return config


def mlm_positions(seq_len: int) -> tuple[int, ...]:
    """The positions of a sequence that carry a masked-LM label: round(15%) of them, at least
    one, evenly spaced; the same in every framework (which positions does not change speed)."""
    count = max(1, round(MLM_FRACTION * seq_len))
    return tuple(sorted({i * seq_len // count for i in range(count)}))


def transformer_parameters(config: TransformerConfig) -> int:
    """Trainable parameters, the catalogue's formula written out (tests check both)."""
    h, layer = config.hidden, 12 * config.hidden**2 + 13 * config.hidden
    if config.model == "gpt":
        return (config.vocab + config.positions) * h + config.layers * layer + 2 * h
    embeddings = (config.vocab + config.positions + BERT_TOKEN_TYPES) * h + 2 * h
    head = h * h + h + 2 * h + config.vocab  # transform dense, its LayerNorm, decoder bias
    return embeddings + config.layers * layer + head
