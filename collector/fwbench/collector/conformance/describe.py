"""Describe: the reply every other check builds on, held to agent.proto's rules: the major
version, identity, workloads and their limits against the catalogue, threads, host and
devices."""

from __future__ import annotations

import re

import grpc

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.agents.agent_environment import REPORT_VARIABLE
from fwbench.collector.conformance.suite import Check, Failed, Skipped, Target, call_failed
from fwbench.spec import SPEC_VERSION, spec_major
from fwbench.spec.enums import PHASE_VALUES

NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
PYTHON_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?")
MAX_THREADS = 1024
REQUIRED_IDENTITY = ("name", "framework", "framework_version", "variant")


def _call(target: Target) -> str:
    try:
        target.describe = target.client.describe_reply()
    except grpc.RpcError as error:
        raise call_failed("Describe failed", error) from None
    identity = target.describe.identity
    return f"{identity.name} ({identity.framework} {identity.framework_version})"


def _version(target: Target) -> str:
    version = target.described().spec_version
    try:
        major = spec_major(version)
    except ValueError as error:
        raise Failed(str(error)) from None
    if major != spec_major(SPEC_VERSION):
        raise Failed(
            f"spec_version {version} has major {major}; this collector speaks {SPEC_VERSION}"
        )
    return version


def _identity(target: Target) -> None:
    identity = target.described().identity
    empty = [f for f in REQUIRED_IDENTITY if not getattr(identity, f)]
    if empty:
        raise Failed(f"identity.{empty[0]} is empty (required: {', '.join(REQUIRED_IDENTITY)})")
    if not NAME.match(identity.name):
        raise Failed(f"identity.name {identity.name!r} is not lower-case letters, digits, ._-")
    if identity.family and (
        not NAME.match(identity.family) or identity.family == identity.framework
    ):
        raise Failed(
            f"identity.family {identity.family!r} must be lower-case letters, digits, ._- and "
            "another framework than the agent's own (empty when it is its own family)"
        )
    if identity.family_version and not identity.family:
        raise Failed("identity.family_version is set without identity.family")
    if identity.python_version and not PYTHON_VERSION.match(identity.python_version):
        raise Failed(f"identity.python_version {identity.python_version!r} is no version")
    if target.expected_name and identity.name != target.expected_name:
        raise Failed(
            f"identity.name is {identity.name!r}, not {target.expected_name!r} (the agent's "
            "manifest, or NAME@ of the target)"
        )
    return None


def _workloads(target: Target) -> str:
    workloads = target.described().workloads
    if not workloads:
        raise Failed("Describe declares no workload")
    names = [w.name for w in workloads]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise Failed(f"workload {twice[0]} is declared twice")
    unknown = [n for n in names if n not in target.catalogue.workloads and n not in target.extras]
    if unknown:
        raise Failed(
            f"workload {unknown[0]!r} is not in the catalogue (allow extras with --extra-workloads)"
        )
    return ", ".join(names)


def _enums(target: Target) -> None:
    for w in target.described().workloads:
        known = target.catalogue.workloads.get(w.name)
        allowed = {PHASE_VALUES[p] for p in known.phases} if known else set(PHASE_VALUES.values())
        if not w.phases or set(w.phases) - allowed:
            raise Failed(
                f"{w.name}: phases {list(w.phases)} are empty or not among "
                f"{sorted(allowed)} (the catalogue's, never PHASE_UNSPECIFIED)"
            )
        valid_dtypes = set(agent_pb2.DType.values()) - {agent_pb2.DTYPE_UNSPECIFIED}
        if not w.dtypes or set(w.dtypes) - valid_dtypes:
            raise Failed(f"{w.name}: dtypes {list(w.dtypes)} are empty or not DType values")
        modes = list(w.modes)
        if not modes or "" in modes or len(set(modes)) != len(modes):
            raise Failed(f"{w.name}: modes {modes} must be distinct non-empty names, at least one")
    return None


def _limits(target: Target) -> None:
    for w in target.described().workloads:
        known = target.catalogue.workloads.get(w.name)
        if known is None:
            continue
        if not 1 <= w.max_batch_size <= known.max_batch_size:
            raise Failed(
                f"{w.name}: max_batch_size {w.max_batch_size} is outside 1.."
                f"{known.max_batch_size} (the catalogue's)"
            )
        declared = {p.name: p for p in w.params}
        if set(declared) != set(known.params):
            raise Failed(
                f"{w.name}: params {sorted(declared)}; the catalogue's are {sorted(known.params)}"
            )
        for name, p in declared.items():
            spec = known.params[name]
            if not (spec.min <= p.min_value <= p.default_value <= p.max_value <= spec.max):
                raise Failed(
                    f"{w.name}: params.{name} {p.min_value}<={p.default_value}<="
                    f"{p.max_value} is not ordered within the catalogue's "
                    f"{spec.describe_range()}"
                )
            if p.multiple_of < 1 or p.multiple_of % spec.multiple_of:
                raise Failed(
                    f"{w.name}: params.{name} multiple_of {p.multiple_of} (catalogue "
                    f"{spec.multiple_of})"
                )
    return None


def _threads_and_host(target: Target) -> str:
    d = target.described()
    threads, host = d.threads, d.host
    if not 1 <= threads.intra_op_threads <= MAX_THREADS or threads.inter_op_threads > MAX_THREADS:
        raise Failed(
            f"threads {threads.intra_op_threads}/{threads.inter_op_threads} outside "
            f"1..{MAX_THREADS}"
        )
    if host.logical_cores < 1 or not 1 <= host.usable_cores <= host.logical_cores:
        raise Failed(f"host cores: {host.logical_cores} logical, {host.usable_cores} usable")
    if host.physical_cores > host.logical_cores:
        raise Failed(f"host has {host.physical_cores} physical > {host.logical_cores} logical")
    if host.memory_total_bytes <= 0 or not host.hostname or not host.os:
        raise Failed("host: memory_total_bytes, hostname and os are required")
    if not d.devices or any(dev.kind == agent_pb2.DEVICE_KIND_UNSPECIFIED for dev in d.devices):
        raise Failed("devices: at least one, none of kind DEVICE_KIND_UNSPECIFIED")
    if d.pid <= 0 or d.metrics_port > 65535:
        raise Failed(f"pid {d.pid} or metrics_port {d.metrics_port} out of range")
    return (
        f"{threads.intra_op_threads} intra-op threads"
        f"{' (fixed at start-up)' if threads.fixed_at_startup else ''}, "
        f"{host.usable_cores}/{host.logical_cores} cores"
    )


def _reasons(target: Target) -> str:
    """unsupported_reasons: keys "WORKLOAD" (not offered), "WORKLOAD/PHASE" (a catalogue phase
    of an offered workload, not offered) or "*/PHASE"; each reason one non-empty line."""
    d = target.described()
    offered = {w.name: {p for p in w.phases} for w in d.workloads}
    for key, reason in d.unsupported_reasons.items():
        workload, slash, phase = key.partition("/")
        known = target.catalogue.workloads.get(workload)
        if not reason.strip() or "\n" in reason:
            raise Failed(f"unsupported_reasons[{key!r}] must be one non-empty line")
        if workload == "*" and slash and phase in PHASE_VALUES:
            if any(PHASE_VALUES[phase] in phases for phases in offered.values()):
                raise Failed(f"unsupported_reasons[{key!r}]: yet a workload offers {phase}")
            continue
        if known is None:
            raise Failed(f"unsupported_reasons[{key!r}]: {workload!r} is no catalogue workload")
        if not slash and workload in offered:
            raise Failed(f"unsupported_reasons[{key!r}]: yet {workload} is offered")
        if slash and (
            phase not in known.phases
            or workload not in offered
            or PHASE_VALUES[phase] in offered[workload]
        ):
            raise Failed(
                f"unsupported_reasons[{key!r}]: must name a catalogue phase of an offered "
                "workload that is not offered"
            )
    return f"{len(d.unsupported_reasons)} reasons" if d.unsupported_reasons else "none given"


def _reported(target: Target) -> str:
    """Describe.environment has every variable FWBENCH_REPORT_VARIABLES names, as the agent's
    process has it: `collector run --agent-env` refuses an agent that does not report them."""
    wanted = target.reported_variables
    if not wanted:
        raise Skipped(
            "the agent runs elsewhere: give --agent-env NAME=VALUE for variables it was started "
            f"with, {REPORT_VARIABLE} naming them, to check that it reports them"
        )
    environment = target.described().environment
    wrong = {k: v for k, v in wanted.items() if environment.get(k) != v}
    if wrong:
        told = ", ".join(
            f"{k}={environment.get(k, '(absent)')!r}, not {v!r}" for k, v in wrong.items()
        )
        raise Failed(
            f"Describe.environment has {told}: agent.proto asks for every variable "
            f"{REPORT_VARIABLE} names ({','.join(sorted(wanted))}) as the agent's process has "
            "it, and `collector run --agent-env` refuses an agent that does not report them"
        )
    return f"{', '.join(sorted(wanted))} reported"


def describe_checks() -> list[Check]:
    return [
        ("Describe answers", _call),
        ("spec_version major", _version),
        ("identity", _identity),
        ("workloads are the catalogue's", _workloads),
        ("phases, dtypes, modes", _enums),
        ("batch and param limits within the catalogue's", _limits),
        ("threads, host, devices", _threads_and_host),
        ("unsupported reasons name what is not offered", _reasons),
        (f"environment reports {REPORT_VARIABLE}", _reported),
    ]
