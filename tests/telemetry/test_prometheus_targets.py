"""Prometheus service discovery for the agents a run starts (FWBENCH_PROMETHEUS_TARGETS): a
real Prometheus, configured with compose/prometheus/prometheus.yml as it is, finds every agent
and every rank of a world through the file the collector keeps in its targets folder, for as
long as the run lasts."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from prometheus_server import prometheus_server, query

sys.path.insert(0, str(Path(__file__).parents[1]))
from fake_agent import write_fake_agents

COLLECTOR = Path(sys.executable).with_name("collector")


def _command(tmp_path: Path, *extra: str) -> list[str]:
    manifests = write_fake_agents(tmp_path / "agents", {"fake": {}})
    return [
        str(COLLECTOR),
        "run",
        "--manifests",
        str(manifests),
        "--agents",
        "fake",
        "--workloads",
        "gemm",
        "--phases",
        "train",
        "--world-sizes",
        "1,2",
        "--batch-sizes",
        "1,2",
        "--param",
        "m=20000",
        "--iterations",
        "150",
        "--store",
        str(tmp_path / "store.sqlite"),
        "--out",
        str(tmp_path / "run"),
        *extra,
    ]


def test_prometheus_scrapes_every_rank_of_the_run_through_its_targets_file(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "prometheus"
    folder.mkdir()
    targets = folder / "targets"
    with prometheus_server([], folder) as url:
        env = {**os.environ, "FWBENCH_PROMETHEUS_TARGETS": str(targets)}
        run = subprocess.Popen(
            _command(tmp_path), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        seen: dict[tuple[str, str], dict[str, str]] = {}
        deadline = time.monotonic() + 60
        while len(seen) < 3 and run.poll() is None and time.monotonic() < deadline:
            for series in query(url, 'up{job="fwbench-agents"} == 1'):
                labels = series["metric"]
                seen[labels["agent"], labels.get("rank", "")] = labels
            time.sleep(0.5)
        _, stderr = run.communicate(timeout=120)
        assert run.returncode == 0, stderr.decode()
    assert sorted(seen) == [("fake~w1", "0"), ("fake~w2", "0"), ("fake~w2", "1")]
    (run_id,) = {labels["run"] for labels in seen.values()}
    assert (tmp_path / "run" / "run.json").read_text().count(run_id) >= 1
    assert {labels["launcher"] for labels in seen.values()} == {"local"}
    assert list(targets.glob("fwbench-*")) == []  # the run's file goes with the run


def test_a_targets_folder_that_cannot_be_written_stops_the_run_before_it_starts(
    tmp_path: Path,
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = {**os.environ, "FWBENCH_PROMETHEUS_TARGETS": str(blocker / "targets")}
    done = subprocess.run(_command(tmp_path), env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done.stderr
    assert f"FWBENCH_PROMETHEUS_TARGETS={blocker / 'targets'}" in done.stderr
    assert not (tmp_path / "run").exists()


def test_a_killed_collectors_targets_are_removed_by_the_next_run(tmp_path: Path) -> None:
    """SIGKILL leaves the run's targets file (nothing can remove it then); the next run on this
    host sees that its collector is gone and removes it, and says so. Another live run's file
    and a file with no owner (an older collector's) are left alone."""
    targets = tmp_path / "targets"
    env = {**os.environ, "FWBENCH_PROMETHEUS_TARGETS": str(targets)}
    killed = subprocess.Popen(
        _command(tmp_path / "first"), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    deadline = time.monotonic() + 60
    while not list(targets.glob("fwbench-*.json")) and time.monotonic() < deadline:
        time.sleep(0.2)
    (left,) = targets.glob("fwbench-*.json")
    killed.send_signal(signal.SIGKILL)
    killed.communicate(timeout=30)
    assert left.exists()  # nothing could remove it
    older = targets / "fwbench-older.json"
    older.write_text("[]\n")
    second = tmp_path / "second"
    done = subprocess.run(
        [*_command(second), "--world-sizes", "1", "--iterations", "3"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    run_id = left.name.removeprefix("fwbench-").removesuffix(".json")
    said = " ".join((done.stdout + done.stderr).split())
    assert f"removed the targets of run {run_id}, whose collector is gone" in said, said
    assert not left.exists()
    assert sorted(path.name for path in targets.iterdir()) == ["fwbench-older.json"]
