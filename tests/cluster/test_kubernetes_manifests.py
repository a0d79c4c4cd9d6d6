"""`collector k8s render`: the manifests for one agent and for a 2-rank world validate offline
against Kubernetes' own API schemas (kubernetes-validate bundles them; strict: no unknown
field passes), and say what a rank needs: torchrun's variables with the rank from the Indexed
Job's completion index, rank 0's stable hostname under the headless Service, whole-core CPU
requests equal to limits, GPUs for CUDA agents, scrape annotations and the run's labels. Every
pod meets the "restricted" Pod Security Standard (pod_security.py) and mounts no service-account
token; names never collide, however long the run id."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import kubernetes_validate
import pytest
import yaml
from pod_security import check_restricted

COLLECTOR = Path(sys.executable).with_name("collector")
# The oldest release checked and the newest whose schemas ship with kubernetes-validate (a
# newer kubernetes-validate brings the newer schemas in).
KUBERNETES = ("1.33.0", kubernetes_validate.latest_version())


def validate(obj: dict) -> None:
    """Strictly (no unknown field passes), against every release of KUBERNETES, offline."""
    for version in KUBERNETES:
        kubernetes_validate.validate(obj, version, strict=True)


def _render(*args: str) -> list[dict]:
    done = subprocess.run(
        [str(COLLECTOR), "k8s", "render", *args], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    return list(yaml.safe_load_all(done.stdout))


def _env(job: dict) -> dict[str, object]:
    (container,) = job["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


@pytest.mark.parametrize("world_sizes", ["", "1", "2", "1,2"])
def test_every_object_validates_strictly_offline_and_is_restricted(world_sizes: str) -> None:
    sizes = ("--world-sizes", world_sizes) if world_sizes else ()
    objects = _render(
        "--agents", "torch-cpu,tf-mkl,torch-cu12", *sizes, "--run-id", "r1", "--cpus", "2"
    )
    assert len(objects) == 3 * 3 * len(world_sizes.split(","))
    for obj in objects:
        validate(obj)
    assert check_restricted(objects) == []


def test_the_restricted_check_finds_what_the_profile_forbids() -> None:
    """The check itself: a pod as Kubernetes' defaults leave it fails on each control."""
    *_, job = _render("--agents", "torch-cpu")
    spec = job["spec"]["template"]["spec"]
    del spec["securityContext"], spec["automountServiceAccountToken"]
    spec["containers"][0]["securityContext"] = {"capabilities": {"add": ["SYS_ADMIN"]}}
    spec["hostNetwork"] = True
    spec["volumes"] = [{"name": "h", "hostPath": {"path": "/"}}]
    found = "\n".join(check_restricted([job]))
    for control in (
        "hostNetwork",
        "hostPath",
        "allowPrivilegeEscalation",
        "drop ALL",
        "SYS_ADMIN",
        "runAsNonRoot",
        "seccomp",
        "service-account token",
    ):
        assert control in found, (control, found)


def test_alone_by_default_and_a_world_of_one_told_its_rank() -> None:
    """Without --world-sizes each agent is alone, as `collector run` starts one; with
    --world-sizes 1 its pod is rank 0 of a world of one, as in a run's world of one."""
    *_, alone = _render("--agents", "torch-cpu")
    *_, world = _render("--agents", "torch-cpu", "--world-sizes", "1")
    assert "WORLD_SIZE" not in _env(alone) and "RANK" not in _env(alone)
    assert _env(world)["WORLD_SIZE"] == "1" and "job-completion-index" in str(_env(world)["RANK"])
    assert _env(alone)["HOME"] == _env(world)["HOME"] == "/tmp"  # a user with no home


def test_names_never_collide_however_long_the_run_id() -> None:
    """Two run ids that differ only past DNS's 63 characters: distinct names and run labels,
    each a valid DNS label (they used to be cut to the same name, and one run's clean-up
    selected the other's objects)."""
    stem = "nightly-" + "x" * 70
    first = _render("--agents", "torch-cpu", "--world-sizes", "2", "--run-id", stem + "-a")
    second = _render("--agents", "torch-cpu", "--world-sizes", "2", "--run-id", stem + "-b")
    names = {obj["metadata"]["name"] for obj in first} | {o["metadata"]["name"] for o in second}
    assert len(names) == 2 and all(len(name) <= 56 for name in names), names
    runs = {obj["metadata"]["labels"]["fwbench.io/run"] for obj in first + second}
    assert len(runs) == 2 and all(len(label) <= 63 for label in runs), runs
    for obj in first + second:
        validate(obj)


def test_a_world_meets_at_rank_zeros_stable_hostname() -> None:
    service, policy, job = _render("--agents", "torch-cpu", "--world-sizes", "2", "--run-id", "r1")
    name = job["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None" and service["metadata"]["name"] == name
    # Its NetworkPolicy: the ranks reach each other on every port; anyone else only the agent's
    # gRPC (token-guarded) and metrics ports (no collector CIDR given: any source).
    assert (policy["kind"], policy["metadata"]["name"]) == ("NetworkPolicy", name)
    ranks, collector = policy["spec"]["ingress"]
    assert policy["spec"]["podSelector"] == ranks["from"][0]["podSelector"]
    assert ranks["from"][0]["podSelector"]["matchLabels"] == {"job-name": name}
    assert "ports" not in ranks and "from" not in collector
    assert sorted(p["port"] for p in collector["ports"]) == [9101, 50051]
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 2, 2)
    assert spec["template"]["spec"]["subdomain"] == name
    env = _env(job)
    assert env["WORLD_SIZE"] == "2" and env["MASTER_ADDR"] == f"{name}-0.{name}"
    assert "job-completion-index" in str(env["RANK"])
    assert env["FWBENCH_PEERS"] == f"{name}-0.{name}:29501,{name}-1.{name}:29501"
    labels = spec["template"]["metadata"]["labels"]
    assert labels["fwbench.io/run"] == "r1" and labels["fwbench.io/agent"] == "torch-cpu"
    annotations = spec["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"


def test_resources_are_guaranteed_whole_cores_and_gpus_for_cuda_agents() -> None:
    *_, job = _render("--agents", "torch-cu12", "--cpus", "4", "--memory", "8Gi")
    (container,) = job["spec"]["template"]["spec"]["containers"]
    resources = container["resources"]
    assert resources["requests"] == resources["limits"]  # Guaranteed QoS: static CPU manager
    assert resources["limits"] == {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}
    assert "WORLD_SIZE" not in _env(job) and _env(job)["FWBENCH_THREADS"] == "4"
    validate(job)


def test_a_pod_monitor_selects_the_runs_agents() -> None:
    *_, monitor = _render("--agents", "torch-cpu", "--run-id", "r1", "--pod-monitor")
    assert (monitor["apiVersion"], monitor["kind"]) == ("monitoring.coreos.com/v1", "PodMonitor")
    assert monitor["spec"]["selector"]["matchLabels"] == {"fwbench.io/run": "r1"}
    assert monitor["spec"]["podMetricsEndpoints"][0]["port"] == "metrics"


def test_unknown_agents_and_sizes_are_refused() -> None:
    cases = (
        (("--agents", "nope"), "unknown agent"),
        (("--agents", "torch-cpu", "--world-sizes", "0"), "invalid world size"),
    )
    for args, said in cases:
        done = subprocess.run(
            [str(COLLECTOR), "k8s", "render", *args], capture_output=True, text=True, timeout=120
        )
        assert done.returncode == 2 and said in done.stderr


def test_the_launchers_token_secret_and_the_pods_reference_to_it_validate() -> None:
    """What `--launcher kubernetes` adds to the rendered objects: the run's token Secret with
    the agents' TLS pair, mounted in each agent's pod as files the pod's group alone reads,
    which the agent's variables name; readiness by TCP (the kubelet's gRPC probe cannot speak
    TLS); still restricted. Rendered agents keep the gRPC probe."""
    from fwbench.collector.agents.manifest import discover_manifests, manifest_dirs
    from fwbench.collector.agents.run_tls import RunCredentials
    from fwbench.collector.launchers.kubernetes_objects import (
        PodShape,
        token_secret,
        world_objects,
    )

    manifest = discover_manifests(manifest_dirs())["torch-cpu"]
    made = RunCredentials.make("r1")
    secret = token_secret(
        "fwbench-r1-token",
        "r1",
        made.token,
        "bench",
        {"fwbench.io/c": "h:1"},
        (made.cert, made.key),
    )
    assert secret["stringData"] == {
        "token": made.token,
        "tls.crt": made.cert.decode(),
        "tls.key": made.key.decode(),
    }
    objects = world_objects(
        manifest, "img", "r1", 2, PodShape(), "bench", token_secret="fwbench-r1-token"
    )
    for obj in (secret, *objects):
        validate(obj)
    env = _env(objects[-1])
    assert env["FWBENCH_AGENT_TOKEN_FILE"] == "/var/run/secrets/fwbench/token"
    assert env["FWBENCH_TLS_CERT"] == "/var/run/secrets/fwbench/tls.crt"
    assert env["FWBENCH_TLS_KEY"] == "/var/run/secrets/fwbench/tls.key"
    assert "FWBENCH_AGENT_TOKEN" not in env
    (container,) = objects[-1]["spec"]["template"]["spec"]["containers"]
    assert container["readinessProbe"]["tcpSocket"] == {"port": manifest.grpc_port}
    (rendered,) = world_objects(manifest, "img", "r1", 1, PodShape(), "bench")[-1]["spec"][
        "template"
    ]["spec"]["containers"]
    assert rendered["readinessProbe"]["grpc"] == {"port": manifest.grpc_port}
    spec = objects[-1]["spec"]["template"]["spec"]
    (volume,) = spec["volumes"]
    assert volume["secret"] == {"secretName": "fwbench-r1-token", "defaultMode": 0o440}
    (mount,) = spec["containers"][0]["volumeMounts"]
    assert (mount["mountPath"], mount["readOnly"]) == ("/var/run/secrets/fwbench", True)
    assert spec["securityContext"]["fsGroup"] == spec["securityContext"]["runAsUser"]
    assert check_restricted(objects) == []


def test_scheduling_network_and_queue_options_reach_every_world() -> None:
    """`--k8s` of `collector run --launcher kubernetes`, also taken by render: node selector,
    tolerations, pull secrets, /dev/shm, a Kueue queue (gang admission), the collector's CIDR;
    everything still validates strictly and is restricted; a malformed one is refused."""
    objects = _render(
        "--agents",
        "torch-cpu",
        "--world-sizes",
        "2",
        "--run-id",
        "r1",
        "--k8s",
        "node_selector=pool=bench,zone=a",
        "--k8s",
        "tolerations=dedicated=bench:NoSchedule,gpu:NoExecute",
        "--k8s",
        "pull_secrets=regcred",
        "--k8s",
        "shm=2Gi",
        "--k8s",
        "queue=bench-queue",
        "--k8s",
        "collector_cidrs=10.0.0.5/32",
    )
    _, policy, job = objects
    spec = job["spec"]["template"]["spec"]
    assert spec["nodeSelector"] == {"pool": "bench", "zone": "a"}
    assert spec["tolerations"] == [
        {"key": "dedicated", "operator": "Equal", "value": "bench", "effect": "NoSchedule"},
        {"key": "gpu", "operator": "Exists", "effect": "NoExecute"},
    ]
    assert spec["imagePullSecrets"] == [{"name": "regcred"}]
    (shm,) = spec["volumes"]
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "2Gi"}
    assert {"name": "shm", "mountPath": "/dev/shm"} in spec["containers"][0]["volumeMounts"]
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "bench-queue"
    _, collector = policy["spec"]["ingress"]
    assert collector["from"][0] == {"ipBlock": {"cidr": "10.0.0.5/32"}}
    for obj in objects:
        validate(obj)
    assert check_restricted(objects) == []
    no_policy = _render("--agents", "torch-cpu", "--k8s", "network_policy=off")
    assert [obj["kind"] for obj in no_policy] == ["Service", "Job"]
    refused = {
        "tolerations=gpu": "KEY[=VALUE]:EFFECT",
        "node_selector=pool": "LABEL=VALUE",
        "network_policy=maybe": "on or off",
        "namespace=x": "--namespace",
    }
    for bad, said in refused.items():
        command = [str(COLLECTOR), "k8s", "render", "--agents", "torch-cpu", "--k8s", bad]
        done = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and said in done.stderr, (bad, done.stderr)
