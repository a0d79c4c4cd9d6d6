"""`--slurm-container RUNTIME=REGISTRY`: each Slurm agent in its image, by Apptainer or by
Pyxis (enroot), never in the host's environment. Neither runtime installs here (Debian
bookworm has none), so the job scripts are checked against the runtimes' documented command
forms: `apptainer exec [options] IMAGE COMMAND` (apptainer.org/docs/user/main/cli/
apptainer_exec.html) and srun's Pyxis options --container-image, --container-mounts,
--container-workdir, --no-container-mount-home (github.com/NVIDIA/pyxis, README)."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
from typer.testing import CliRunner

from fwbench.collector.cli import app
from fwbench.collector.launchers.slurm_scripts import (
    IMAGE_PYTHON,
    Container,
    agent_script,
    world_script,
)

FOLDER = Path("/shared/scratch/ports")
TOKEN = Path("/shared/scratch/token-folder")
AGENT = [str(IMAGE_PYTHON), "-m", "fwbench.runtime", "--plugin", "torch", "--ports-file", "PORTS"]
APPTAINER = Container.parse("apptainer=docker://registry.example.org/")
PYXIS = Container.parse("pyxis=registry.example.org#")
IMAGE = "fwbench/torch-cpu:latest"


def last_command(script: str, start: str) -> list[str]:
    (line,) = [line for line in script.splitlines() if line.startswith(start)]
    return shlex.split(line.removesuffix(" &"))


def test_apptainer_runs_the_agent_in_its_image_with_the_folder_at_its_path() -> None:
    image = APPTAINER.registry + IMAGE
    folders = [FOLDER, TOKEN]
    script = agent_script({"FWBENCH_THREADS": "2"}, AGENT, APPTAINER, image, folders, gpu=False)
    command = last_command(script, "exec ")
    assert command[:2] == ["exec", "apptainer"]
    exec_, options, rest = command[2], command[3:9], command[9:]
    assert exec_ == "exec" and options == [
        "--no-home",
        "--bind",
        f"{FOLDER}:{FOLDER},{TOKEN}:{TOKEN}",
        "--pwd",
        str(FOLDER),
        "docker://registry.example.org/fwbench/torch-cpu:latest",
    ]
    assert rest == AGENT  # the image's interpreter, not a host environment's
    assert "export FWBENCH_THREADS=2" in script
    gpu = agent_script({}, AGENT, APPTAINER, image, folders, gpu=True)
    assert "--nv" in last_command(gpu, "exec ")  # NVIDIA's libraries and devices inside


def test_pyxis_starts_the_agent_as_a_step_in_its_image_and_ends_completed() -> None:
    image = PYXIS.registry + IMAGE
    script = agent_script({}, AGENT, PYXIS, image, [FOLDER, TOKEN])
    command = last_command(script, "srun ")
    assert command[:6] == [
        "srun",
        "--export=ALL",
        "--container-image=registry.example.org#fwbench/torch-cpu:latest",
        f"--container-mounts={FOLDER}:{FOLDER},{TOKEN}:{TOKEN}",
        "--no-container-mount-home",
        f"--container-workdir={FOLDER}",
    ]
    assert command[6:] == AGENT
    # The batch script is not the agent here: it ends the step on the collector's SIGTERM.
    assert 'trap \'kill -TERM "$step"; wait "$step"; exit 0\' TERM' in script


@pytest.mark.parametrize("container", [APPTAINER, PYXIS], ids=["apptainer", "pyxis"])
def test_a_worlds_ranks_run_in_the_image_too(container: Container) -> None:
    image = container.registry + IMAGE
    script = world_script({}, AGENT, FOLDER, 29500, container, image, token_folder=TOKEN)
    step = next(line for line in script.splitlines() if "--kill-on-bad-exit=1" in line)
    if container is PYXIS:
        assert f"--container-image={image}" in step and "--no-container-mount-home" in step
        assert "apptainer" not in step
    else:
        assert f"; apptainer exec --no-home --bind {FOLDER}:{FOLDER},{TOKEN}:{TOKEN}" in step
        assert image in step and "--container-image" not in step
    assert f"{IMAGE_PYTHON} -m fwbench.runtime" in step
    assert f"{FOLDER}/ports-$SLURM_PROCID.json" in step
    # A rank that ends by itself leaves its status for the script's SIGTERM trap to read.
    assert f"status=$?; echo $status > {FOLDER}/exit-$SLURM_PROCID; exit $status" in step
    assert f"exits={FOLDER}" in script and '"$exits"/exit-*' in script
    plain = world_script({}, AGENT, FOLDER, 29500)
    assert "apptainer" not in plain and "--container-image" not in plain


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--slurm-container", "apptainer=docker://r/"], "it goes with --launcher slurm"),
        (
            ["--launcher", "slurm", "--slurm-container", "docker=r/"],
            "the runtime is one of apptainer, pyxis",
        ),
        (
            ["--launcher", "slurm", "--slurm-container", "apptainer"],
            "say where the images are: apptainer=docker://registry.example.org/",
        ),
        (
            [
                "--launcher",
                "slurm",
                "--slurm-container",
                "pyxis=r#",
                "--python",
                "/usr/bin/python3",
            ],
            "in its image or in an existing Python",
        ),
        (
            ["--launcher", "slurm", "--slurm-container", "pyxis=r#", "--slurm-export", "job.sh"],
            "not in images",
        ),
        (
            ["--launcher", "slurm", "--slurm", "container=/bundles/torch"],
            "--container would start the host environment's interpreter",
        ),
    ],
)
def test_container_options_that_cannot_hold_are_refused(
    args: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    done = CliRunner().invoke(app, ["run", "--agents", "torch-cpu", *args], env={"COLUMNS": "200"})
    said = " ".join(done.output.split())
    assert done.exit_code == 2 and message in said, said
    assert not (tmp_path / "job.sh").exists()
