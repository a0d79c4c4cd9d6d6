"""`collector run --launcher slurm` against a real single-node Slurm cluster (conftest.py):
each agent a batch job on the node Slurm chose, the node and job on every row, and no job left
queued or running however the run ends: at its end, on Ctrl-C, or, for a collector killed
outright, at the next run's start."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from fake_agent import write_fake_agents
from interrupted import with_sigint
from run_security import refuse_strangers

from fwbench.collector.agents.specs import Instance
from fwbench.collector.launchers.base import ORPHAN_SECONDS

pytestmark = pytest.mark.timing  # kills, Ctrl-C and jobs that end themselves in time

COLLECTOR = Path(sys.executable).with_name("collector")


def _fwbench_jobs(*options: str) -> list[str]:
    """Job ids of the fwbench jobs squeue lists with `options`. A squeue that fails (its
    controller busy on a loaded host: "Socket timed out") is asked again, never read as no
    jobs: an empty answer must mean that Slurm lists none."""
    deadline = time.monotonic() + 60
    while True:
        done = subprocess.run(
            ["squeue", "-h", *options, "-o", "%i|%k"], capture_output=True, text=True
        )
        if done.returncode == 0:
            return [line.split("|")[0] for line in done.stdout.splitlines() if "|fwbench:" in line]
        assert time.monotonic() < deadline, f"squeue keeps failing: {done.stderr}"
        time.sleep(1.0)


def our_jobs() -> list[str]:
    """Job ids of every job a fwbench collector submitted that Slurm still lists."""
    return _fwbench_jobs()


def _running_jobs() -> list[str]:
    """Job ids of fwbench jobs Slurm runs now (not pending, not ending)."""
    return _fwbench_jobs("-t", "RUNNING")


def _job_state(job: str) -> str:
    """JobState=... of a job Slurm still remembers (`slurm:ID` or ID), from scontrol."""
    show = ["scontrol", "-o", "show", "job", job.removeprefix("slurm:")]
    shown = subprocess.run(show, capture_output=True, text=True).stdout
    return next((w for w in shown.split() if w.startswith("JobState=")), shown)


def _command(tmp_path: Path, manifests: Path, *extra: str) -> list[str]:
    return [
        str(COLLECTOR),
        "run",
        "--launcher",
        "slurm",
        "--manifests",
        str(manifests),
        "--agents",
        "fake",
        "--workloads",
        "gemm",
        "--phases",
        "infer",
        "--store",
        str(tmp_path / "store.sqlite"),
        "--out",
        str(tmp_path / "run"),
        *extra,
    ]


@pytest.fixture
def manifests(tmp_path: Path) -> Path:
    return write_fake_agents(tmp_path / "agents", {"fake": {}})


def test_agents_run_as_slurm_jobs_and_none_outlives_the_run(
    slurm_cluster: Path, manifests: Path, tmp_path: Path
) -> None:
    command = _command(
        tmp_path,
        manifests,
        "--batch-sizes",
        "1,2",
        "--slurm",
        "time=00:10:00",
        "--slurm",
        "fake:time=00:07:00",  # the agent's own wins over everyone's
        "--aa",
        "fake",
        "--agent-env",
        "FWBENCH_TEST_SETTING=a b",
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = pd.read_parquet(tmp_path / "run" / "results.parquet")
    assert set(rows["status"]) == {"ok"} and set(rows["launcher"]) == {"slurm"}
    # --agent-env reached each job's agent, which reported it (a space survives the script).
    assert {json.loads(e)["FWBENCH_TEST_SETTING"] for e in rows["environment"]} == {"a b"}
    nodes = subprocess.run(["sinfo", "-h", "-o", "%n"], capture_output=True, text=True).stdout
    node = nodes.split()[0]
    assert set(rows["node"]) == {node}
    jobs = dict(zip(rows["agent"], rows["scheduler_job"], strict=False))
    assert sorted(jobs) == ["fake", "fake#2"] and len(set(jobs.values())) == 2
    assert all(job.startswith("slurm:") and job[6:].isdigit() for job in jobs.values())
    assert our_jobs() == []
    meta = json.loads((tmp_path / "run" / "run.json").read_text())
    # Agents start one at a time to describe themselves, give their job back, and measure in
    # a job of their own later: run.json says which job described each.
    described = meta["agents"]["fake"]
    assert described["described_only"] and described["slurm_job"].isdigit()
    assert described["slurm_job"] not in {job.removeprefix("slurm:") for job in jobs.values()}
    assert described["partition"] == "debug"
    # One at a time: no node held two agents at once, and the run says nothing of sharing.
    assert meta["shared_nodes"] == {} and "one measures at a time" not in done.stderr
    # Agents that finished end their jobs as finished programs do, not cancelled.
    for job in jobs.values():
        shown = subprocess.run(
            ["scontrol", "-o", "show", "job", job[6:]], capture_output=True, text=True
        ).stdout
        assert "JobState=COMPLETED" in shown and "TimeLimit=00:07:00" in shown, shown


def _killed_mid_cell(tmp_path: Path, min_seconds: str) -> Path:
    """`collector run` through Slurm, SIGKILLed once its cells' agent measures (the agent marks
    its 3rd step: however loaded the host, that agent has started, read its token and runs a
    cell; a collector killed before then would leave a job whose agent exits at once, its
    token's folder swept by the next command); returns the manifests it ran."""
    marked = tmp_path / "measuring"
    manifests = write_fake_agents(tmp_path / "marking", {"fake": {"FAKE_MARK": f"1:3:{marked}"}})
    long = _command(
        tmp_path,
        manifests,
        "--batch-sizes",
        "1",
        "--param",
        "m=20000",
        "--min-seconds",
        min_seconds,
    )
    process = subprocess.Popen(long, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while not marked.exists():
        assert process.poll() is None and time.monotonic() < deadline, "no cell measured"
        time.sleep(0.2)
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    return manifests


def test_a_killed_collectors_jobs_are_cancelled_by_the_next_run(
    slurm_cluster: Path, tmp_path: Path
) -> None:
    manifests = _killed_mid_cell(tmp_path, "60")
    assert len(our_jobs()) == 1  # left running by the killed collector
    again = _command(tmp_path / "again", manifests, "--batch-sizes", "1")
    (tmp_path / "again").mkdir()
    done = subprocess.run(again, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert our_jobs() == []  # the orphan swept, the new run's own job gone too


def test_a_killed_collectors_agent_job_ends_itself(slurm_cluster: Path, tmp_path: Path) -> None:
    _killed_mid_cell(tmp_path, "300")
    killed = time.monotonic()
    while our_jobs() and time.monotonic() - killed < ORPHAN_SECONDS + 30:
        time.sleep(1.0)
    assert our_jobs() == [], "the agent's job outlived its collector"
    # Its run was not over: no call reached the agent, which exited on its own.
    assert time.monotonic() - killed > ORPHAN_SECONDS / 2


def test_ctrl_c_cancels_the_runs_jobs(slurm_cluster: Path, manifests: Path, tmp_path: Path) -> None:
    long = _command(
        tmp_path, manifests, "--batch-sizes", "1", "--param", "m=20000", "--min-seconds", "60"
    )
    process = subprocess.Popen(with_sigint(long), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 120
    while not (tmp_path / "run" / "run.json").exists() or not _running_jobs():
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    time.sleep(1.0)
    process.send_signal(signal.SIGINT)
    process.communicate(timeout=120)
    assert process.returncode != 0
    assert our_jobs() == []


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (("--slurm", "output=/tmp/x"), "--output is the launcher's own"),
        (("--slurm", "partition=nowhere"), "Slurm refused fake"),
        (("--slurm", "ntasks=1"), "--ntasks is what the world size says"),
        # Held in the queue past --start-timeout: the error says why, in Slurm's words.
        (("--slurm", "begin=now+1hour", "--start-timeout", "5"), "PENDING (BeginTime)"),
    ],
)
def test_bad_slurm_options_are_refused_with_the_reason(
    slurm_cluster: Path, manifests: Path, tmp_path: Path, extra: tuple[str, ...], said: str
) -> None:
    done = subprocess.run(
        _command(tmp_path, manifests, "--batch-sizes", "1", *extra),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert said in done.stderr.replace("\n", " ")
    assert our_jobs() == []


def test_a_world_is_one_allocation_whose_tasks_are_its_ranks(
    slurm_cluster: Path, manifests: Path, tmp_path: Path
) -> None:
    command = _command(
        tmp_path,
        manifests,
        "--batch-sizes",
        "1",
        "--world-sizes",
        "2",
        "--phases",
        "train",
        "--iterations",
        "4",
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (row,) = pd.read_parquet(tmp_path / "run" / "results.parquet").to_dict("records")
    assert (row["status"], row["world_size"], row["world_placement"]) == ("ok", 2, "slurm")
    assert row["scheduler_job"].startswith("slurm:")  # both ranks: one job
    meta = json.loads((tmp_path / "run" / "run.json").read_text())["agents"]["fake~w2"]
    assert len({rank["address"] for rank in meta["ranks"]}) == 2
    assert our_jobs() == []
    assert _job_state(row["scheduler_job"]) == "JobState=COMPLETED"  # ended as finished work


def test_a_world_whose_rank_dies_ends_its_job_failed(
    slurm_cluster: Path, manifests: Path, tmp_path: Path
) -> None:
    """Rank 1's process dies in the timed phase: its cell fails, and the world's job ends
    FAILED in Slurm's accounting, or CANCELLED. The collector sees the world break at once and
    ends its job with SIGTERM while srun is still taking the other rank down: which of the two
    Slurm records first depends on the host's load (a `make test-stress` run saw CANCELLED),
    but neither may turn a crashed world into finished work (COMPLETED)."""
    command = _command(
        tmp_path,
        manifests,
        "--batch-sizes",
        "1",
        "--world-sizes",
        "2",
        "--phases",
        "train",
        "--iterations",
        "50",
        "--agent-env",
        "FAKE_RANK1_EXIT_AT=3",
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stderr  # a failed cell: the run says failed
    (row,) = pd.read_parquet(tmp_path / "run" / "results.parquet").to_dict("records")
    assert row["status"] == "failed" and row["scheduler_job"].startswith("slurm:"), row
    assert our_jobs() == []
    state = _job_state(row["scheduler_job"])
    assert state in ("JobState=FAILED", "JobState=CANCELLED"), (state, row["error"])


def test_a_world_whose_port_was_taken_is_submitted_again(
    slurm_cluster: Path, manifests: Path, tmp_path: Path
) -> None:
    """The collector picks a world's ports blind (it cannot probe a node). When rank 0 finds
    its port taken, its job fails with srun's own lines last in the log; the start is still
    known for a taken port and the world is submitted again on others."""
    taken = tmp_path / "taken"
    command = _command(
        tmp_path,
        manifests,
        "--batch-sizes",
        "1",
        "--world-sizes",
        "2",
        "--phases",
        "train",
        "--iterations",
        "3",
        "--agent-env",
        f"FAKE_PORT_TAKEN_ONCE={taken}",
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert taken.exists()  # a start did fail on its port
    (row,) = pd.read_parquet(tmp_path / "run" / "results.parquet").to_dict("records")
    assert (row["status"], row["world_size"]) == ("ok", 2), row["error"]
    assert our_jobs() == []


def test_worlds_that_cannot_fit_together_run_one_after_another(
    slurm_cluster: Path, manifests: Path, tmp_path: Path
) -> None:
    """--world-sizes 1,2 on a node of 2 CPUs: the world of one (1 CPU) and the world of two
    (2 CPUs) never fit at once. Each is started to say what it is, gives its allocation back,
    and is started again for its cells: the run ends with both measured and no job left."""
    if (os.cpu_count() or 1) > 2:
        pytest.skip("the node must be too small for both worlds at once: 2 CPUs")
    command = _command(
        tmp_path,
        manifests,
        "--batch-sizes",
        "1",
        "--world-sizes",
        "1,2",
        "--phases",
        "train",
        "--iterations",
        "3",
        "--start-timeout",
        "60",
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rows = pd.read_parquet(tmp_path / "run" / "results.parquet")
    assert sorted(rows["agent"]) == ["fake~w1", "fake~w2"]
    assert set(rows["status"]) == {"ok"}, rows[["agent", "status", "error"]]
    assert our_jobs() == []


def test_a_process_of_two_devices_is_one_task_told_so(
    slurm_cluster: Path, manifests: Path, tmp_path: Path
) -> None:
    """--world-sizes 1x2: one task given two replicas' CPUs and FWBENCH_LOCAL_DEVICES=2."""
    command = _command(
        tmp_path,
        manifests,
        "--batch-sizes",
        "1",
        "--world-sizes",
        "1x2",
        "--phases",
        "train",
        "--iterations",
        "3",
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    (row,) = pd.read_parquet(tmp_path / "run" / "results.parquet").to_dict("records")
    assert (row["status"], row["world_size"], row["local_devices"]) == ("ok", 1, 2)
    assert (row["items_per_sample"], row["world_placement"]) == (2, "slurm")
    assert our_jobs() == []


@pytest.mark.agent
@pytest.mark.full  # make test: a real torch world across two nodes (test_multinode.py)
def test_real_agents_and_torch_and_tensorflow_worlds_through_slurm(
    slurm_cluster: Path, tmp_path: Path
) -> None:
    base = [str(COLLECTOR), "run", "--launcher", "slurm", "--store", str(tmp_path / "db")]
    single = [
        *base,
        "--agents",
        "torch-cpu,jax-cpu",
        "--workloads",
        "gemm,resnet18",
        "--phases",
        "infer",
        "--batch-sizes",
        "1",
        "--param",
        "m=256",
        "--param",
        "n=256",
        "--param",
        "k=256",
        "--param",
        "image_size=64",
        "--iterations",
        "3",
        "--min-seconds",
        "0",
        "--out",
        str(tmp_path / "single"),
    ]
    world = [
        *base,
        "--workloads",
        "allreduce,lenet",
        "--phases",
        "train",
        "--batch-sizes",
        "8",
        "--world-sizes",
        "2",
        "--iterations",
        "3",
    ]
    # Each world its own run, so that each run's table says one framework's world.
    runs = [(single, "single")] + [
        ([*world, "--agents", agent, "--out", str(tmp_path / agent)], agent)
        for agent in ("torch-cpu", "tf-eigen")
    ]
    for command, out in runs:
        done = subprocess.run(command, capture_output=True, text=True, timeout=1200)
        assert done.returncode == 0, done.stderr[-3000:]
        rows = pd.read_parquet(tmp_path / out / "results.parquet")
        assert set(rows["status"]) == {"ok"} and set(rows["launcher"]) == {"slurm"}
        assert rows["scheduler_job"].str.startswith("slurm:").all()
        if out != "single":
            assert set(rows["world_size"]) == {2} and set(rows["agent"]) == {f"{out}~w2"}
    assert our_jobs() == []


def test_slurm_ranks_demand_the_runs_token_and_are_told_every_peer(
    slurm_cluster: Path, manifests: Path, tmp_path: Path
) -> None:
    """Agents on a cluster listen on their node's addresses: only the run's token opens them,
    over TLS with the run's own certificate (a plaintext caller is refused, the token's too).
    Every rank's process gets FWBENCH_PEERS (TensorFlow's TF_CONFIG) and its thread count."""
    from fwbench.collector.agents.manifest import discover_manifests
    from fwbench.collector.launchers import LaunchSettings
    from fwbench.collector.launchers.slurm import SlurmLauncher
    from fwbench.collector.run.prometheus_targets import target_groups

    manifest = discover_manifests([manifests])["fake"]
    launcher = SlurmLauncher(LaunchSettings(run_id="tokens", log_dir=tmp_path))
    try:
        world = Instance("fake", ranks=2, devices=1)
        place = launcher.place_world(manifest, world, 1)
        ranks = [launcher.start(manifest, world.of_rank(rank), 1) for rank in range(2)]
        refuse_strangers(ranks[0].address, launcher._security)
        assert "token and TLS" in ranks[0].log_path.read_text()
        environments = []
        for rank in ranks:
            pid = rank.client.describe().pid  # one node: the rank's process is on this host
            raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            environments.append(dict(v.decode().split("=", 1) for v in raw if b"=" in v))
        node = ranks[0].node
        peers = f"{node}:{place.port + 1},{node}:{place.port + 2}"
        for rank, env in enumerate(environments):
            assert (env["RANK"], env["FWBENCH_PEERS"]) == (str(rank), peers)
            assert (env["MASTER_ADDR"], env["FWBENCH_THREADS"]) == (node, "1")
        (group,) = target_groups(ranks[:1], "tokens")  # Prometheus finds it on its node
        assert group == {
            "targets": [ranks[0].metrics_address],
            "labels": {"agent": ranks[0].name, "run": "tokens", "launcher": "slurm", "node": node},
        }
    finally:
        launcher.close()  # cancels the run's jobs
    deadline = time.monotonic() + 30
    while our_jobs() and time.monotonic() < deadline:
        time.sleep(0.5)
    assert our_jobs() == []


def test_a_model_file_is_read_on_the_shared_filesystem(slurm_cluster: Path, tmp_path: Path) -> None:
    """--model through Slurm: the reference's job computes the reference outputs and FLOPs,
    each agent's job reads the file at its own path (the cluster's shared filesystem, here the
    one host's), and the rows are those of any launcher: outputs checked, nothing uploaded."""
    manifests = write_fake_agents(
        tmp_path / "readers", {"fake": {"FAKE_MODEL_FORMATS": "onnx", "FAKE_MODEL_MICROS": "500"}}
    )
    model = tmp_path / "net.onnx"
    model.write_text(
        json.dumps({"inputs": [{"name": "x", "shape": [None, 3], "dtype": "float32"}], "scale": 2})
    )
    command = _command(tmp_path, manifests, "--model", str(model), "--batch-sizes", "1,2")
    command.remove("--workloads")
    command.remove("gemm")
    command += ["--aa", "fake", "--min-seconds", "0.05"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = pd.read_parquet(tmp_path / "run" / "results.parquet")
    assert set(rows["status"]) == {"ok"} and set(rows["launcher"]) == {"slurm"}
    assert set(rows["agent"]) == {"fake", "fake#2"} and rows["outputs_match"].all()
    assert set(rows["flops_counter"]) == {"fake: fake counter 1.0"}
    assert "does not see this host's files" not in done.stderr
    assert our_jobs() == []
