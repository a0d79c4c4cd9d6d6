"""The results table's columns for rows a distributed world measured (collector run
--world-sizes; docs/distributed.md); empty for an agent that ran alone."""

from __future__ import annotations

from fwbench.collector.store.columns_base import Column

WORLD_COLUMNS: tuple[Column, ...] = (
    Column(
        "world_size",
        "Int64",
        "Distributed: ranks of the world that measured the row (one agent process each); "
        "empty for an agent run alone. The row's samples are per step the slowest rank's, and "
        "its throughput counts every rank's batch (batch_size is per rank: weak scaling)",
    ),
    Column(
        "local_devices",
        "Int64",
        "Distributed: devices each rank's process spread its step over, one replica each with "
        "batch_size items of its own (--world-sizes 1xD: TensorFlow's MirroredStrategy over "
        "logical CPUs, a JAX mesh over host devices); 1 for one device per process",
    ),
    Column("strategy", "string", "Distributed: the strategy that ran (ddp, collective, ...)"),
    Column("dist_backend", "string", "Distributed: the communication backend (gloo, nccl, ...)"),
    Column(
        "world_placement",
        "string",
        "Distributed: where the ranks ran: local (processes on the collector's host)",
    ),
    Column(
        "rank_cpus",
        "string",
        "Distributed: the CPUs each rank was pinned to, ranks separated by ';' (e.g. 0;1)",
    ),
    Column(
        "rank_step_median_seconds",
        "string",
        "Distributed: each rank's own median step time, a JSON list by rank",
    ),
    Column(
        "rank_samples_ns",
        "string",
        "Distributed: every rank's own timed samples (nanoseconds), a JSON list of lists by rank",
    ),
    Column(
        "communication_seconds",
        "Float64",
        "Distributed: per step, communication the framework's engine could not hide behind "
        "compute (DDP: backward communication less its overlap with backward compute), the "
        "mean over ranks; empty where the framework cannot tell",
    ),
    Column(
        "communication_share",
        "Float64",
        "Distributed: communication_seconds as a fraction of the median step",
    ),
    Column(
        "collective_bytes",
        "Int64",
        "Distributed, collective workloads: bytes of the message each rank contributes",
    ),
    Column(
        "algbw_bytes_per_second",
        "Float64",
        "Distributed, collective workloads: algorithm bandwidth, collective_bytes over the "
        "median step (nccl-tests' algbw)",
    ),
    Column(
        "busbw_bytes_per_second",
        "Float64",
        "Distributed, allreduce: bus bandwidth, algbw x 2(n-1)/n for n ranks (nccl-tests' "
        "busbw, comparable across world sizes)",
    ),
    Column(
        "first_step_loss",
        "Float64",
        "Distributed training: rank 0's loss after the first step (the cross-framework check)",
    ),
)
