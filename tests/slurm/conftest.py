"""Real Slurm clusters for the tests: a single-node one (slurmctld and slurmd from Debian's
slurm-wlm on this machine, configured in a temporary folder on ports free now) and a two-node
one whose nodes have network namespaces of their own (multinode.py), both with munge for
authentication (`make slurm-deps` installs both; CI runs it). Without Slurm the tests skip,
except under CI=true or FWBENCH_REQUIRE_SLURM=1, where that is a failure."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))  # fake_agent
sys.path.insert(0, str(Path(__file__).parent))  # multinode

from multinode import SETTINGS, MultiNodeCluster, free_port, multinode_cluster

DAEMONS = ("slurmctld", "slurmd", "munged", "sbatch", "squeue", "scancel")


def _config(folder: Path) -> str:
    node, cpus = socket.gethostname(), os.cpu_count() or 1
    return "\n".join(
        [
            "ClusterName=fwbench-test",
            f"SlurmctldHost={node}",
            f"StateSaveLocation={folder}/state",
            f"SlurmdSpoolDir={folder}/spool",
            f"SlurmctldPidFile={folder}/slurmctld.pid",
            f"SlurmdPidFile={folder}/slurmd.pid",
            f"SlurmctldLogFile={folder}/slurmctld.log",
            f"SlurmdLogFile={folder}/slurmd.log",
            f"SlurmctldPort={free_port()}",
            f"SlurmdPort={free_port()}",
            *SETTINGS,
            f"NodeName={node} CPUs={cpus} RealMemory=1000 State=UNKNOWN",
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        ]
    )


def _munge() -> None:
    """Start munged as Debian runs it (user munge) unless one runs. A munged started earlier as
    root (Debian's init script on some hosts, or by hand) leaves a root-owned log file and
    socket lock behind, which a munged running as munge refuses with exit 1 and one line on
    stderr: so what it owns is given back to munge and stale runtime files are removed first."""
    if subprocess.run(["pgrep", "-x", "munged"], capture_output=True).returncode == 0:
        return
    run_dir = Path("/run/munge")
    run_dir.mkdir(parents=True, exist_ok=True)
    for stale in run_dir.iterdir():
        stale.unlink()
    for folder in (run_dir, Path("/var/log/munge"), Path("/var/lib/munge"), Path("/etc/munge")):
        if folder.exists():
            for path in (folder, *folder.iterdir()):
                shutil.chown(path, "munge", "munge")
    started = subprocess.run(
        ["runuser", "-u", "munge", "--", "/usr/sbin/munged"], capture_output=True, text=True
    )
    assert started.returncode == 0, f"munged did not start: {started.stderr.strip()}"


def _require_slurm(*tools: str) -> None:
    """Skips without Slurm (or root, or the tools named), except where CI demands it."""
    missing = [name for name in (*DAEMONS, *tools) if shutil.which(name) is None]
    if missing or os.geteuid() != 0:
        why = (
            f"no Slurm here ({', '.join(missing)} missing; `make slurm-deps`)"
            if missing
            else ("a test Slurm cluster needs root")
        )
        if os.environ.get("CI") or os.environ.get("FWBENCH_REQUIRE_SLURM"):
            pytest.fail(why)
        pytest.skip(why)


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """SLURM_CONF of a cluster that runs until the session ends; set in os.environ too, so
    that the collector the tests start submits to it."""
    _require_slurm()
    folder = tmp_path_factory.mktemp("slurm")
    for sub in ("state", "spool"):
        (folder / sub).mkdir()
    conf = folder / "slurm.conf"
    conf.write_text(_config(folder) + "\n")
    _munge()
    env = {**os.environ, "SLURM_CONF": str(conf)}
    subprocess.run(["slurmctld", "-f", str(conf)], env=env, check=True)
    subprocess.run(["slurmd", "-f", str(conf)], env=env, check=True)
    previous = os.environ.get("SLURM_CONF")
    os.environ["SLURM_CONF"] = str(conf)
    deadline = time.monotonic() + 60
    while "idle" not in _sinfo() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert "idle" in _sinfo(), (folder / "slurmctld.log").read_text()[-2000:]
    yield conf
    subprocess.run(["scancel", "--full", "-u", "root"], capture_output=True, check=False)
    for daemon in ("slurmd", "slurmctld"):
        pid_file = folder / f"{daemon}.pid"
        if pid_file.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text()), signal.SIGTERM)
    if previous is None:
        os.environ.pop("SLURM_CONF", None)
    else:
        os.environ["SLURM_CONF"] = previous


def _sinfo() -> str:
    done = subprocess.run(["sinfo", "-h", "-o", "%t"], capture_output=True, text=True)
    return done.stdout


@pytest.fixture(scope="module")
def slurm_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MultiNodeCluster]:
    """A cluster of two nodes, each in namespaces of its own (multinode.py), for one module;
    its SLURM_CONF is in no process's environment but the ones given cluster.env()."""
    _require_slurm("ip", "unshare")
    _munge()
    with multinode_cluster(tmp_path_factory.mktemp("slurm-nodes")) as cluster:
        yield cluster
