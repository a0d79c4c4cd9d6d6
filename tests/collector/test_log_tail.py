"""What a failed start says about its agent's log (launchers/base.py log_tail), and the words
on which a world is placed again (launchers/world.py port_taken): a world's ranks share one
Slurm log, where srun writes last and a live rank can write after the failed one."""

from __future__ import annotations

from pathlib import Path

import pytest

from fwbench.collector.launchers import slurm_scripts
from fwbench.collector.launchers.base import log_tail
from fwbench.collector.launchers.slurm_agent import SlurmAgent
from fwbench.collector.launchers.world import port_taken

WORLD_LOG = """\
Traceback (most recent call last):
  File "plugin.py", line 57, in __init__
    raise OSError(98, "Address already in use (port 28732)")
OSError: [Errno 98] Address already in use (port 28732)
fwbench-agent fake serving on 0.0.0.0:32891 (metrics 37915; token)
srun: error: vm: task 0: Exited with exit code 1
srun: launch/slurm: _step_signal: Terminating StepId=1.1
slurmstepd-vm: error: *** STEP 1.1 ON vm CANCELLED AT 2026-11-29T15:51:01 ***
"""


def test_the_error_that_ended_a_world_is_named_before_the_last_line() -> None:
    tail = log_tail(WORLD_LOG, SlurmAgent.LOG_NOISE)
    assert tail == (
        "; last error in the log: OSError: [Errno 98] Address already in use (port 28732)"
        "; last log line: fwbench-agent fake serving on 0.0.0.0:32891 (metrics 37915; token)"
    )
    assert port_taken(tail)
    # Without the scheduler's lines skipped, srun's would stand for the agent's.
    assert log_tail(WORLD_LOG).endswith("CANCELLED AT 2026-11-29T15:51:01 ***")


@pytest.mark.parametrize(
    ("text", "said"),
    [
        ("", ""),
        ("\n  \n", ""),
        (
            "starting\nfwbench-agent: FWBENCH_DEVICE='bogus'\n",
            "; last log line: fwbench-agent: FWBENCH_DEVICE='bogus'",
        ),
        (
            "Traceback (most recent call last):\nValueError: bad shape\n",
            "; last log line: ValueError: bad shape",
        ),  # the error is the last line: said once
        (
            "tensorflow.python.framework.errors_impl.UnknownError: Could not start\nbye\n",
            "; last error in the log: tensorflow.python.framework.errors_impl.UnknownError: "
            "Could not start; last log line: bye",
        ),
        ("a line that says Error: in its middle\nbye\n", "; last log line: bye"),
    ],
)
def test_a_log_tail_names_the_last_line_and_an_exception_before_it(text: str, said: str) -> None:
    assert log_tail(text) == said


def test_an_old_error_far_above_the_end_is_not_named(tmp_path: Path) -> None:
    text = "KeyError: 'old'\n" + "".join(f"line {n}\n" for n in range(60))
    assert log_tail(text) == "; last log line: line 59"


def test_a_worlds_blind_ports_lie_below_the_ephemeral_range(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("32768\t60999\n")
    monkeypatch.setattr(slurm_scripts, "EPHEMERAL_PORTS", ranges)
    ports = {slurm_scripts.blind_port(3) for _ in range(2000)}
    assert min(ports) >= slurm_scripts.LOWEST_PORT and max(ports) + 3 <= 32768
    ranges.write_text("20500 60999\n")  # a range that leaves almost nothing below: 1000 ports
    assert max(slurm_scripts.blind_port(3) for _ in range(500)) <= 21000
    monkeypatch.setattr(slurm_scripts, "EPHEMERAL_PORTS", tmp_path / "absent")
    assert max(slurm_scripts.blind_port(3) for _ in range(500)) + 3 <= 32768
