"""--slurm options for every agent or, as AGENT:OPTION, for one agent's jobs (launchers/
slurm_jobs.py, launchers/slurm_options.py): GPU and CPU agents can go to different partitions
in one run."""

from __future__ import annotations

import pytest

from fwbench.collector.cli.slurm import agent_names
from fwbench.collector.launchers import LaunchOptionError
from fwbench.collector.launchers.slurm_jobs import options_for, scoped
from fwbench.collector.launchers.slurm_options import check_sbatch_options


def test_an_agents_own_options_come_after_everyones_and_only_for_it() -> None:
    given = ("partition=cpu", "torch-cu12:partition=gpu", "torch-cu12:gres=gpu:1", "exclusive")
    assert options_for("torch-cu12", given) == [
        "partition=cpu",
        "exclusive",
        "partition=gpu",
        "gres=gpu:1",
    ]
    assert options_for("tf-eigen", given) == ["partition=cpu", "exclusive"]
    # A ':' in a value is no agent's prefix.
    assert scoped("container=docker://repo/image:tag") == ("", "container=docker://repo/image:tag")
    assert scoped("tf-eigen:exclusive") == ("tf-eigen", "exclusive")


@pytest.mark.parametrize(
    ("option", "said"),
    [
        ("nobody:partition=gpu", "nobody is not an agent of this run"),
        ("fake:cpus-per-task=4", "give it for every agent"),
        ("fake:ntasks=1", "--ntasks is what the world size says"),
        ("fake:output=/tmp/x", "--output is the launcher's own"),
    ],
)
def test_bad_scoped_options_are_refused(option: str, said: str) -> None:
    agents = agent_names("fake,fake#2,torch-cpu@127.0.0.1:50051")
    assert agents == {"fake", "torch-cpu"}
    with pytest.raises(LaunchOptionError, match=said):
        check_sbatch_options([option], frozenset(agents))
    assert check_sbatch_options(["fake:time=00:05:00"], frozenset(agents))
