"""Limiting XLA's CPU thread pool, which is sized once, when jax creates its backend.

XLA has no run-time switch for its intra-op thread count: the CPU client sizes its Eigen pool
from the CPUs the process may be scheduled on (``sched_getaffinity``) at backend creation, and
``--xla_cpu_multi_thread_eigen=false`` only knows "one" or "all". Restricting the process's CPU
affinity to N cores before the backend exists therefore limits XLA to N threads for any N, and
also keeps those threads on N cores (measured: with N=1 a 2048^3 gemm uses exactly one busy
thread and CPU time equals wall time).

This module must not import jax: it runs before jax decides anything. The thread count is
the runtime's (PluginContext.threads, from FWBENCH_THREADS).
"""

from __future__ import annotations

import os

from fwbench.runtime.plugin import THREADS_VARIABLE


def _set_process_affinity(cpus: set[int]) -> None:
    # sched_setaffinity(0, ...) changes only the calling thread on Linux; threads that already
    # exist (an embedding server's workers, say) would keep every core and could later create
    # XLA's pool. Every thread of the process gets the new mask instead.
    for task in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(task), cpus)
        except ProcessLookupError:  # the thread ended meanwhile
            continue


def limit_cpu_threads(threads: int) -> int:
    """Restricts this process to `threads` of its CPUs (0 keeps them all); returns how many
    CPUs XLA will size its pool from. Call before jax initialises a backend."""
    available = sorted(os.sched_getaffinity(0))
    if threads == 0:
        return len(available)
    if threads > len(available):
        raise RuntimeError(
            f"{THREADS_VARIABLE}={threads} but this process may run on {len(available)} CPUs only"
        )
    # The first CPUs of the mask: on Linux, logical CPUs 0..P-1 usually sit on distinct
    # physical cores (hyper-thread siblings are numbered after them).
    _set_process_affinity(set(available[:threads]))
    return threads
