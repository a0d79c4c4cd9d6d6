"""`collector run --agent-env NAME=VALUE`: variables every agent the run starts gets (an
allocator, thread or compiler setting: LD_PRELOAD, MALLOC_ARENA_MAX, OMP_NUM_THREADS,
XLA_FLAGS), the same for every agent so the comparison stays fair, and checked: each agent's
own process must report them back (the runtime reports what REPORT_VARIABLE names), so every
row records them as the agent saw them.

Refused: variables the collector sets itself (threads, CPUs, a world's rendezvous, ports,
identity, credentials) and variables an agent's manifest sets (TF_ENABLE_ONEDNN_OPTS is what
makes tf-eigen tf-eigen: overriding it would mislabel every row of that agent)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

from fwbench.collector.agents.manifest import AgentManifest
from fwbench.collector.agents.security import AGENT_VARIABLES
from fwbench.collector.agents.specs import AgentSpecError, Instance
from fwbench.spec import startup

REPORT_VARIABLE = startup.REPORT_VARIABLES  # runtime/hostinfo.py reads it
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# What the collector or the agent's own start sets, with the option a user sets it by.
RESERVED = {
    startup.THREADS: "--threads",
    startup.CPUS: "--world-sizes (each rank's CPUs) or --cpuset",
    startup.LOCAL_DEVICES: "--world-sizes 1xD",
    startup.PEERS: "--world-sizes",
    startup.DIST_BACKEND: "--world-sizes",
    startup.DIST_TIMEOUT_SECONDS: "--world-sizes",
    "RANK": "--world-sizes",
    "LOCAL_RANK": "--world-sizes",
    "WORLD_SIZE": "--world-sizes",
    "MASTER_ADDR": "--world-sizes",
    "MASTER_PORT": "--world-sizes",
    startup.HOST: "the launcher",
    startup.GRPC_PORT: "the launcher",
    startup.METRICS_PORT: "the launcher",
    startup.ORPHAN_SECONDS: "the collector's own environment",
    startup.AGENT_NAME: "the agent's manifest (its identity)",
    startup.PLUGIN: "the agent's manifest (its identity)",
    startup.VARIANT: "the agent's manifest (its identity)",
    REPORT_VARIABLE: "--agent-env itself",
    startup.TLS_SERVER_NAME: "--tls-* (docs/security.md)",
    **{name: "--agent-token-file and --tls-* (docs/security.md)" for name in AGENT_VARIABLES},
}


def parse_agent_environment(items: Iterable[str]) -> dict[str, str]:
    """NAME=VALUE items as a mapping; raises AgentSpecError for a malformed, repeated or
    reserved name."""
    variables: dict[str, str] = {}
    for item in items:
        name, equals, value = item.partition("=")
        if not equals or not _NAME.fullmatch(name):
            raise AgentSpecError(
                f"--agent-env {item!r}: give NAME=VALUE, NAME of letters, digits and _ "
                "(e.g. MALLOC_ARENA_MAX=1)"
            )
        if "\0" in value:
            raise AgentSpecError(f"--agent-env {name}: a value cannot hold a NUL character")
        if name in RESERVED:
            raise AgentSpecError(
                f"--agent-env {name}: the collector sets {name} itself; use {RESERVED[name]}"
            )
        if name in variables and variables[name] != value:
            raise AgentSpecError(
                f"--agent-env {name} given twice, {variables[name]!r} and {value!r}"
            )
        variables[name] = value
    return variables


def check_against(
    variables: Mapping[str, str],
    attached: Iterable[str],
    manifests: Iterable[AgentManifest],
) -> None:
    """Refuses --agent-env with agents the collector does not start (`attached`: their specs)
    and variables an agent's manifest sets."""
    if not variables:
        return
    for spec in attached:
        raise AgentSpecError(
            f"--agent-env sets variables in the agents the collector starts; {spec} is "
            "attached (started elsewhere), so its rows would not have them: set them where it "
            "runs, in a run of its own"
        )
    for manifest in manifests:
        for name in sorted(set(variables) & set(manifest.env)):
            raise AgentSpecError(
                f"--agent-env {name}: agent {manifest.name}'s manifest sets "
                f"{name}={manifest.env[name]!r}, part of what that agent is; declare an agent "
                "of its own for another value (docs/writing-an-agent.md)"
            )


def agent_environment(
    items: Iterable[str], instances: Iterable[Instance], declared: Mapping[str, AgentManifest]
) -> dict[str, str]:
    """--agent-env's items for a run of `instances` (checked: parse_agent_environment and
    check_against)."""
    variables = parse_agent_environment(items)
    instances = list(instances)
    attached = [instance.spec for instance in instances if instance.attached]
    names = {instance.agent for instance in instances if not instance.attached}
    check_against(
        variables, attached, [declared[name] for name in sorted(names) if name in declared]
    )
    return variables


def for_agents(variables: Mapping[str, str]) -> dict[str, str]:
    """What a launcher adds to an agent's environment: the variables, and their names for the
    agent to report back."""
    if not variables:
        return {}
    return {**variables, REPORT_VARIABLE: ",".join(sorted(variables))}


def check_reported(name: str, variables: Mapping[str, str], reported: Mapping[str, str]) -> None:
    """Refuses (AgentSpecError) an agent whose own process does not report every --agent-env
    variable with its value: its rows would claim a setting it did not run with."""
    wrong = {k: v for k, v in variables.items() if reported.get(k) != v}
    if not wrong:
        return
    if not any(k in reported for k in variables):
        why = (
            "it reports none of them: its runtime predates --agent-env (rebuild its environment "
            "or image: `collector images build`) or its start drops the collector's variables"
        )
    else:
        why = "something in its start (an image's entrypoint, an activation script) changed them"
    told = ", ".join(f"{k}={reported.get(k, '(unset)')!r} not {v!r}" for k, v in wrong.items())
    raise AgentSpecError(f"agent {name} does not run with --agent-env ({told}): {why}")
