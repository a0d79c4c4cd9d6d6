"""`collector --version`, every --help and shell completion start fast (issue #54): they import
none of the heavy packages the commands use where they run (pandas, SciPy, Matplotlib, gRPC and
the protocol, Docker's SDK, ...). The command modules declare their options with typer and
light constants only, and import what a command does inside the command; each command line
below runs in a fresh interpreter, the way the console script runs the app, and what it
imported is read back from sys.modules."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import typer.main

from fwbench.collector import __version__
from fwbench.collector.cli import app

# Top-level packages a light command line must not import (google: google.protobuf), and the
# generated protocol (fwbench.agent).
FORBIDDEN = frozenset(
    {
        "pandas",
        "numpy",
        "scipy",
        "matplotlib",
        "grpc",
        "google",
        "docker",
        "requests",
        "pyarrow",
        "prometheus_client",
        "jinja2",
        "yaml",
        "cryptography",
        "kubernetes",
        "psutil",
        "fwbench.agent",
    }
)

# Runs each command line given (a JSON list of argument lists; null: the app as the console
# script calls it, reading a completion request from the environment), then prints, last,
# the top-level modules loaded (and fwbench.agent, when any of it is).
PROGRAM = """
import json, sys
from fwbench.collector.cli import app
for args in json.loads(sys.argv[1]):
    try:
        if args is None:
            app(prog_name="collector")
        else:
            app(args, prog_name="collector", standalone_mode=False)
    except SystemExit:
        pass
loaded = {name.split(".")[0] for name in sys.modules}
loaded |= {"fwbench.agent" for name in sys.modules if name.split(".")[:2] == ["fwbench", "agent"]}
print()
print(json.dumps(sorted(loaded)))
"""


def start(lines: list[list[str] | None], env: dict[str, str] | None = None) -> tuple[str, set[str]]:
    """What the command lines printed, and the modules their interpreter loaded."""
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("_COLLECTOR", "COMP_"))}
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM, json.dumps(lines)],
        env={**environment, "COLUMNS": "120", **(env or {})},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    printed, _, loaded = done.stdout.rstrip("\n").rpartition("\n")
    return printed, set(json.loads(loaded))


def assert_light(loaded: set[str], what: str) -> None:
    heavy = sorted(loaded & FORBIDDEN)
    assert not heavy, f"{what} imported {', '.join(heavy)}: import them where they are used"


def test_version_is_light() -> None:
    printed, loaded = start([["--version"]])
    assert printed.strip() == f"collector {__version__}"
    assert_light(loaded, "`collector --version`")


@pytest.mark.parametrize(
    "args",
    [
        ["--help"],
        ["run", "--help"],
        ["compare", "--help"],
        ["report", "--help"],
        ["images", "--help"],
        ["images", "build", "--help"],
        ["k8s", "--help"],
    ],
    ids=" ".join,
)
def test_help_is_light(args: list[str]) -> None:
    printed, loaded = start([args])
    assert "Usage: collector" in printed  # the help was printed, not an error
    assert_light(loaded, f"`collector {' '.join(args)}`")


def command_lines(command: object, path: list[str]) -> list[list[str]]:
    """`--help` of the group and of every command under it, subcommands included."""
    lines = [[*path, "--help"]]
    for name, sub in getattr(command, "commands", {}).items():
        lines += command_lines(sub, [*path, name])
    return lines


def test_every_command_s_help_is_light() -> None:
    """All of them in one interpreter: a command added later is held to it too."""
    lines = command_lines(typer.main.get_command(app), [])
    assert ["images", "build", "--help"] in lines and ["k8s", "render", "--help"] in lines
    printed, loaded = start(list(lines))
    assert printed.count("Usage: collector") == len(lines)
    assert_light(loaded, "`collector COMMAND --help`")


@pytest.mark.parametrize(
    ("words", "expected"),
    [("collector ru", "run"), ("collector run --lau", "--launcher")],
    ids=["command", "option"],
)
def test_completion_is_light(words: str, expected: str) -> None:
    env = {
        "_COLLECTOR_COMPLETE": "complete_bash",
        "COMP_WORDS": words,
        "COMP_CWORD": str(len(words.split()) - 1),
    }
    printed, loaded = start([None], env)
    assert expected in printed.split(), printed  # a completion was given, not nothing
    assert_light(loaded, f"completing `{words}`")


# What a refused `collector run` must not have imported: the run's data and statistics
# machinery (the store, comparisons, plots), loaded only once the input holds. The suite refuses
# about forty bad command lines; a user's typo answers at once.
RUN_MACHINERY = frozenset({"pandas", "scipy", "matplotlib", "pyarrow", "jinja2"})


@pytest.mark.parametrize(
    "args",
    [
        ["run", "--agents", "nope"],
        ["run", "--agents", "torch-cpu", "--workloads", "gemm,nope"],
        ["run", "--agents", "torch-cpu", "--batch-sizes", "0"],
        ["run", "--agents", "torch-cpu", "--world-sizes", "1,x"],
        ["run", "--agents", "torch-cpu", "--until-decided", "--budget", "-1m"],
        ["run", "--agents", "torch-cpu", "--interference-threshold", "0"],
    ],
    ids=" ".join,
)
def test_a_refused_run_loads_no_run_machinery(args: list[str], tmp_path: Path) -> None:
    _, loaded = start([[*args, "--out", str(tmp_path / "out")]])
    assert not (tmp_path / "out").exists()
    heavy = sorted(loaded & RUN_MACHINERY)
    assert not heavy, f"`collector {' '.join(args)}` imported {', '.join(heavy)} before refusing"


def test_the_run_machinery_of_local_agents_loads_no_docker_sdk() -> None:
    """What a run of local agents imports (the command, the session, the launchers' registry)
    holds no Docker SDK: it and requests cost 0.3 s of CPU a start, and only the Docker launcher
    and the image commands use them."""
    program = (
        "import sys, fwbench.collector.cli.execution, fwbench.collector.run.session, "
        "fwbench.collector.launchers; "
        "print(sorted({n.split('.')[0] for n in sys.modules} & {'docker', 'requests'}))"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout


def test_the_verdicts_statistics_load_no_scipy_stats() -> None:
    """Every run ends with its comparisons; scipy.stats costs about a second of CPU to import
    (about 0.2 s for scipy.special), which the suite's hundreds of runs and every user's run
    paid for three numbers. Each of the verdicts' methods runs here: repetitions a side,
    a prior from history, one process a side (Mann-Whitney, exact and with ties), the
    equivalence test and the sequential interval."""
    program = """
import sys
import numpy as np
from fwbench.collector.stats import sequential, significance
rng = np.random.default_rng(1)
two = [rng.lognormal(0, 0.1, 20) for _ in range(2)]
one = [rng.lognormal(0, 0.1, 20)]
prior = (significance.ProcessSpread(0.05, 4.0), significance.ProcessSpread(0.05, 4.0))
significance.estimate_speedup(two, two[::-1])
significance.estimate_speedup(one, [one[0] * 1.1], prior)
significance.estimate_speedup(one, [one[0] * 1.1])
significance.estimate_speedup([np.arange(5.0)], [np.arange(5.0) + 2.5])
significance.estimate_speedup([np.round(one[0], 1)], [np.round(one[0] * 1.2, 1)])
significance.equivalence_p(two, two[::-1], 1.05)
significance.equivalence_p(one, [one[0]], 1.05, prior)
sequential.look([*two, one[0]], [*two[::-1], one[0] * 1.1], 0.01, 0.01, 0.03, 0.05)
print(sequential.__name__, sorted(m for m in sys.modules if m.startswith("scipy.stats")))
"""
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[1:] == ["[]"], done.stdout
