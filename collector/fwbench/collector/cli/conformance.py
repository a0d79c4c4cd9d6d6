"""`collector conformance TARGET`: the protocol conformance suite (docs/conformance.md) against
a running agent (HOST:PORT, or NAME@HOST:PORT, with the token and TLS options of `collector
run`) or a declared agent, started the way `collector run` starts it (--launcher)."""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from fwbench.collector.agents.launcher_kinds import LauncherKind
from fwbench.collector.cli.common import (
    ExitCode,
    JsonOutput,
    ManifestDirs,
    command_logs,
    console,
    errors,
    fail,
    known_errors,
    load_manifests,
    print_json,
    take_interrupts_once,
)
from fwbench.collector.cli.security import (
    AgentTokenFile,
    TlsCa,
    TlsCert,
    TlsKey,
    security_settings,
)
from fwbench.collector.conformance.choices import GROUPS, CellSet
from fwbench.spec import load_catalogue, startup

if TYPE_CHECKING:  # the suite (gRPC, the protocol) is imported where it runs: `--help` is fast
    from fwbench.collector.agents.manifest import AgentManifest
    from fwbench.collector.conformance.suite import Outcome
    from fwbench.collector.launchers import AgentHandle, Launcher

ATTACHED_NAME = "agent"  # the name a bare HOST:PORT target goes by
AgentEnv = Annotated[
    list[str] | None,
    typer.Option(
        "--agent-env",
        metavar="NAME=VALUE",
        help="A variable the agent must report back in Describe (repeatable): one the suite "
        "starts gets it (as with `collector run --agent-env`; the suite adds a probe of its "
        "own); for one running elsewhere, say what it was started with (with "
        f"{startup.REPORT_VARIABLES} naming it), or the check is skipped.",
    ),
]


def agent_spec(target: str, declared: dict[str, AgentManifest]) -> str:
    """TARGET as an `--agents` token: a declared name (or any token `collector run` takes) as
    given; a bare HOST:PORT as agent@HOST:PORT."""
    if target in declared or "@" in target:
        return target
    host, colon, port = target.rpartition(":")
    if colon and host and port.isdigit() and not set(host) & set("/="):
        return f"{ATTACHED_NAME}@{target}"
    return target


def expected_name(target: str, spec: str) -> str:
    """The name Describe must say: a declared agent's, or the NAME of NAME@HOST:PORT (as
    `collector run` requires); none for a bare HOST:PORT."""
    from fwbench.collector.agents.specs import base_name, parse_attached

    attached = parse_attached(spec)
    if attached is None:
        return base_name(spec)
    return attached[0] if "@" in target else ""


def interrupted(spec: str) -> str:
    """What an interrupt says of the agent: one the suite started is stopped (its launcher's
    handle); one running elsewhere (NAME@HOST:PORT, a bare HOST:PORT) is not the suite's to
    stop: its channel is closed, the agent left running."""
    from fwbench.collector.agents.specs import AgentSpecError, parse_attached

    try:
        attached = parse_attached(spec)
    except AgentSpecError:  # not an address after all: nothing reached
        return "interrupted"
    if attached is None:
        return "interrupted; the agent was stopped"
    return f"interrupted; the agent at {attached[1]} was left running"


def conformance(
    target: Annotated[
        str,
        typer.Argument(
            help="HOST:PORT (or NAME@HOST:PORT) of a running agent, or a declared agent name "
            "to start for the suite.",
            show_default=False,
        ),
    ],
    checks: Annotated[
        str, typer.Option(help=f"Comma-separated check groups: {', '.join(GROUPS)} (default all).")
    ] = "",
    cells: Annotated[
        CellSet,
        typer.Option(
            help="Cells run: each (every workload x phase once, and every dtype x mode of the "
            "cheapest workload), all (every workload x phase x dtype x mode), one (the "
            "cheapest workload alone)."
        ),
    ] = CellSet.EACH,
    extra_workloads: Annotated[
        str, typer.Option(help="Comma-separated workloads outside the catalogue to allow.")
    ] = "",
    cell_timeout: Annotated[
        float, typer.Option(min=1.0, help="Seconds one cell may take.")
    ] = 300.0,
    launcher: Annotated[
        LauncherKind, typer.Option(help="How a declared agent starts: local or docker.")
    ] = LauncherKind.LOCAL,
    start_timeout: Annotated[
        float, typer.Option(min=1.0, help="Seconds for the agent to become healthy.")
    ] = 180.0,
    agent_env: AgentEnv = None,
    as_json: JsonOutput = False,
    agent_token_file: AgentTokenFile = None,
    tls_ca: TlsCa = None,
    tls_cert: TlsCert = None,
    tls_key: TlsKey = None,
    manifests: ManifestDirs = None,
) -> None:
    """Check that an agent keeps the protocol: exit 0 when every check passes (or is skipped,
    with why), 3 when any fails."""
    from fwbench.collector.agents.image_labels import with_image_agents
    from fwbench.collector.agents.specs import Instance, one_agent, parse_attached, resolve_agents
    from fwbench.collector.conformance.plan import UnknownGroup, check_groups, run_suite
    from fwbench.collector.conformance.reach import attach_for_suite, suite_variables
    from fwbench.collector.conformance.suite import FAIL, Target
    from fwbench.collector.run.launch import launch_all, make_launcher
    from fwbench.collector.run.options import Launch, Limits, RunOptions
    from fwbench.collector.run.plan import split_list

    security = security_settings(agent_token_file, tls_ca, tls_cert, tls_key)
    declared = load_manifests(manifests)
    try:
        groups = check_groups(split_list(checks))
    except UnknownGroup as error:
        fail(str(error))
    spec = agent_spec(target, declared)
    take_interrupts_once()
    # What make_launcher reads of a run's options: the launcher and its start timeout (the
    # suite stores nothing: no output folder, no store).
    options = RunOptions(
        (), None, Path(), "", Limits(cell_timeout, start_timeout), launch=Launch(launcher)
    )
    agent_launcher: Launcher | None = None
    handle: AgentHandle | None = None
    with command_logs("conformance") as logs:
        try:
            with known_errors():
                if parse_attached(spec) is None:  # a name or an image reference (--launcher docker)
                    names, _, declared = with_image_agents(
                        [spec], [], declared, launcher == LauncherKind.DOCKER
                    )
                    spec = names[0]
                instance = Instance.from_spec(spec)
                resolve_agents([instance], declared)
                one_agent(spec)
                started, reported = suite_variables(agent_env or [], instance, declared)
                launch = dataclasses.replace(options.launch, agent_environment=started)
                options = dataclasses.replace(options, agents=(instance,), launch=launch)
                agent_launcher = make_launcher(options, uuid.uuid4().hex[:12], logs, errors)
                if instance.attached:  # one that serves no health is checked, not unreachable
                    handle = attach_for_suite(instance, min(start_timeout, 10.0), security)
                else:
                    started_ = launch_all(
                        [instance], declared, agent_launcher, start_timeout, security
                    )
                    handle = started_[0]
            suite = Target(
                client=handle.client,
                catalogue=load_catalogue(),
                metrics_address=handle.metrics_address,
                expected_name=expected_name(target, spec),
                extras=frozenset(split_list(extra_workloads)),
                cell_timeout_seconds=cell_timeout,
                reported_variables=reported,
            )
            outcomes = run_suite(suite, groups, cells, _progress)
        except KeyboardInterrupt:
            fail(interrupted(spec), ExitCode.INTERRUPTED)
        finally:
            if handle is not None:
                handle.stop()
            if agent_launcher is not None:
                agent_launcher.close()
    _print(spec, outcomes, as_json)
    if any(o.result == FAIL for o in outcomes):
        raise typer.Exit(ExitCode.NONCONFORMING)


def _colour(result: str) -> str:
    from fwbench.collector.conformance.suite import FAIL, PASS, SKIP

    return {PASS: "green", FAIL: "red", SKIP: "yellow"}[result]


def _progress(outcome: Outcome) -> None:
    colour = _colour(outcome.result)
    errors.print(
        f"[{colour}]{outcome.result}[/] {escape(outcome.check)} ({outcome.seconds:.2f} s)",
        highlight=False,
    )


def _print(spec: str, outcomes: list[Outcome], as_json: bool) -> None:
    from fwbench.collector.conformance.suite import FAIL, PASS, SKIP

    counts = {r: sum(o.result == r for o in outcomes) for r in (PASS, FAIL, SKIP)}
    if as_json:
        print_json(
            {
                "agent": spec,
                "passed": counts[PASS],
                "failed": counts[FAIL],
                "skipped": counts[SKIP],
                "seconds": round(sum(o.seconds for o in outcomes), 3),
                "checks": [o.__dict__ for o in outcomes],
            }
        )
        return
    table = Table("check", "result", "seconds", "reason", title=f"conformance of {spec}")
    for o in outcomes:
        result = f"[{_colour(o.result)}]{o.result}[/]"
        table.add_row(escape(o.check), result, f"{o.seconds:.2f}", escape(o.reason))
    console.print(table)
    console.print(
        f"{counts[PASS]} passed, {counts[FAIL]} failed, {counts[SKIP]} skipped "
        f"in {sum(o.seconds for o in outcomes):.1f} s",
        highlight=False,
    )
