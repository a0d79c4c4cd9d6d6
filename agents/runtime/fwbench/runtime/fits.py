"""Whether a cell can fit in the host's memory, asked before it is built on a CPU.

Linux overcommits memory: a framework asking for more than the host has is given it, and the
pages are found missing only when written, by which time the kernel's OOM killer ends the
agent (seen: a GPT with hidden 16384 killed the torch agent while initialising its weights).
So the runtime refuses a cell whose catalogue says it cannot fit, as the framework's own
out-of-memory (RESOURCE_EXHAUSTED), before anything is allocated, and the sweep goes on.

The figure is a lower bound, never an estimate of the peak: the weights (`parameters` of the
workload, or of the model a generation runs), three times over to train (gradients and the
optimizer's momentum), the batch's inputs and outputs (`elements_forward`, twice to train),
and a generation's KV cache; activations are left out. Against: the memory the host has
available (psutil), or the cgroup's limit less its usage where that is lower (a container)."""

from __future__ import annotations

from pathlib import Path

import psutil

from fwbench.runtime.plugin import OutOfMemory, WorkloadSpec
from fwbench.spec.catalogue import DTYPE_BYTES, Catalogue, evaluate_expression

CGROUP = Path("/sys/fs/cgroup")
GIB = 2**30


def least_bytes(spec: WorkloadSpec, catalogue: Catalogue) -> float:
    """The memory the cell needs at the least (the module's docstring), in bytes; 0 where
    the catalogue gives no byte model."""
    workload = spec.workload
    size = DTYPE_BYTES.get(spec.dtype, 4)
    train = spec.phase == "train"
    model = catalogue.get(workload.model) if workload.kind == "generation" else workload
    if not model.parameters or not workload.elements_forward:
        return 0.0
    weights = evaluate_expression(model.parameters, spec.params) * (3 if train else 1)
    moved = evaluate_expression(workload.elements_forward, spec.params) * spec.batch_size
    total = (weights + moved * (2 if train else 1)) * size
    if workload.generation is not None:
        total += workload.kv_cache_bytes(spec.params, spec.batch_size, spec.dtype) or 0.0
    return total


def available_bytes(cgroup: Path = CGROUP) -> float:
    """Memory a new allocation can have: the host's available, or less in a cgroup (v2)."""
    available = float(psutil.virtual_memory().available)
    try:
        limit = (cgroup / "memory.max").read_text().strip()
        used = float((cgroup / "memory.current").read_text())
    except (OSError, ValueError):
        return available
    return available if limit == "max" else min(available, float(limit) - used)


def require_fit(spec: WorkloadSpec, catalogue: Catalogue, cgroup: Path = CGROUP) -> None:
    """Raises OutOfMemory when the cell cannot fit in the host's memory at the least."""
    needed = least_bytes(spec, catalogue)
    if not needed:
        return
    have = available_bytes(cgroup)
    if needed <= have:
        return
    parts = ["weights", "inputs and outputs"]
    if spec.phase == "train":
        parts[0] = "weights, gradients and momentum"
    if spec.workload.generation is not None:
        parts.append("KV cache")
    raise OutOfMemory(
        f"{spec.workload.name} at these parameters and batch {spec.batch_size} needs at least "
        f"{needed / GIB:.1f} GiB ({', '.join(parts)}; activations not counted), and this host "
        f"has {have / GIB:.1f} GiB available: refused before allocating"
    )
