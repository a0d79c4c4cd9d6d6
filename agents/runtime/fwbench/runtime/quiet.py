"""gRPC's own threads in a world's rank run at Linux's SCHED_IDLE class: they run only when the
rank's CPU has nothing else to do, so their wake-ups (gRPC's event engine polls several times
a second even when no call is active) never take the CPU from the rank's stepping thread or
its collective's threads. A wake-up of 20 us 100 times a second slows a 3 ms world step by 15%
at the normal class and not at all at SCHED_IDLE (docs/lab/world-overhead.md).

Only gRPC's C threads, by the names gRPC gives them: they never hold Python's GIL, so a
stepping thread never waits for one of them (an idle-class Python thread holding the GIL
would make it wait). An unprivileged thread cannot leave SCHED_IDLE, so they stay there for
the life of the rank's process, which serves its world's cells only; the thread pool's new
threads inherit the class from the thread that starts them."""

from __future__ import annotations

import logging
import os
from pathlib import Path

_log = logging.getLogger(__name__)

# /proc/PID/task/TID/comm of gRPC core's threads (15 characters at most): its event engine's
# pool and the pool's lifeguard, its global timer.
GRPC_THREADS = ("event_engine", "lifeguard", "grpc_")


def grpc_threads() -> list[int]:
    """This process's gRPC core threads by thread id."""
    found = []
    for task in Path("/proc/self/task").iterdir():
        try:
            name = (task / "comm").read_text().strip()
        except OSError:
            continue  # the thread ended
        if name.startswith(GRPC_THREADS):
            found.append(int(task.name))
    return found


def idle_grpc_threads() -> int:
    """Puts this process's gRPC core threads at SCHED_IDLE; how many are there now (0 where the
    class or /proc does not exist)."""
    policy = getattr(os, "SCHED_IDLE", None)
    if policy is None or not Path("/proc/self/task").is_dir():
        return 0
    done = 0
    for tid in grpc_threads():
        try:
            if os.sched_getscheduler(tid) != policy:
                os.sched_setscheduler(tid, policy, os.sched_param(0))
            done += 1
        except OSError as error:  # ended meanwhile, or refused (a seccomp profile)
            _log.debug("SCHED_IDLE for thread %d: %s", tid, error)
    return done
