"""Builds the torch-deb images (`make images-deb`): Debian 12's PyTorch 1.13.1 on OpenBLAS,
BLIS, MKL and the reference BLAS, tagged fwbench/torch-deb-VARIANT:latest.

The wheels come from the collector's wheelhouse, as for `collector images build`: the agent's
own packages (protocol, runtime, torch plugin) and the runtime's third-party dependencies, laid
out as the build context's runtime/ and fwbench/ folders; then one plain BuildKit `docker
build --target VARIANT` per variant of images/torch-deb/Dockerfile. The variants share every
layer but the last (update-alternatives), so after the first the others take seconds.

    .venv/bin/python images/torch-deb/build.py [--no-cache] [VARIANT...]   (default: all four)

BASE_IMAGE (environment): the Debian 12 base to build on; default fwbench/base:bookworm
(`collector images base`), else python:3.11-slim-bookworm when only that one is here."""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from fwbench.collector import __version__
from fwbench.collector.agents.manifest import AgentManifest
from fwbench.collector.images.build import LOCAL_BASE_IMAGE, buildkit_command
from fwbench.collector.images.wheelhouse import agent_wheels, stage_context, wheelhouse_root

HERE = Path(__file__).resolve().parent
CHECKOUT = HERE.parent.parent
VARIANTS = ("openblas", "blis", "mkl", "netlib")
PACKAGES = (CHECKOUT / "proto", CHECKOUT / "agents" / "runtime", CHECKOUT / "agents" / "torch")


def image_tag(variant: str) -> str:
    return f"fwbench/torch-deb-{variant}:latest"


def stage() -> Path:
    """The build context: wheels (runtime/, fwbench/) and the Dockerfile."""
    stand_in = AgentManifest(
        name="torch-deb",
        plugin="torch",
        variant="deb",
        description="Debian 12 PyTorch",
        path=HERE / "torch-deb.toml",  # none: no lock, the packages' own requirements
        requirements=(),
        pip_args=(),
        local_packages=PACKAGES,
    )
    wheels = agent_wheels(stand_in, lambda line: print(line, file=sys.stderr))
    context = wheelhouse_root().parent / "image-context" / "torch-deb"
    stage_context(wheels, context)
    shutil.rmtree(context / "agent")  # Debian supplies torch: nothing beyond the runtime's
    shutil.copy2(HERE / "Dockerfile", context / "Dockerfile")
    return context


def base_image() -> str:
    if os.environ.get("BASE_IMAGE"):
        return os.environ["BASE_IMAGE"]
    for candidate in (LOCAL_BASE_IMAGE, "python:3.11-slim-bookworm"):
        if (
            subprocess.run(
                ["docker", "image", "inspect", candidate], capture_output=True
            ).returncode
            == 0
        ):
            return candidate
    return LOCAL_BASE_IMAGE


def _git(*args: str) -> str:
    done = subprocess.run(["git", "-C", str(CHECKOUT), *args], capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else ""


def build(variant: str, context: Path, cache: bool = True) -> float:
    """Builds one variant, BuildKit's output on this process's; returns the seconds it took.
    Exits on failure."""
    command, env = buildkit_command()
    args = {
        "VERSION": __version__,
        "REVISION": _git("rev-parse", "--short=12", "HEAD") or "unknown",
        "SOURCE": _git("remote", "get-url", "origin"),
        "BASE_IMAGE": base_image(),
    }
    command += ["--progress=plain", "--target", variant, "--tag", image_tag(variant)]
    if not cache:
        command.append("--no-cache")
    for name, value in args.items():
        command += ["--build-arg", f"{name}={value}"]
    started = time.monotonic()
    done = subprocess.run([*command, str(context)], env={**os.environ, **env})  # output shown
    if done.returncode != 0:
        sys.exit(f"building {image_tag(variant)} failed: docker build exited {done.returncode}")
    return time.monotonic() - started


def main(argv: list[str]) -> int:
    cache = "--no-cache" not in argv
    wanted = [a for a in argv if a != "--no-cache"] or list(VARIANTS)
    unknown = sorted(set(wanted) - set(VARIANTS))
    if unknown:
        sys.exit(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    lock_file = wheelhouse_root().parent / "image-context" / "torch-deb.lock"
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with lock_file.open("w") as lock:  # one build at a time uses the staged context
        fcntl.flock(lock, fcntl.LOCK_EX)
        context = stage()
        for variant in wanted:
            seconds = build(variant, context, cache)
            cache = True  # the shared stage is fresh now: the other variants reuse it
            print(f"{image_tag(variant)}: built in {seconds:.0f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
