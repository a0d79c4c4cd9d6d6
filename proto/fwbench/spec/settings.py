"""The collector's own settings: environment variables that `collector` and its tools read
(an agent reads none of them; what an agent reads at start is startup.py's, its token
metadata.py's). Every `FWBENCH_*` name the collector uses is spelled here or in those two
modules, once; docs/settings.md lists them all (tests/docs/test_settings_doc.py keeps it so)."""

from __future__ import annotations

STORE = "FWBENCH_STORE"
ENV_DIR = "FWBENCH_ENV_DIR"
MANIFEST_PATH = "FWBENCH_MANIFEST_PATH"
HOME = "FWBENCH_HOME"
WHEELHOUSE = "FWBENCH_WHEELHOUSE"
BASE_IMAGE = "FWBENCH_BASE_IMAGE"
DOCKER_CLI = "FWBENCH_DOCKER_CLI"
PUBLISH_ADDRESS = "FWBENCH_PUBLISH_ADDRESS"
CALIBRATION_DIR = "FWBENCH_CALIBRATION_DIR"
CALIBRATION = "FWBENCH_CALIBRATION"
PROMETHEUS_TARGETS = "FWBENCH_PROMETHEUS_TARGETS"
CONFORMANCE_PROBE = "FWBENCH_CONFORMANCE_PROBE"

# What each one does, for docs/settings.md.
SETTINGS = {
    STORE: "the results store (default ~/.local/share/fwbench/results.sqlite); --store wins",
    ENV_DIR: "where agents' virtual environments are made and cached (default "
    "~/.cache/fwbench/envs)",
    MANIFEST_PATH: "more folders of agent manifests, ':'-separated, after --manifest-dir and "
    "before the checkout's agents/manifests",
    HOME: "the fwbench checkout an installed collector uses (manifests, images, compose files)",
    WHEELHOUSE: "where image builds keep the wheels they install (default "
    "~/.cache/fwbench/wheelhouse)",
    BASE_IMAGE: "the base image agents' images build on (default: the one `collector images "
    "base` makes)",
    DOCKER_CLI: "the docker CLI that image builds try first (one that builds with BuildKit)",
    PUBLISH_ADDRESS: "read by `docker compose` from compose/agents.yaml: the host address "
    "agents' ports are published on (default 127.0.0.1)",
    CALIBRATION_DIR: "where this host's calibration is cached (default ~/.cache/fwbench/"
    "calibration)",
    CALIBRATION: "`full` (default), `quick` (tiny sizes, for tests) or `off` (runs record no "
    "calibration)",
    PROMETHEUS_TARGETS: "a folder where each run keeps a file_sd list of its agents' /metrics, "
    "for a Prometheus server ([telemetry.md](telemetry.md))",
    CONFORMANCE_PROBE: "set by `collector conformance` on the agents it starts, to check that "
    "an agent reports the variables it was started with",
}
