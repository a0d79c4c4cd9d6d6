"""The long run's cell grown within what the agent declares, for the long-step check
(longstep.py): one number, the scale (1 and up), says a size. Each shape parameter is its long
run value (longrun.py's long_params) times the scale, rounded to its multiple_of and kept within
its declared min and max; past the scale at which every one stands at its maximum, the batch
size grows by what is left, up to max_batch_size. Sizes stay within a memory budget too: the
step's tensors by the catalogue's byte model (inputs and outputs; three times over to train) at
most MEMORY_SHARE of the host's memory and of each GPU's, so that a check never asks an agent
for more than a small part of its machine. How long a size's step takes is not said here: the
check measures it."""

from __future__ import annotations

import math

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.conformance.cells import cell_request, default_cell
from fwbench.collector.conformance.longrun import long_params
from fwbench.collector.conformance.suite import Target
from fwbench.spec.catalogue import CatalogueError
from fwbench.spec.enums import DTYPE_NAMES, PHASE_NAMES

MEMORY_SHARE = 1 / 8
GIB = 2**30
_BISECTIONS = 60


def memory_budget(describe: agent_pb2.DescribeResponse) -> float:
    """Bytes a grown step's tensors may take: MEMORY_SHARE of the smallest memory among the
    host's and every GPU's that Describe states (1 GiB for a host that states none)."""
    memories = [describe.host.memory_total_bytes or GIB]
    memories += [
        d.memory_total_bytes
        for d in describe.devices
        if d.kind == agent_pb2.DEVICE_KIND_GPU and d.memory_total_bytes
    ]
    return MEMORY_SHARE * min(memories)


def _within(limit: agent_pb2.ParamLimit, value: float) -> int:
    step = max(limit.multiple_of, 1)
    least = -(-limit.min_value // step) * step
    most = limit.max_value // step * step
    return min(max(round(value / step) * step, least), most)


class Growth:
    """Sizes of the long run's cell by scale; `top` is the largest scale the declared limits
    and the memory budget allow, `bound` says which of them set it."""

    def __init__(self, target: Target, support: agent_pb2.WorkloadSupport) -> None:
        self.target, self.support = target, support
        self.cell = default_cell(support)
        self.workload = target.catalogue.workloads[support.name]
        self.base = long_params(support)
        self.batch = cell_request(target, self.cell).batch_size
        self.budget = memory_budget(target.described())
        # The scale at which every parameter stands at its declared maximum.
        self.full = max(
            [limit.max_value / max(self.base[limit.name], 1) for limit in support.params],
            default=1.0,
        )
        top = self.full * max(support.max_batch_size / self.batch, 1.0)
        if self.fits(top):
            self.top, self.bound = top, "the declared maxima"
        else:
            self.top = self._largest_fitting(top)
            self.bound = (
                f"a memory budget of {self.budget / GIB:.1f} GiB (an eighth of the host's "
                "memory, or a GPU's)"
            )

    def size(self, scale: float) -> tuple[dict[str, int], int]:
        """(shape parameters, batch size) at `scale`."""
        params = {
            limit.name: _within(limit, self.base[limit.name] * scale)
            for limit in self.support.params
        }
        grown = int(self.batch * scale / self.full)
        return params, min(self.support.max_batch_size, max(self.batch, grown))

    def request(self, scale: float) -> agent_pb2.RunRequest:
        """The cell at `scale`, no warm-up, one timed step: two steps of that size in all."""
        params, batch = self.size(scale)
        return cell_request(
            self.target,
            self.cell,
            params=params,
            batch_size=batch,
            warmup_iterations=0,
            min_iterations=1,
            max_iterations=1,
        )

    def label(self, scale: float) -> str:
        params, batch = self.size(scale)
        shape = " ".join(f"{name}={value}" for name, value in params.items())
        return f"{self.cell.label()} {shape} batch {batch}".replace("  ", " ")

    def flops(self, scale: float) -> float:
        """The catalogue's forward FLOPs of one step at `scale` (only their ratios matter)."""
        params, batch = self.size(scale)
        return self.workload.forward_flops_per_item(params) * batch

    def fits(self, scale: float) -> bool:
        params, batch = self.size(scale)
        phase = PHASE_NAMES.get(self.cell.phase, "infer")  # type: ignore[call-overload]
        dtype = DTYPE_NAMES.get(self.cell.dtype, "float32")  # type: ignore[call-overload]
        try:
            self.workload.resolve_params(params)
            moved = self.target.catalogue.bytes_per_step(
                self.support.name, phase, params, batch, dtype
            )
        except CatalogueError:  # a rule between parameters that this size breaks
            return False
        return moved is None or moved <= self.budget

    def _largest_fitting(self, high: float) -> float:
        low = 1.0
        for _ in range(_BISECTIONS):
            middle = math.sqrt(low * high)
            low, high = (middle, high) if self.fits(middle) else (low, middle)
        return low

    def scale_for(self, flops: float) -> float:
        """The smallest scale up to `top` whose step has `flops` FLOPs; `top` when none has."""
        if self.flops(self.top) <= flops:
            return self.top
        low, high = 1.0, self.top
        for _ in range(_BISECTIONS):
            middle = math.sqrt(low * high)
            low, high = (middle, high) if self.flops(middle) < flops else (low, middle)
        return high

    def exhausted(self, scale: float, ran: float) -> None:
        """A trial at `scale` ran out of memory, one at `ran` did not: the growth stops halfway
        between them (on a log scale), so that a few trials close in on the largest that runs."""
        self.top = min(self.top, math.sqrt(scale * ran))
        self.bound = f"what ran without RESOURCE_EXHAUSTED ({self.label(scale)} did not)"
