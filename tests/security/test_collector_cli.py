"""`collector run` and `collector describe` against a real `fwbench-agent` that demands a
token or TLS: measured ok with the right settings; with a wrong token, a missing file or no
CA, one line on stderr, exit 2, nothing written."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from security_agents import Pki, StartAgent

sys.path.insert(0, str(Path(__file__).parents[1]))  # fake_agent
from fake_agent import write_fake_agents

TOKEN = "collector-cli-token"
# The console script, as users run it.
COLLECTOR = Path(sys.executable).with_name("collector")
QUICK = [
    "--workloads=gemm",
    "--phases=infer",
    "--batch-sizes=1",
    "--param",
    "m=100",
    "--warmup=1",
    "--iterations=3",
    "--min-seconds=0",
    "--scrape-interval=0",
    "--start-timeout=2",
]


def _collector(
    tmp_path: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The collector in tmp_path with a store of its own and no security variables but `env`."""
    own = {k: v for k, v in os.environ.items() if not k.startswith(("FWBENCH_TLS", "FWBENCH_AG"))}
    return subprocess.run(
        [str(COLLECTOR), *args],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
        env={**own, "FWBENCH_STORE": str(tmp_path / "store.sqlite"), **(env or {})},
    )


def _one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The error, once the collector exited 2 with it alone: one line, no traceback."""
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: ") and done.stderr.count("\n") == 1, done.stderr
    return done.stderr


def test_run_with_the_token_file_measures_and_a_wrong_token_writes_nothing(
    tmp_path: Path, start_agent: StartAgent
) -> None:
    token, wrong, missing = tmp_path / "token", tmp_path / "wrong", tmp_path / "missing"
    token.write_text(TOKEN + "\n")
    wrong.write_text("not-the-token\n")
    agent = start_agent(env={"FWBENCH_AGENT_TOKEN": TOKEN})
    run = ["run", f"--agents=fake@{agent.address}", *QUICK, "--out", str(tmp_path / "run")]
    refused = _one_error_line(_collector(tmp_path, *run, "--agent-token-file", str(wrong)))
    assert (
        f"agent fake at {agent.address}: Describe failed: UNAUTHENTICATED the token is wrong"
        in refused
    )
    unread = _one_error_line(_collector(tmp_path, *run, "--agent-token-file", str(missing)))
    assert f"cannot read token file {missing}: No such file" in unread
    assert not (tmp_path / "run").exists() and not (tmp_path / "store.sqlite").exists()
    done = _collector(tmp_path, *run, "--agent-token-file", str(token))
    assert done.returncode == 0, done.stderr
    assert "1 ok" in done.stdout


def test_describe_over_mutual_tls(tmp_path: Path, pki: Pki, start_agent: StartAgent) -> None:
    agent = start_agent(
        env={
            "FWBENCH_TLS_CERT": str(pki.server.cert),
            "FWBENCH_TLS_KEY": str(pki.server.key),
            "FWBENCH_TLS_CLIENT_CA": str(pki.ca.cert),
        }
    )
    describe = ["describe", f"fake@{agent.address}", "--json"]
    ca = ["--tls-ca", str(pki.ca.cert)]
    pair = ["--tls-cert", str(pki.client.cert), "--tls-key", str(pki.client.key)]
    done = _collector(tmp_path, *describe, *ca, *pair)
    assert done.returncode == 0, done.stderr
    assert '"framework": "fake"' in done.stdout
    # Refusals take --start-timeout (2 s here): an agent that closes a connection at once
    # may be one still starting behind a port proxy.
    run = ["run", f"--agents=fake@{agent.address}", *QUICK, "--out", str(tmp_path / "run")]
    plain = _one_error_line(_collector(tmp_path, *run))
    assert "closes plaintext connections: give --tls-ca" in plain
    no_cert = _one_error_line(_collector(tmp_path, *run, *ca))
    assert "without one: give --tls-cert and --tls-key" in no_cert
    assert not (tmp_path / "run").exists() and not (tmp_path / "store.sqlite").exists()


def test_the_collectors_own_settings_do_not_reach_the_agents_it_starts(tmp_path: Path) -> None:
    """A local agent (its environment cached, as tests/faults makes it) inherits neither the
    token nor the TLS variables: it would demand what the collector never sends it."""
    manifests = write_fake_agents(tmp_path / "agents", {"fake": {}})
    leaked = {"FWBENCH_AGENT_TOKEN": "for-attached-agents", "FWBENCH_TLS_CLIENT_CA": "/nonexistent"}
    done = _collector(tmp_path, "describe", "fake", "--manifests", str(manifests), env=leaked)
    assert done.returncode == 0, done.stderr
    assert "workloads: gemm" in done.stdout
    assert "model files it reads: none; writes (--export): none" in done.stdout
    assert "profiler (--profile): none (this agent's plugin has no profiler)" in done.stdout
