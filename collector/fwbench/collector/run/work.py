"""An agent's share of a run: its handle, what it said of itself, its planned cells, and how
to swap in a fresh process of it (a new repetition, another thread count)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.launchers import AgentHandle
from fwbench.collector.run.plan import Cell
from fwbench.spec import startup


@dataclass
class AgentWork:
    handle: AgentHandle
    describe: agent_pb2.DescribeResponse
    cells: list[Cell]
    # Starts a fresh instance of this agent with FWBENCH_THREADS=N (agents the collector
    # started; None for attached ones).
    restart: Callable[[int], AgentHandle] | None = None
    repetition: int = 0  # the repetition the current process serves
    idle: bool = False  # its process was stopped after its cells (rest); the next use starts one

    def ensure_fresh(self, repetition: int, threads: int) -> bool:
        """With fresh processes per repetition: swaps in a new process when `repetition` is
        not the one the current process serves, or when the last one was stopped at rest.
        Returns whether it did (never for an agent the collector did not start). Raises what
        starting an agent raises."""
        previous, self.repetition = self.repetition, repetition
        if self.restart is None or (repetition == previous and not self.idle):
            return False
        self._swap(threads if self.describe.threads.fixed_at_startup else self.handle.threads)
        return True

    def rest(self) -> None:
        """Stops the process of an agent the collector started once it will not measure again
        before a fresh one replaces it, so that, idle, it holds no memory, threads or GPU
        memory while another agent measures (JAX keeps 75% of a GPU from its first cell on).
        The next ensure_fresh or ensure_threads starts a new one."""
        if self.restart is None or self.idle:
            return
        try:
            self.handle.stop()
        except Exception:  # noqa: BLE001 (the run's end stops it again; the next use swaps)
            return
        self.idle = True

    def awake(self) -> None:
        """An agent given back at rest (one at a time: Slurm's after it described itself)
        started again, with the same threads, for a call before its cells: the model's
        signature, reference step or export (model_prepare.py). Raises what starting one
        raises."""
        if self.idle:
            self._swap(self.handle.threads)

    def ensure_threads(self, threads: int) -> str:
        """For an agent that sizes its thread pools at start-up, swaps in an instance started
        with `threads` when needed. Returns why the cell cannot run, or "". Raises what
        starting an agent raises."""
        if self.idle:  # stopped at rest: a new process, at the count this cell needs
            fixed = self.describe.threads.fixed_at_startup and threads
            self._swap(threads if fixed else self.handle.threads)
            return ""
        if not self.describe.threads.fixed_at_startup or threads == self.handle.threads:
            return ""
        if self.handle.instance.ranks and not threads:  # ranks: their CPUs' count
            return ""
        if self.restart is None:
            return (
                f"{self.handle.name} sizes its thread pools at start-up and was not started "
                f"by the collector; start it with {startup.THREADS}={threads}"
            )
        self._swap(threads)
        return ""

    def replace_dead(self) -> bool:
        """Replaces a crashed or hung agent the collector started with a fresh process (same
        thread count). Returns False for an attached agent. Raises what starting one raises."""
        if self.restart is None:
            return False
        self._swap(self.handle.threads, grace_seconds=1.0)  # a hung one will not stop politely
        return True

    def _swap(self, threads: int, grace_seconds: float = 10.0) -> None:
        assert self.restart is not None
        self.handle.stop(grace_seconds)
        self.handle = self.restart(threads)
        self.idle = False
        self.describe = self.handle.client.describe()
