"""A real multi-node Slurm cluster on one machine (tests/slurm/test_multinode.py): slurmctld on
this host and one slurmd per node, each node in network, UTS and mount namespaces of its own
(`ip netns`), with its own address on a private bridge, its own hostname, and the nodes' names
in its /etc/hosts (a file of the test's, mounted there). So a world's ranks on
two nodes reach each other over that network by name, as on a cluster, and the collector
reaches each node's agents at the node's address. The nodes share this machine's filesystem,
as a cluster's nodes share one (the agents' environments, the collector's scratch folder).

The bridge lives in a namespace of its own (the switch): traffic between two nodes crosses no
netfilter table but that namespace's, which is empty, whatever this host's firewall (Docker's
FORWARD policy is DROP) says. Each node declares one CPU, so a 2-task job spans both."""

from __future__ import annotations

import contextlib
import ipaddress
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

NODES = ("fwnode1", "fwnode2")
SWITCH = "fwbench-sw"
PREFIX = "fwbench-"  # of every namespace this module makes (and sweeps when left behind)
HOST_LINK = "fwbench0"  # this host's interface on the bridge
SUBNETS = ("10.213.0.0/24", "10.214.0.0/24", "172.31.213.0/24")


# What every test cluster sets alike (conftest.py's single node too): daemons as root, munge,
# no cgroups (processes tracked by their parents), cores as the unit of allocation, a node
# back in service as soon as it answers again.
SETTINGS = (
    "SlurmUser=root",
    "SlurmdUser=root",
    "AuthType=auth/munge",
    "CredType=cred/munge",
    "ProctrackType=proctrack/linuxproc",
    "TaskPlugin=task/none",
    "JobAcctGatherType=jobacct_gather/none",
    "SelectType=select/cons_tres",
    "SelectTypeParameters=CR_Core",
    "ReturnToService=2",
    "MpiDefault=none",
    "KillWait=5",
)


def free_port() -> int:
    """A port free on every address of this host now (the daemons' own)."""
    with socket.socket() as probe:
        probe.bind(("0.0.0.0", 0))
        return int(probe.getsockname()[1])


@dataclass(frozen=True)
class MultiNodeCluster:
    """SLURM_CONF of the cluster, and /etc/hosts for processes that must reach its nodes by name
    (the collector: run it under `resolving()`)."""

    conf: Path
    hosts: Path
    addresses: dict[str, str]

    def env(self) -> dict[str, str]:
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def resolving(self, command: list[str]) -> list[str]:
        """`command` run in a mount namespace of its own whose /etc/hosts names the nodes."""
        mount = f'mount --bind {self.hosts} /etc/hosts && exec "$@"'
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", mount, "sh", *command]


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True)
    assert done.returncode == 0, f"ip {' '.join(args)}: {done.stderr.strip()}"


def _namespaces() -> list[str]:
    done = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
    return [line.split()[0] for line in done.stdout.splitlines() if line.strip()]


def _subnet() -> ipaddress.IPv4Network:
    """The first private subnet no route of this host uses."""
    routes = subprocess.run(["ip", "-4", "route"], capture_output=True, text=True).stdout
    used = [word for line in routes.splitlines() for word in line.split()[:1] if "/" in word]
    for candidate in map(ipaddress.ip_network, SUBNETS):
        if not any(candidate.overlaps(ipaddress.ip_network(u, strict=False)) for u in used):
            return candidate
    raise AssertionError(f"every test subnet is routed here already: {routes}")


def sweep() -> None:
    """What an earlier session killed before its teardown left: its namespaces (their links go
    with them)."""
    for name in _namespaces():
        if name.startswith(PREFIX):
            for pid in subprocess.run(
                ["ip", "netns", "pids", name], capture_output=True, text=True
            ).stdout.split():
                with contextlib.suppress(ProcessLookupError, ValueError):
                    os.kill(int(pid), signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
    subprocess.run(["ip", "link", "del", HOST_LINK], capture_output=True)


def _network() -> tuple[str, dict[str, str]]:
    """The bridge, this host's link to it and each node's namespace; (this host's address on
    the bridge, {node: its address})."""
    subnet = _subnet()
    hosts = list(subnet.hosts())
    host_address = str(hosts[0])
    addresses = {node: str(hosts[10 + i]) for i, node in enumerate(NODES)}
    _ip("netns", "add", SWITCH)
    _ip("-n", SWITCH, "link", "add", "br0", "type", "bridge")
    _ip("-n", SWITCH, "link", "set", "br0", "up")
    _ip("link", "add", HOST_LINK, "type", "veth", "peer", "name", "up0", "netns", SWITCH)
    _ip("-n", SWITCH, "link", "set", "up0", "master", "br0", "up")
    _ip("addr", "add", f"{host_address}/{subnet.prefixlen}", "dev", HOST_LINK)
    _ip("link", "set", HOST_LINK, "up")
    for i, node in enumerate(NODES):
        namespace, port = f"{PREFIX}{node}", f"port{i}"
        _ip("netns", "add", namespace)
        _ip(
            "-n",
            SWITCH,
            "link",
            "add",
            port,
            "type",
            "veth",
            "peer",
            "name",
            "eth0",
            "netns",
            namespace,
        )
        _ip("-n", SWITCH, "link", "set", port, "master", "br0", "up")
        _ip("-n", namespace, "addr", "add", f"{addresses[node]}/{subnet.prefixlen}", "dev", "eth0")
        _ip("-n", namespace, "link", "set", "eth0", "up")
        _ip("-n", namespace, "link", "set", "lo", "up")
    return host_address, addresses


def _hosts_file(path: Path, host: str, host_address: str, addresses: dict[str, str]) -> None:
    lines = ["127.0.0.1 localhost", f"{host_address} {host}"]
    lines += [f"{address} {node}" for node, address in addresses.items()]
    path.write_text("\n".join(lines) + "\n")


def _config(folder: Path, host: str, host_address: str, addresses: dict[str, str]) -> str:
    nodes = [
        f"NodeName={node} NodeAddr={address} NodeHostname={node} CPUs=1 RealMemory=1000 "
        "State=UNKNOWN"
        for node, address in addresses.items()
    ]
    return "\n".join(
        [
            "ClusterName=fwbench-multi",
            f"SlurmctldHost={host}({host_address})",
            f"StateSaveLocation={folder}/state",
            f"SlurmdSpoolDir={folder}/spool-%n",
            f"SlurmctldPidFile={folder}/slurmctld.pid",
            f"SlurmdPidFile={folder}/slurmd-%n.pid",
            f"SlurmctldLogFile={folder}/slurmctld.log",
            f"SlurmdLogFile={folder}/slurmd-%n.log",
            f"SlurmctldPort={free_port()}",
            f"SlurmdPort={free_port()}",
            "SlurmdParameters=config_overrides",  # one CPU a node, whatever the host has
            *SETTINGS,
            *nodes,
            "PartitionName=nodes Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
        ]
    )


def _sinfo(env: dict[str, str]) -> list[str]:
    done = subprocess.run(
        ["sinfo", "-h", "-N", "-o", "%N %t"], capture_output=True, text=True, env=env
    )
    return done.stdout.split("\n")


@contextlib.contextmanager
def multinode_cluster(folder: Path) -> Iterator[MultiNodeCluster]:
    """The cluster, up until the block ends (munged must run already: conftest's _munge)."""
    sweep()
    host = socket.gethostname()
    try:
        host_address, addresses = _network()
        hosts = folder / "hosts"
        _hosts_file(hosts, host, host_address, addresses)
        (folder / "state").mkdir()
        conf = folder / "slurm.conf"
        conf.write_text(_config(folder, host, host_address, addresses) + "\n")
        cluster = MultiNodeCluster(conf, hosts, addresses)
        env = cluster.env()
        subprocess.run(["slurmctld", "-f", str(conf)], env=env, check=True)
        for node in NODES:
            (folder / f"spool-{node}").mkdir()
            # Not `ip netns exec`: it mounts a fresh /sys, without the cgroup file system
            # slurmd needs.
            start = (
                f"mount --bind {hosts} /etc/hosts && hostname {node} && "
                f"exec slurmd -N {node} -f {conf}"
            )
            subprocess.run(
                [
                    "nsenter",
                    f"--net=/run/netns/{PREFIX}{node}",
                    "unshare",
                    "--uts",
                    "--mount",
                    "--propagation",
                    "private",
                    "sh",
                    "-c",
                    start,
                ],
                env=env,
                check=True,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            states = [line.split()[-1] for line in _sinfo(env) if line.strip()]
            if len(states) == len(NODES) and set(states) == {"idle"}:
                break
            time.sleep(0.5)
        else:
            logs = "".join(p.read_text()[-1500:] for p in sorted(folder.glob("*.log")))
            raise AssertionError(f"the nodes did not come up: {_sinfo(env)}\n{logs}")
        yield cluster
    finally:
        subprocess.run(
            ["scancel", "--full", "-u", "root"],
            capture_output=True,
            env={**os.environ, "SLURM_CONF": str(folder / "slurm.conf")},
        )
        for pid_file in folder.glob("slurm*.pid"):
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid_file.read_text()), signal.SIGTERM)
        time.sleep(1.0)
        sweep()
