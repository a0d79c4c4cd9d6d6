"""Where a catalogue ResNet is cut into pipeline stages, one per rank (pipeline.py builds them):
importable on every torch, pipelining or not, so that distributed.py offers the pipeline
strategy for these models only, and only where torch.distributed.pipelining exists."""

from __future__ import annotations

from fwbench.runtime.plugin import UnsupportedWorkload

# Where a ResNet's pipeline stages may begin (pipeline.py): a world of N ranks cuts before N-1
# of them. torch.distributed.pipelining arrived in torch 2.4: older builds (Debian 12's 1.13)
# offer no pipeline, and pipeline.py is imported only where it exists.
STAGES = {
    "resnet18": ("layer2", "layer3", "layer4"),
    "resnet50": ("layer2", "layer3", "layer4"),
    "resnet152": ("layer2", "layer3", "layer4"),
}


def split_points(name: str, ranks: int) -> list[str]:
    """Where the stages of `ranks` begin: evenly spread over STAGES[name]."""
    options = STAGES[name]
    if ranks - 1 > len(options):
        raise UnsupportedWorkload(
            f"pipeline: {name} splits into at most {len(options) + 1} stages, not {ranks}"
        )
    if ranks == 1:
        return []
    step = len(options) / (ranks - 1)
    return [options[min(int(i * step + step / 2), len(options) - 1)] for i in range(ranks - 1)]
