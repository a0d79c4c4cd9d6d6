"""The one error of a start-up setting (an environment variable the agent reads before its
plugin loads) whose value is outside its range: InvalidContext. Every module that reads one
raises it (plugin.py's context, world.py's world, blas.py's library); plugins import it from
plugin.py, their interface. It imports nothing of the runtime, so no reader imports another
for it."""

from __future__ import annotations


class InvalidContext(ValueError):
    """A start-up setting (FWBENCH_DEVICE, FWBENCH_THREADS, ...) has a value outside its range."""
