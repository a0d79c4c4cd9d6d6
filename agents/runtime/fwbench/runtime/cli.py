"""`fwbench-agent`: starts one agent process for one installed framework plugin.

Started by the collector's launchers (or by hand, or as a container's command). Binds to
loopback unless told otherwise. With --ports-file, writes {"grpc": PORT, "metrics": PORT,
"pid": PID} atomically once serving, so a launcher can use port 0 without races.

In an image, the options that are facts of the deployment come from the environment
(FWBENCH_PLUGIN, FWBENCH_AGENT_NAME, FWBENCH_VARIANT, FWBENCH_HOST, FWBENCH_GRPC_PORT,
FWBENCH_METRICS_PORT), so the container's command needs no arguments; flags override them.
The plugin's start-up settings (FWBENCH_DEVICE, FWBENCH_THREADS, FWBENCH_INTEROP_THREADS) are
read here, once, and handed to its constructor as a PluginContext."""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import sys
import threading
from pathlib import Path

from fwbench.runtime.plugin import InvalidContext, context_from_environment
from fwbench.runtime.registry import PluginInvalid, PluginNotFound, load_plugin
from fwbench.runtime.server import create_server


def build_parser() -> argparse.ArgumentParser:
    env = os.environ.get
    p = argparse.ArgumentParser(prog="fwbench-agent", description=__doc__)
    plugin = env("FWBENCH_PLUGIN")
    p.add_argument("--plugin", required=not plugin, default=plugin, help="entry-point name")
    p.add_argument("--name", default=env("FWBENCH_AGENT_NAME"), help="default: the plugin")
    p.add_argument("--variant", default=env("FWBENCH_VARIANT", ""), help="e.g. cpu, cu12, mkl")
    p.add_argument("--host", default=env("FWBENCH_HOST", "127.0.0.1"), help="address to bind")
    p.add_argument(
        "--port", type=int, default=env("FWBENCH_GRPC_PORT", "0"), help="gRPC port, 0 = any"
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=env("FWBENCH_METRICS_PORT", "0"),
        help="/metrics port, 0 = any",
    )
    p.add_argument("--no-metrics", action="store_true", help="disable the /metrics endpoint")
    p.add_argument(
        "--reflection",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="serve gRPC server reflection (default: on; grpcurl and other tools list the "
        "services with it)",
    )
    p.add_argument("--ports-file", type=Path, help="write bound ports here as JSON")
    p.add_argument(
        "--exit-with-parent",
        type=int,
        metavar="PID",
        help="exit when process PID is gone (the launcher died)",
    )
    p.add_argument(
        "--memory-limit-bytes",
        type=int,
        help="address-space limit; allocations beyond it fail as out of memory",
    )
    return p


def _watch_parent(pid: int, stop: threading.Event) -> None:
    while not stop.wait(1.0):
        if os.getppid() != pid:
            stop.set()


def _write_ports(path: Path, grpc_port: int, metrics_port: int) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"grpc": grpc_port, "metrics": metrics_port, "pid": os.getpid()}))
    tmp.replace(path)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.memory_limit_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (args.memory_limit_bytes, args.memory_limit_bytes))
    # CUDA numbers GPUs fastest-first by default, NVML by PCI bus: make "cuda:N" the device
    # NVML calls N, so that telemetry joins the right GPU (before any framework loads CUDA).
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    try:
        plugin = load_plugin(args.plugin, context_from_environment())
    except (InvalidContext, PluginNotFound, PluginInvalid) as error:
        print(f"fwbench-agent: {error}", file=sys.stderr)
        return 2
    agent = create_server(
        plugin,
        name=args.name or args.plugin,
        variant=args.variant,
        host=args.host,
        port=args.port,
        metrics_port=None if args.no_metrics else args.metrics_port,
        reflection_enabled=args.reflection,
    )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if args.exit_with_parent:
        threading.Thread(
            target=_watch_parent, args=(args.exit_with_parent, stop), daemon=True
        ).start()
    if args.ports_file:
        _write_ports(args.ports_file, agent.port, agent.metrics_port)
    print(
        f"fwbench-agent {args.name or args.plugin} serving on {args.host}:{agent.port} "
        f"(metrics {agent.metrics_port})",
        file=sys.stderr,
        flush=True,
    )
    stop.wait()
    agent.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
