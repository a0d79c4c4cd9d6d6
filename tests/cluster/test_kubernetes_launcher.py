"""`collector run --launcher kubernetes` against a fake Kubernetes API server (conftest.py,
fake_kube.py: a real HTTP server the official client talks to, whose kubelet runs each pod as
a local process): each agent an Indexed Job's pod, the node and Job on every row, and nothing
left in the cluster however the run ends: at its end, when a pod cannot start, or, for a
collector killed outright, by the agent itself and then by the next run."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from fake_kube import FakeKube, Image, kubeconfig
from interrupted import with_sigint
from pod_security import check_restricted
from run_security import refuse_strangers

from fwbench.spec import model_files

COLLECTOR = Path(sys.executable).with_name("collector")
ORPHAN_SECONDS = 6  # the killed collector's agent ends itself this long after its last call


def _command(tmp_path: Path, manifests: Path, *extra: str) -> list[str]:
    return [
        str(COLLECTOR),
        "run",
        "--launcher",
        "kubernetes",
        "--manifests",
        str(manifests),
        "--agents",
        "fake",
        "--workloads",
        "gemm",
        "--phases",
        "infer",
        "--batch-sizes",
        "1",
        "--store",
        str(tmp_path / "store.sqlite"),
        "--out",
        str(tmp_path / "run"),
        *extra,
    ]


def _gone(pids: list[int]) -> bool:
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        return False
    return True


def test_agents_run_as_pods_and_nothing_outlives_the_run(
    kube: FakeKube, fake_manifests: Path, tmp_path: Path
) -> None:
    command = _command(
        tmp_path,
        fake_manifests,
        "--batch-sizes",
        "1,2",
        "--k8s",
        "namespace=bench",
        "--k8s",
        "cpus=2",
        "--agent-env",
        "FWBENCH_TEST_SETTING=pod",
    )
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _, stderr = process.communicate(timeout=120)
    pid = process.pid
    assert process.returncode == 0, stderr
    rows = pd.read_parquet(tmp_path / "run" / "results.parquet")
    assert len(rows) == 2
    assert set(rows["status"]) == {"ok"} and set(rows["launcher"]) == {"kubernetes"}
    assert set(rows["node"]) == {"fake-node-1"}
    assert {json.loads(e)["FWBENCH_TEST_SETTING"] for e in rows["environment"]} == {"pod"}
    (job,) = set(rows["scheduler_job"])
    assert job.startswith("kubernetes:bench/fwbench-")
    meta = json.loads((tmp_path / "run" / "run.json").read_text())["agents"]["fake"]
    # An idle pod holds its requests: the agent described itself in a Job of its own, given
    # back before its cells came in the next (one at a time, as on Slurm).
    assert meta["described_only"]
    assert meta["kubernetes_job"] != job.removeprefix("kubernetes:")
    assert meta["address"].startswith("127.0.0.") and not meta["address"].startswith("127.0.0.1:")
    assert meta["image"] == "fwbench/fake:latest"
    # The pods were created from the Jobs the launcher made, in the namespace asked for, and
    # everything went at the end: no object, no agent process.
    described, created = kube.created("jobs")
    assert f"{created['metadata']['namespace']}/{created['metadata']['name']}" == (
        job.removeprefix("kubernetes:")
    )
    assert described["metadata"]["name"] != created["metadata"]["name"]
    assert created["metadata"]["namespace"] == "bench"
    assert created["metadata"]["annotations"]["fwbench.io/collector"].endswith(":" + str(pid))
    (container,) = created["spec"]["template"]["spec"]["containers"]
    assert container["image"] == "fwbench/fake:latest"
    assert container["resources"]["limits"]["cpu"] == "2"
    assert check_restricted([created]) == []  # the "restricted" Pod Security level
    policies = kube.created("networkpolicies")  # the agent's ports: the world's, the collector's
    assert policies[-1]["metadata"]["name"] == created["metadata"]["name"]
    env = list(kube.environments.values())[-1]
    assert env["FWBENCH_ORPHAN_SECONDS"] == "30"  # the agent ends itself if the collector dies
    # The pod's log went with it; the run folder kept a copy.
    log = (tmp_path / "run" / "logs" / "fake.log").read_text()
    assert log.startswith("--- pod bench/fwbench-") and "fwbench-agent fake serving on" in log
    assert kube.left() == []
    assert kube.running() == []


def test_an_image_that_cannot_be_pulled_is_refused_with_kubernetes_reason(
    kube: FakeKube, fake_manifests: Path, tmp_path: Path
) -> None:
    command = _command(tmp_path, fake_manifests, "--k8s", "registry=nowhere.example/")
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    said = done.stderr.replace("\n", " ")
    assert "ErrImagePull" in said and "nowhere.example/fwbench/fake:latest" in said, said
    assert kube.left() == []


def test_a_killed_collectors_agent_ends_itself_and_the_next_run_deletes_its_objects(
    kube: FakeKube, fake_manifests: Path, tmp_path: Path
) -> None:
    long = _command(tmp_path, fake_manifests, "--param", "m=20000", "--min-seconds", "300")
    env = {**os.environ, "FWBENCH_ORPHAN_SECONDS": str(ORPHAN_SECONDS)}
    process = subprocess.Popen(long, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (tmp_path / "run" / "run.json").exists():  # written once the agent is up
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.2)
    time.sleep(2.0)  # mid-cell
    agents = kube.running()
    assert len(agents) == 1
    os.kill(process.pid, signal.SIGKILL)
    process.wait()
    killed = time.monotonic()
    while not _gone(agents) and time.monotonic() - killed < ORPHAN_SECONDS + 20:
        time.sleep(0.5)
    assert _gone(agents), "the agent outlived its collector"
    assert time.monotonic() - killed > ORPHAN_SECONDS / 2  # it ended itself, no one stopped it
    assert {name.partition("/")[0] for name in kube.left()} == {
        "jobs",
        "services",
        "networkpolicies",
        "pods",
        "secrets",
    }
    (tmp_path / "again").mkdir()
    done = subprocess.run(
        _command(tmp_path / "again", fake_manifests), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert kube.left() == []  # the orphan's objects deleted, the new run's own too


def test_a_pod_never_scheduled_is_refused_at_the_start_timeout_with_the_schedulers_reason(
    kube: FakeKube, fake_manifests: Path, tmp_path: Path
) -> None:
    command = _command(tmp_path, fake_manifests, "--k8s", "cpus=1000", "--start-timeout", "3")
    started = time.monotonic()
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    said = done.stderr.replace("\n", " ")
    assert "not running by the start timeout" in said, said
    assert "Unschedulable: 0/1 nodes are available: 1 Insufficient cpu." in said, said
    assert time.monotonic() - started > 3
    assert kube.left() == []


def test_a_pod_that_fails_is_refused_with_its_exit_and_log(
    kube: FakeKube, fake_manifests: Path, tmp_path: Path
) -> None:
    # The container runs (the pod is Running), then the agent fails before it serves.
    crash = "import sys, time; print('agent: no plugin named fake', flush=True); "
    crash += "time.sleep(1); sys.exit(3)"
    kube.images["broken/fwbench/fake:latest"] = Image([sys.executable, "-c", crash])
    command = _command(tmp_path, fake_manifests, "--k8s", "registry=broken/")
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr
    said = done.stderr.replace("\n", " ")
    assert "Error (exit code 3); last log line: agent: no plugin named fake" in said, said
    assert "agent: no plugin named fake" in (tmp_path / "run" / "logs" / "fake.log").read_text()
    assert kube.left() == []


def test_ctrl_c_deletes_the_runs_objects(
    kube: FakeKube, fake_manifests: Path, tmp_path: Path
) -> None:
    long = _command(tmp_path, fake_manifests, "--param", "m=20000", "--min-seconds", "60")
    process = subprocess.Popen(with_sigint(long), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not (tmp_path / "run" / "run.json").exists():
        if process.poll() is not None or time.monotonic() > deadline:
            _, stderr = process.communicate(timeout=60)  # read and closed: said, not leaked
            pytest.fail(f"the run ended ({process.returncode}) before it began:\n{stderr}")
        time.sleep(0.2)
    time.sleep(1.0)
    assert kube.running()
    process.send_signal(signal.SIGINT)
    process.communicate(timeout=60)
    assert process.returncode != 0
    assert kube.left() == [] and kube.running() == []


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (("--k8s", "nodes=3"), "unknown --k8s key 'nodes'"),
        (("--k8s", "cpus=half"), "--k8s cpus=half: expected whole CPUs"),
        (("--k8s", "namespace"), "--k8s namespace needs a value"),
    ],
)
def test_bad_k8s_settings_are_refused_before_anything_is_created(
    kube: FakeKube, fake_manifests: Path, tmp_path: Path, extra: tuple[str, ...], said: str
) -> None:
    done = subprocess.run(
        _command(tmp_path, fake_manifests, *extra), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    assert said in done.stderr.replace("\n", " ")
    assert kube.requests == []


def test_an_api_server_that_cannot_be_reached_is_said_in_one_line(
    fake_manifests: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with socket.socket() as probe:  # a port nobody listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}"
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig(url, tmp_path / "kubeconfig")))
    done = subprocess.run(
        _command(tmp_path, fake_manifests), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 2, done.stderr
    assert f"the Kubernetes API at {url} answered no list of Jobs" in done.stderr
    assert "Connection refused" in done.stderr and len(done.stderr.splitlines()) == 1


def test_k8s_settings_need_the_kubernetes_launcher(fake_manifests: Path, tmp_path: Path) -> None:
    command = _command(tmp_path, fake_manifests, "--k8s", "namespace=bench")
    command[command.index("kubernetes")] = "local"
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert "--k8s settings go with --launcher kubernetes" in done.stderr


def test_a_world_is_one_indexed_job_whose_pods_are_its_ranks(
    kube: FakeKube, fake_manifests: Path, tmp_path: Path
) -> None:
    command = _command(
        tmp_path, fake_manifests, "--world-sizes", "2", "--phases", "train", "--iterations", "4"
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    (row,) = pd.read_parquet(tmp_path / "run" / "results.parquet").to_dict("records")
    assert (row["status"], row["world_size"], row["world_placement"]) == ("ok", 2, "kubernetes")
    assert row["scheduler_job"].startswith("kubernetes:default/") and row["node"] == "fake-node-1"
    meta = json.loads((tmp_path / "run" / "run.json").read_text())["agents"]["fake~w2"]
    assert len({rank["address"] for rank in meta["ranks"]}) == 2
    # Both ranks: one Job; one to describe the world, given back, and one to measure it.
    jobs = kube.created("jobs")
    assert len(jobs) == 2 and {job["spec"]["completions"] for job in jobs} == {2}
    measured = jobs[-1]["metadata"]["name"]
    assert row["scheduler_job"] == f"kubernetes:default/{measured}"
    # Each rank was told its index (the completion index) and rank 0's address: its pod
    # hostname JOB-0.SERVICE, which the fake DNS resolved to rank 0's pod IP.
    envs = sorted(
        (env for pod, env in kube.environments.items() if pod.startswith(measured)),
        key=lambda env: env["RANK"],
    )
    assert [env["RANK"] for env in envs] == ["0", "1"]
    assert {env["WORLD_SIZE"] for env in envs} == {"2"}
    assert {env["MASTER_ADDR"] for env in envs} == {envs[0]["FWBENCH_HOST"]}
    assert envs[0]["FWBENCH_HOST"] != envs[1]["FWBENCH_HOST"]
    for rank in (0, 1):  # each rank's pod log, kept in the run folder
        log = (tmp_path / "run" / "logs" / f"fake~w2-rank{rank}-threads1.log").read_text()
        assert "fwbench-agent fake serving on" in log, log
    assert kube.left() == [] and kube.running() == []
    assert check_restricted(kube.created("jobs")) == []  # the "restricted" Pod Security level


def test_worlds_of_one_pod_are_worlds_too(
    kube: FakeKube, fake_manifests: Path, tmp_path: Path
) -> None:
    """--world-sizes 1,1x2: each a Job of one pod told it is rank 0 of a world of one (not an
    agent alone), the second also that it has two devices."""
    command = _command(
        tmp_path, fake_manifests, "--world-sizes", "1,1x2", "--phases", "train", "--iterations", "3"
    )
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    rows = pd.read_parquet(tmp_path / "run" / "results.parquet").set_index("agent")
    assert set(rows["status"]) == {"ok"} and set(rows["world_size"]) == {1}
    assert rows.loc["fake~w1x2", "local_devices"] == 2 and rows.loc["fake~w1", "local_devices"] == 1
    # Each world described itself in a pod, given back, and measured in another.
    devices = sorted(env.get("FWBENCH_LOCAL_DEVICES", "") for env in kube.environments.values())
    assert devices == ["", "", "2", "2"]
    assert {env["WORLD_SIZE"] for env in kube.environments.values()} == {"1"}
    assert kube.left() == [] and kube.running() == []


@pytest.mark.agent
@pytest.mark.full  # make test: the fake agent's worlds here, torch's DDP through Slurm and locally
def test_a_torch_world_meets_through_the_services_pod_hostnames(
    kube: FakeKube, torch_image: None, tmp_path: Path
) -> None:
    """PyTorch's ranks find rank 0 by its pod hostname (MASTER_ADDR = JOB-0.SERVICE, resolved
    by the fake DNS) and run gloo's allreduce across their pods."""
    command = [
        str(COLLECTOR),
        "run",
        "--launcher",
        "kubernetes",
        "--agents",
        "torch-cpu",
        "--workloads",
        "allreduce",
        "--phases",
        "train",
        "--batch-sizes",
        "8",
        "--world-sizes",
        "2",
        "--iterations",
        "3",
        "--store",
        str(tmp_path / "store.sqlite"),
        "--out",
        str(tmp_path / "run"),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    (row,) = pd.read_parquet(tmp_path / "run" / "results.parquet").to_dict("records")
    assert (row["status"], row["world_size"], row["dist_backend"]) == ("ok", 2, "gloo")
    assert row["world_placement"] == "kubernetes" and row["launcher"] == "kubernetes"
    assert kube.left() == [] and kube.running() == []


def test_agent_pods_demand_the_runs_token_which_only_a_secret_holds(
    kube: FakeKube, fake_manifests: Path, tmp_path: Path
) -> None:
    """Agent pods listen on their pod's addresses: only the run's token opens them, over TLS
    with the run's own certificate (a plaintext caller is refused, the token's too). Both reach
    the pod through a Secret mounted as files, never as a literal in a Job's spec or in a
    variable."""
    from fwbench.collector.agents.manifest import discover_manifests
    from fwbench.collector.agents.specs import Instance
    from fwbench.collector.images.build import image_tag
    from fwbench.collector.launchers import LaunchSettings
    from fwbench.collector.launchers.kubernetes import KubernetesLauncher
    from fwbench.spec.metadata import TOKEN_FILE_VARIABLE, TOKEN_VARIABLE
    from fwbench.spec.startup import TLS_KEY

    manifest = discover_manifests([fake_manifests])["fake"]
    settings = LaunchSettings(run_id="tokens", log_dir=tmp_path, image_tag=image_tag)
    launcher = KubernetesLauncher(settings)
    try:
        handle = launcher.start(manifest, Instance("fake"), 0)
        refuse_strangers(handle.address, launcher._security)
        assert handle.client.describe().identity.name == "fake"
        (secret,) = kube.created("secrets")
        (job,) = kube.created("jobs")
        (volume,) = job["spec"]["template"]["spec"]["volumes"]
        assert volume["secret"]["secretName"] == secret["metadata"]["name"]
        (env,) = kube.environments.values()
        assert TOKEN_VARIABLE not in env  # the token is in no variable
        token = Path(env[TOKEN_FILE_VARIABLE]).read_text()  # the fake kubelet's mount
        assert token and token not in json.dumps(job)
        assert oct(Path(env[TOKEN_FILE_VARIABLE]).stat().st_mode & 0o777) == "0o440"
        key = Path(env[TLS_KEY]).read_text()
        assert "PRIVATE KEY" in key and key not in json.dumps(job)
        assert oct(Path(env[TLS_KEY]).stat().st_mode & 0o777) == "0o440"
    finally:
        launcher.close()
    assert kube.left() == []  # the Secret went with the run's other objects


def test_a_model_file_is_sent_to_the_pods_which_do_not_see_this_hosts_files(
    kube: FakeKube, fake_manifests: Path, tmp_path: Path
) -> None:
    """A pod runs on a node that does not see the collector's files: the reference's pod,
    woken after it described itself, and the measuring pod are each sent the file
    (UploadModel), which they keep by digest in their own folder."""
    model = tmp_path / "net.onnx"
    model.write_text(
        json.dumps({"inputs": [{"name": "x", "shape": [None, 3], "dtype": "float32"}], "scale": 2})
    )
    kept = tmp_path / "pod-uploads"
    command = _command(tmp_path, fake_manifests, "--model", str(model), "--min-seconds", "0.05")
    command.remove("--workloads")
    command.remove("gemm")
    for setting in ("FAKE_MODEL_FORMATS=onnx", f"FWBENCH_UPLOAD_DIR={kept}"):
        command += ["--agent-env", setting]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = pd.read_parquet(tmp_path / "run" / "results.parquet")
    assert set(rows["status"]) == {"ok"} and set(rows["launcher"]) == {"kubernetes"}
    assert rows["outputs_match"].all()
    assert "net.onnx to fake, which does not see this host's files: " in done.stderr
    assert (kept / model_files.digest(model) / "net.onnx").read_bytes() == model.read_bytes()
    assert kube.left() == [] and kube.running() == []
