"""docs/security.md's token recipe, run as written but for the plugin (the runtime tests' fake
instead of torch, whose environment this suite does not make), the address (loopback, a free
port) and the token's path: the agent it starts (with the recipe's interpreter options, `-P`,
and its identity from the recipe's --name and --variant) passes the recipe's `collector
conformance` command, also where the folder it starts in holds a planted grpc.py; and the page
names the protocol version agent.proto's header states."""

from __future__ import annotations

import os
import re
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

from security_agents import agent_environment

from fwbench.spec import SPEC_VERSION

DOC = Path(__file__).resolve().parents[2] / "docs" / "security.md"
COLLECTOR = Path(sys.executable).with_name("collector")


def _bash_blocks(section: str) -> list[str]:
    """The ```bash blocks of one section (## heading) of security.md, continuation lines
    joined."""
    text = DOC.read_text("utf-8")
    body = text[text.index(f"## {section}\n") :]
    body = body[: body.find("\n## ", 1) if "\n## " in body[1:] else len(body)]
    blocks = re.findall(r"^```bash\n(.*?)^```", body, flags=re.MULTILINE | re.DOTALL)
    return [block.replace("\\\n", " ") for block in blocks]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_the_page_names_the_protocols_version() -> None:
    said = re.findall(r"the protocol is (\d+\.\d+)", DOC.read_text("utf-8"))
    assert said == [SPEC_VERSION]


def test_the_token_recipes_agent_passes_conformance(tmp_path: Path) -> None:
    agent_block, collector_block, *_ = _bash_blocks("Running an agent with a token")
    token_line, agent_line = agent_block.strip().splitlines()
    token, port = tmp_path / "fwbench.token", _free_port()
    made = subprocess.run(
        ["bash", "-c", token_line.replace("~/fwbench.token", str(token))], check=False
    )
    assert made.returncode == 0 and len(token.read_text().strip()) >= 32
    python, command = agent_line.split(" ", 1)
    assert python == "$(collector" and command.startswith("env torch-cpu) ")
    # The interpreter's own options, then the module: `-P` keeps the folder it is started in off
    # sys.path, so a module planted there (a grpc.py) is never imported.
    options, module, rest = command.removeprefix("env torch-cpu) ").partition(
        " -m fwbench.runtime.cli "
    )
    assert module and shlex.split(options) == ["-P"], command
    args = shlex.split(rest)
    assert args[:2] == ["--plugin", "torch"] and "--variant" in args  # the identity's variant
    swap = {"torch": "fake", "0.0.0.0": "127.0.0.1", "50051": str(port), "~/fwbench.token": ""}
    args = [swap.get(arg, arg) or str(token) for arg in args]
    log, planted = tmp_path / "agent.log", tmp_path / "start" / "grpc.py"
    planted.parent.mkdir()  # the folder the agent is started in holds a module named as grpc
    ran = tmp_path / "planted-ran"
    planted.write_text(f"open({str(ran)!r}, 'w').close()\nraise SystemExit(9)\n")
    with log.open("wb") as out:
        agent = subprocess.Popen(
            [sys.executable, *shlex.split(options), "-m", "fwbench.runtime.cli", *args],
            cwd=planted.parent,
            env=agent_environment(tmp_path / "plugin"),
            stdout=out,
            stderr=out,
        )
    try:
        deadline = time.monotonic() + 30
        while "serving on" not in log.read_text():
            assert agent.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the agent did not start in 30 s"
            time.sleep(0.05)
        conformance = next(
            line for line in collector_block.splitlines() if "collector conformance" in line
        )
        conformance = conformance.replace("agent-host:50051", f"127.0.0.1:{port}")
        argv = shlex.split(conformance.replace("~/fwbench.token", str(token)))
        assert argv[:2] == ["collector", "conformance"]
        # The fake plugin sizes no thread pool (it fails the threads group whatever the
        # recipe), and the long run's groups would add 20 s: the groups the recipe's flags
        # reach (identity, token, health, refusals, a run of each workload).
        argv += ["--checks", "describe,services,errors,cells"]
        own = {k: v for k, v in os.environ.items() if not k.startswith("FWBENCH_AG")}
        done = subprocess.run(
            [str(COLLECTOR), *argv[1:]],
            capture_output=True,
            text=True,
            timeout=300,
            env={**own, "FWBENCH_STORE": str(tmp_path / "store.sqlite")},
            check=False,
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
        assert not ran.exists()
    finally:
        agent.terminate()
        agent.wait(10)
