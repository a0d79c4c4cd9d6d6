"""Linux's SCHED_IDLE class for the collector's threads that only watch a world's ranks (its
Run's relays, gRPC core's pollers): they run only when a CPU has nothing else to run, so their
wake-ups never take a rank's CPU from the rank (docs/lab/world-overhead.md)."""

from __future__ import annotations

import logging
import os

_log = logging.getLogger(__name__)

IDLE, NORMAL = getattr(os, "SCHED_IDLE", None), getattr(os, "SCHED_OTHER", 0)
# /proc/self/task/TID/comm of gRPC core's threads: its event engine's pool, the pool's
# lifeguard, its global timer. They run no Python, so they never hold the GIL.
GRPC_THREADS = ("event_engine", "lifeguard", "grpc_")


def idle_class() -> bool:
    """Puts the calling thread (only it) in Linux's SCHED_IDLE class: it runs only when a CPU
    has nothing else to run, so its wake-ups never take a rank's CPU from the rank. A wake-up
    of 20 us 100 times a second slows a 3 ms world step by 15% at the normal class and not at
    all at SCHED_IDLE (docs/lab/world-overhead.md). Threads it starts inherit the class. An
    unprivileged thread cannot leave SCHED_IDLE again, so only threads that end with their
    call enter it. False where the class does not exist or is refused."""
    return _set_class(0, IDLE) if IDLE is not None else False


def _set_class(tid: int, policy: int) -> bool:
    try:
        os.sched_setscheduler(tid, policy, os.sched_param(0))
    except OSError as error:  # the thread ended, or the change is refused
        _log.debug("scheduling class %d for thread %d: %s", policy, tid, error)
        return False
    return True


def _grpc_threads() -> list[int]:
    found = []
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as comm:
                if comm.read().startswith(GRPC_THREADS):
                    found.append(int(task))
        except OSError:
            continue  # the thread ended
    return found


def idle_grpc_threads() -> bool:
    """Puts this process's gRPC core threads (which poll several times a second whatever the
    calls) at SCHED_IDLE while a world measures; whether any is there now."""
    if IDLE is None or not os.path.isdir("/proc/self/task"):
        return False
    done = False
    for tid in _grpc_threads():
        try:
            done = os.sched_getscheduler(tid) == IDLE or _set_class(tid, IDLE) or done
        except OSError:
            continue  # the thread ended
    return done


def restore_grpc_threads() -> None:
    """Back to the normal class where this process may (root, or CAP_SYS_NICE), threads the
    pool started meanwhile too: an unprivileged one cannot leave SCHED_IDLE, and its gRPC
    threads stay there, which only makes the collector's own calls wait for a free CPU."""
    for tid in _grpc_threads():
        try:
            if os.sched_getscheduler(tid) == IDLE and not _set_class(tid, NORMAL):
                return
        except OSError:
            continue  # the thread ended
