"""The fwbench collector: the only program users run. It starts or connects to agents,
plans and runs workload cells over gRPC, and keeps every result in one normalized table.
It holds no framework code and never imports the agent runtime.

Layers, each importing only those below it (tests/collector/test_layers.py holds the line):
    cli                      the commands
    run | analysis           measuring a run | questions asked of stored runs
    images                   agent images, built from manifests
    agents | store | stats   manifests, environments, client, launchers | results | statistics
    fwbench.spec             the protocol and workload catalogue (proto/)
"""

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("fwbench")
except PackageNotFoundError:  # a source tree on sys.path, not installed
    __version__ = "0+unknown"
