"""A world someone else started, on hosts the collector does not manage: its ranks were
started by hand with torchrun's variables (as on other machines), and `collector run` attaches
to them as NAME@HOST:PORT+HOST:PORT, ranks in rank order, measuring them as one world without
starting or stopping any (docs/distributed.md)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).parents[1] / "security"))
from security_agents import agent_command, agent_environment

from fwbench.collector.launchers.base import free_port

COLLECTOR = Path(sys.executable).with_name("collector")


@pytest.fixture
def ranks(tmp_path: Path) -> Iterator[list[str]]:
    """Two ranks of the fake agent, one world, started as a user would on two machines."""
    rendezvous, processes, addresses = free_port(), [], []
    for rank in range(2):
        ports = tmp_path / f"rank{rank}.json"
        world = {
            "WORLD_SIZE": "2",
            "RANK": str(rank),
            "LOCAL_RANK": "0",
            "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": str(rendezvous),
        }
        processes.append(
            subprocess.Popen(
                agent_command("--ports-file", str(ports), "--no-metrics"),
                env=agent_environment(tmp_path / "plugin", world),
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        deadline = time.monotonic() + 60
        while not ports.exists():
            assert processes[-1].poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        addresses.append(f"127.0.0.1:{json.loads(ports.read_text())['grpc']}")
    yield addresses
    for process in processes:
        assert process.poll() is None  # the collector stopped nothing it did not start
        process.terminate()
        process.wait(10)


def _run(tmp_path: Path, spec: str, *extra: str) -> subprocess.CompletedProcess[str]:
    command = [
        str(COLLECTOR),
        "run",
        "--agents",
        spec,
        "--workloads",
        "gemm",
        "--phases",
        "train",
        "--batch-sizes",
        "1,2",
        "--iterations",
        "4",
        "--store",
        str(tmp_path / "store.sqlite"),
        "--out",
        str(tmp_path / "run"),
        *extra,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=300)


def test_a_world_started_elsewhere_is_attached_and_measured_as_one(
    ranks: list[str], tmp_path: Path
) -> None:
    done = _run(tmp_path, f"fake@{ranks[0]}+{ranks[1]}")
    assert done.returncode == 0, done.stderr
    rows = pd.read_parquet(tmp_path / "run" / "results.parquet")
    assert set(rows["status"]) == {"ok"} and set(rows["agent"]) == {"fake~w2"}
    assert set(rows["world_size"]) == {2} and set(rows["world_placement"]) == {"attached"}
    assert set(rows["launcher"]) == {"attached"}
    meta = json.loads((tmp_path / "run" / "run.json").read_text())["agents"]["fake~w2"]
    assert [rank["address"] for rank in meta["ranks"]] == ranks


def test_ranks_given_out_of_order_or_short_are_refused_before_anything_is_measured(
    ranks: list[str], tmp_path: Path
) -> None:
    done = _run(tmp_path, f"fake@{ranks[1]}+{ranks[0]}")
    assert done.returncode != 0
    assert "says it is rank 1 of 2, not rank 0 of 2" in done.stderr
    assert not (tmp_path / "run" / "results.parquet").exists()
    for spec, why in (
        (f"fake~w3@{ranks[0]}+{ranks[1]}", "a world of 3 ranks needs that many addresses"),
        (f"fake@{ranks[0]}+{ranks[0]}", f"the address {ranks[0]} is given twice"),
        (f"fake@{ranks[0]}+{ranks[1]}", "--min-seconds cannot be used with worlds"),
    ):
        extra = ("--min-seconds", "1") if "min-seconds" in why else ()
        done = _run(tmp_path, spec, *extra)
        assert done.returncode == 2, done.stderr
        assert why in " ".join(done.stderr.split()), done.stderr
