"""Every CPU agent this repository ships keeps the protocol: `collector conformance NAME`, the
real command, starts it the way `collector run` does (local launcher, its cached environment)
and passes, on the cheapest workload's cells (--cells one) to keep CI short. An agent added
later joins by its manifest alone. The heartbeat checks (17 s of a long run, and a step grown
over 6 s) watch the runtime's heartbeat thread whichever plugin runs, so they run on
torch-cpu's agent only (the example agent, written without the runtime, passes them in
tests/examples).

The protocol is the runtime's (agents/runtime), the same code in every agent built on it;
what differs between frameworks, the plugin, has its contract suite in each environment
(tests/plugin_contract). So `make test` checks torch-cpu's agent here, and `make test-full`
every other one."""

from __future__ import annotations

import json

import pytest
from collector_cli import collector
from test_frameworks import CPU_AGENTS

from fwbench.collector.conformance.plan import GROUPS

pytestmark = pytest.mark.agent
HEARTBEAT_WATCHED = "torch-cpu"


@pytest.mark.parametrize(
    "agent",
    [a if a == HEARTBEAT_WATCHED else pytest.param(a, marks=pytest.mark.full) for a in CPU_AGENTS],
)
def test_every_cpu_agent_passes_the_conformance_suite(tmp_path, agent: str) -> None:
    groups = GROUPS if agent == HEARTBEAT_WATCHED else [g for g in GROUPS if g != "heartbeat"]
    command = ["conformance", agent, "--cells", "one", "--checks", ",".join(groups), "--json"]
    done = collector(*command, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    report = json.loads(done.stdout)
    assert report["failed"] == 0 and report["agent"] == agent
    results = {c["check"]: c["result"] for c in report["checks"]}
    # Launched by the collector: its /metrics is reachable and checked, never skipped.
    assert results["/metrics has the collector's series"] == "pass"
    assert results["Cancel of the running run: CANCELLED"] == "pass"
    assert sum(c.startswith("run ") for c in results) >= 2
    assert any(c.startswith("heartbeat") for c in results) == (agent == HEARTBEAT_WATCHED)
