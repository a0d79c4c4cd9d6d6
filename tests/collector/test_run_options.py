"""A run's options in parts (run/options.py) and each launcher's own options (launchers/
options.py, registered in launchers/__init__.py): every launcher flag of `collector run` is
one launcher's, refused with another naming those it goes with; parts and launcher options
are recorded and read back for --resume, runs recorded before the parts included."""

from __future__ import annotations

import dataclasses
import inspect
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Self

import pytest
from typer.testing import CliRunner

from fwbench.collector.agents.specs import Instance
from fwbench.collector.cli import app
from fwbench.collector.cli.run import run
from fwbench.collector.launchers import (
    LAUNCHERS,
    LauncherKind,
    LauncherOptions,
    LaunchOptionError,
    OptionContext,
    launcher_options,
)
from fwbench.collector.launchers.options import Flag
from fwbench.collector.run.options import (
    Decision,
    Launch,
    Limits,
    RunOptions,
    Telemetry,
    options_from_record,
    options_record,
)

# Every launcher's flags: parameter -> (launchers that take it, its Flag).
FLAGS = {
    parameter: ([k for k, c in LAUNCHERS.items() if parameter in c.options.FLAGS], flag)
    for launcher in LAUNCHERS.values()
    for parameter, flag in launcher.options.FLAGS.items()
}


def test_every_launcher_flag_is_an_option_of_collector_run_with_its_default() -> None:
    parameters = inspect.signature(run).parameters
    assert {"python", "cpuset", "memory", "pids_limit", "slurm", "slurm_container", "k8s"} <= set(
        FLAGS
    )
    for parameter, (_, flag) in FLAGS.items():
        assert parameter in parameters, parameter
        default = parameters[parameter].default
        assert not flag.given(default), (parameter, default)  # the default is "not given"
    for kind, launcher in LAUNCHERS.items():  # every flag at its default: each launcher's own
        defaults = {p: parameters[p].default for p in FLAGS}
        assert launcher_options(kind, defaults) == launcher.options()


@pytest.mark.parametrize("parameter", sorted(FLAGS))
def test_a_flag_of_other_launchers_is_refused_naming_those_it_goes_with(parameter: str) -> None:
    takers, flag = FLAGS[parameter]
    other = next(kind for kind in LAUNCHERS if kind not in takers)
    value = {"pids_limit": 128}.get(parameter, ["x=1"] if parameter in ("slurm", "k8s") else "v")
    with pytest.raises(LaunchOptionError, match=" or ".join(takers)) as refused:
        launcher_options(other, {parameter: value})
    assert refused.value.flag == flag.name


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--cpuset", "0"], "--cpuset limits containers: it goes with --launcher docker"),
        (["--pids-limit", "128", "--launcher", "slurm"], "--pids-limit limits containers"),
        (["--slurm", "partition=x", "--launcher", "docker"], "--slurm options go with"),
        (
            ["--python", "/usr/bin/python3", "--launcher", "kubernetes"],
            "it goes with --launcher local or slurm",
        ),
    ],
)
def test_collector_run_refuses_another_launchers_flag_in_one_line(
    args: list[str], said: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(app, ["run", "--agents", "numpy-gemm", *args])
    assert done.exit_code == 2 and said in " ".join(done.output.split()), done.output
    assert not (tmp_path / "fwbench-results").exists()


@dataclass(frozen=True)
class ToyOptions(LauncherOptions):
    """A launcher added by one module: its own flag, parsed and recorded by the registry."""

    FLAGS: ClassVar[Mapping[str, Flag]] = {"toy": Flag("--toy")}

    toy: tuple[str, ...] = ()

    @classmethod
    def parse(cls, given: Mapping[str, Any], context: OptionContext) -> Self:
        if "bad" in (given.get("toy") or ()):
            raise LaunchOptionError("--toy", "bad is not a toy")
        return cls(tuple(given.get("toy") or ()))


def test_a_launcher_registered_in_one_line_gets_its_options_parsed_and_recorded(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    toy = type("ToyLauncher", (), {"options": ToyOptions, "kind": LauncherKind.KUBERNETES})
    monkeypatch.setitem(LAUNCHERS, LauncherKind.KUBERNETES, toy)  # type: ignore[arg-type]
    own = launcher_options(LauncherKind.KUBERNETES, {"toy": ["a"], "cpuset": ""})
    assert own == ToyOptions(("a",))
    with pytest.raises(LaunchOptionError, match="--toy goes with --launcher kubernetes"):
        launcher_options(LauncherKind.LOCAL, {"toy": ["a"]})
    with pytest.raises(LaunchOptionError, match="bad is not a toy"):
        launcher_options(LauncherKind.KUBERNETES, {"toy": ["bad"]})
    launch = Launch(LauncherKind.KUBERNETES, own)
    assert Launch.from_record(json.loads(json.dumps(launch.record()))) == launch


def _options(launch: Launch) -> RunOptions:
    return RunOptions(
        (Instance("fake"), Instance("fake", copy=2), Instance("fake").as_world(2)),
        None,
        Path("s"),
        "c",
        Limits(None, 30.0, 5.0),
        Telemetry(None, 25.0, 3.0),
        launch,
        Decision(120.0, "fake", 0.02, 0.05),
    )


@pytest.mark.parametrize(
    ("kind", "given"),
    [
        (LauncherKind.LOCAL, {}),
        (LauncherKind.DOCKER, {"cpuset": "0", "memory": "2g", "pids_limit": 512}),
        (
            LauncherKind.SLURM,
            {
                "slurm": ["partition=cpu", "fake:time=00:05:00"],
                "slurm_container": "apptainer=docker://r/",
            },
        ),
        (LauncherKind.KUBERNETES, {"k8s": ["namespace=bench", "cpus=2"]}),
    ],
)
def test_every_part_is_recorded_and_read_back_for_resume(
    kind: LauncherKind, given: dict[str, Any]
) -> None:
    own = launcher_options(kind, given, OptionContext(frozenset({"fake"})))
    assert own != LAUNCHERS[kind].options() or not given
    options = _options(Launch(kind, own, ("/m",), ("sha256:ab",), {"A": "1"}))
    record = json.loads(json.dumps(options_record(options)))
    assert "out_dir" not in record and "security" not in record and "command_line" not in record
    back = options_from_record(record, Path("o"), Path("t"), "resumed")
    assert back == dataclasses.replace(
        options, out_dir=Path("o"), store_path=Path("t"), command_line="resumed"
    )


def test_a_run_recorded_before_the_parts_resumes_with_its_options() -> None:
    """run.json's options as collectors before these parts wrote them (every launcher's
    fields, flat): read back the same, and written back in the same keys."""
    earlier = {
        "agents": ["tf-mkl", "tf-eigen", "jax-cpu~w2"],
        "cell_timeout_seconds": 1800.0,
        "start_timeout_seconds": 180.0,
        "scrape_interval_seconds": 0.25,
        "hang_timeout_seconds": 60.0,
        "interference_threshold": 10.0,
        "quiet_host_seconds": 0.0,
        "launcher": "docker",
        "cpuset": "0-1",
        "memory": "",
        "pids_limit": 4096,
        "slurm_options": [],
        "slurm_container": "",
        "k8s_options": [],
        "manifest_dirs": [],
        "pythons": {},
        "images": [],
        "agent_environment": {"B": "2"},
        "until_decided_seconds": 300.0,
        "baseline": "tf-mkl",
        "noise_floor": 0.03,
        "margin": None,
    }
    options = options_from_record(earlier, Path("o"), Path("s"), "c")
    assert options.agents[2] == Instance("jax-cpu").as_world(2)
    assert options.limits == Limits(1800.0, 180.0, 60.0)
    assert options.telemetry == Telemetry(0.25, 10.0, 0.0)
    assert options.launch.launcher == LauncherKind.DOCKER
    assert options.launch.own.record() == {"cpuset": "0-1", "memory": "", "pids_limit": 4096}
    assert options.launch.agent_environment == {"B": "2"}
    assert options.decision == Decision(300.0, "tf-mkl", 0.03, None)
    again = options_record(options)
    assert {key: earlier[key] for key in again} == again  # the same keys, the same values
