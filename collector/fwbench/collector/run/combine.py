"""One result from a world's ranks (launchers/world_call.py), and the row columns only a world has.

How ranks combine: a synchronous data-parallel step is as slow as its slowest rank, and every
rank runs the same steps (agent.proto, RunRequest.strategy), so the world's samples are those
of the slowest rank: the one whose timed loop took longest in all. Its steps include its waits
for the others, and their sum is the world's wall time for those steps. (The longest of the
ranks' step i, step by step, would overstate it: ranks skew, and one rank's long step i is
another's long step i+1, so the per-step maxima add up to more than the time that passed.)
Build and first iteration are the longest of the ranks'; the timed window spans the earliest
start to the latest end. A step covers batch_size items on every
rank (weak scaling: the batch is per rank), so world_size x batch_size items in all; an
allreduce step moves one message, and a pipeline step trains one batch through all stages.
Every rank's own samples are kept in the row (rank_samples_ns) and nothing is averaged away
(docs/distributed.md)."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from typing import Any

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.launchers.world_call import rank_run_id
from fwbench.collector.run.validate import ProtocolViolation

COLLECTIVE = "collective"
# Strategies whose batch is the world's, not each rank's: a collective moves one message, a
# pipeline passes one batch through its stages, tensor parallelism shares one batch. Every
# other strategy is data parallel.
WHOLE_BATCH = frozenset({COLLECTIVE, "pipeline", "tensor"})
# The engine time DDP cannot hide behind backward compute (torch: avg_backward_comm_time less
# the overlap), the figure communication_seconds reports.
EXPOSED_COMMUNICATION = "communication_not_overlapped"


def _check_ranks(request: agent_pb2.RunRequest, results: Sequence[agent_pb2.RunResult]) -> None:
    counts = {len(r.sample_nanoseconds) for r in results}
    if len(counts) > 1:
        raise ProtocolViolation(
            "sample_nanoseconds", f"ranks ran different step counts {sorted(counts)}"
        )
    for index, result in enumerate(results):
        if result.run_id != rank_run_id(request.run_id, index):
            raise ProtocolViolation("run_id", f"rank {index} answered {result.run_id!r}")
        if not result.HasField("rank"):
            raise ProtocolViolation("rank", f"rank {index} sent no RankResult (protocol 1.3)")
        if result.rank.rank != index or result.rank.world_size != len(results):
            raise ProtocolViolation(
                "rank",
                f"rank {index} says it is rank {result.rank.rank} of {result.rank.world_size}",
            )


def slowest(results: Sequence[agent_pb2.RunResult]) -> agent_pb2.RunResult:
    """The rank whose timed loop took longest (the first of equals)."""
    return max(results, key=lambda r: sum(r.sample_nanoseconds))


def combine(
    request: agent_pb2.RunRequest, results: Sequence[agent_pb2.RunResult]
) -> agent_pb2.RunResult:
    """The world's RunResult; raises ProtocolViolation when the ranks disagree."""
    _check_ranks(request, results)
    first = results[0]
    samples = slowest(results).sample_nanoseconds
    items = 0
    if first.rank.strategy not in WHOLE_BATCH:
        items = (first.items_per_sample or request.batch_size) * len(results)
    return agent_pb2.RunResult(
        run_id=request.run_id,
        sample_nanoseconds=samples,
        first_iteration_nanoseconds=max(r.first_iteration_nanoseconds for r in results),
        build_nanoseconds=max(r.build_nanoseconds for r in results),
        warmup_iterations=first.warmup_iterations,
        settings=first.settings,
        measure_started_unix_nanoseconds=min(r.measure_started_unix_nanoseconds for r in results),
        measure_ended_unix_nanoseconds=max(r.measure_ended_unix_nanoseconds for r in results),
        items_per_sample=items,
        rank=first.rank,
    )


def world_columns(
    results: Sequence[agent_pb2.RunResult],
    cpus: Sequence[Sequence[int]],
    placement: str,
    local_devices: int = 1,
) -> dict[str, Any]:
    """The row's world columns (store/world_columns.py) from every rank's own result, and the
    devices each rank's process spread its step over (Describe.world.local_devices)."""
    first = results[0].rank
    size = len(results)
    medians = [statistics.median(r.sample_nanoseconds) / 1e9 for r in results]
    step = statistics.median(slowest(results).sample_nanoseconds)
    columns: dict[str, Any] = {
        "world_size": size,
        "local_devices": local_devices,
        "strategy": first.strategy,
        "dist_backend": first.backend,
        "world_placement": placement,
        "rank_cpus": ";".join(",".join(map(str, c)) for c in cpus),
        "rank_step_median_seconds": json.dumps([round(m, 9) for m in medians]),
        "rank_samples_ns": json.dumps([list(r.sample_nanoseconds) for r in results]),
        # Rank 0's; a pipeline's loss is known to its last stage only.
        "first_step_loss": next(
            (r.rank.first_step_loss for r in results if not math.isnan(r.rank.first_step_loss)),
            None,
        ),
    }
    exposed = [r.rank.engine_nanoseconds.get(EXPOSED_COMMUNICATION, -1) for r in results]
    if min(exposed) >= 0:
        seconds = statistics.mean(exposed) / 1e9
        columns["communication_seconds"] = seconds
        columns["communication_share"] = seconds / (step / 1e9) if step else None
    if first.collective_bytes:
        algbw = first.collective_bytes / (step / 1e9)
        columns["collective_bytes"] = first.collective_bytes
        columns["algbw_bytes_per_second"] = algbw
        replicas = size * local_devices  # a collective spans every device of every rank
        columns["busbw_bytes_per_second"] = algbw * 2 * (replicas - 1) / replicas
    return columns
