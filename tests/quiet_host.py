"""For the few tests whose premise is an idle host (no cell of an idle machine is interfered;
`--quiet-host` sees the host go quiet once the test's own hog stops): they check that the host
is quiet before they start and, where it is not, skip saying what they saw, instead of failing
for what another process did. `make test` runs them (marked `quiet`) alone, after the rest of
the suite; `make test-stress` shows them skipping beside its busy processes.

Every other timing-sensitive test holds whatever else the host runs (marked `timing`:
`make test-stress` runs them beside two busy processes)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from suite_clock import cpu_shares, cpu_times

# Busy and stolen CPU time, as a share of all the host's CPU time, above which a host is not
# quiet. An idle 2-vCPU VM reads 0-2% (the kernel, the collector's own idle threads); one
# spinning process on 2 CPUs reads 50%.
BUSY_LIMIT = 0.05


def require_quiet_host(seconds: float = 2.0) -> None:
    """Skips the calling test where the host's CPUs were more than BUSY_LIMIT busy (stolen
    time included) over `seconds` before it starts; Linux's /proc/stat tells."""
    before = cpu_times()
    time.sleep(seconds)
    shares = cpu_shares(before, cpu_times())
    if not shares:
        return  # no /proc/stat: nothing to go by
    busy = shares["busy"] + shares["steal"]
    if busy > BUSY_LIMIT:
        pytest.skip(
            f"needs a quiet host: {busy:.0%} of this host's CPU time was busy or stolen over "
            f"the {seconds:g} s before it (steal {shares['steal']:.0%}; the limit "
            f"{BUSY_LIMIT:.0%}); `make test` runs it alone after the rest"
        )


class Hog:
    """One spinning process per CPU of this machine, until stopped."""

    def __init__(self) -> None:
        count = len(os.sched_getaffinity(0))
        spin = "while True: pass"
        self.processes = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(count)]

    def stop(self) -> None:
        for process in self.processes:
            process.kill()
            process.wait()


@contextmanager
def hog() -> Iterator[Hog]:
    running = Hog()
    try:
        yield running
    finally:
        running.stop()
