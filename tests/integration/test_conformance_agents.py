"""Every CPU agent this repository ships keeps the protocol: `collector conformance NAME`, the
real command, starts it the way `collector run` does (local launcher, its cached environment)
and passes, on the cheapest workload's cells (--cells one) to keep CI short. An agent added
later joins by its manifest alone."""

from __future__ import annotations

import json

import pytest
from collector_cli import collector
from test_frameworks import CPU_AGENTS

pytestmark = pytest.mark.agent


@pytest.mark.parametrize("agent", CPU_AGENTS)
def test_every_cpu_agent_passes_the_conformance_suite(tmp_path, agent: str) -> None:
    done = collector("conformance", agent, "--cells", "one", "--json", cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    report = json.loads(done.stdout)
    assert report["failed"] == 0 and report["agent"] == agent
    results = {c["check"]: c["result"] for c in report["checks"]}
    # Launched by the collector: its /metrics is reachable and checked, never skipped.
    assert results["/metrics has the collector's series"] == "pass"
    assert results["Cancel of the running run: CANCELLED"] == "pass"
    assert sum(c.startswith("run ") for c in results) >= 2
