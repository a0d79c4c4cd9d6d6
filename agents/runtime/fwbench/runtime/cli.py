"""`fwbench-agent`: starts one agent process for one installed framework plugin.

Started by the collector's launchers (or by hand, or as a container's command). Binds to
loopback unless told otherwise. With --ports-file, writes {"grpc": PORT, "metrics": PORT,
"pid": PID} atomically once serving, so a launcher can use port 0 without races.

In an image, the options that are facts of the deployment come from the environment
(FWBENCH_PLUGIN, FWBENCH_AGENT_NAME, FWBENCH_VARIANT, FWBENCH_HOST, FWBENCH_GRPC_PORT,
FWBENCH_METRICS_PORT), so the container's command needs no arguments; flags override them.
The plugin's start-up settings (FWBENCH_DEVICE, FWBENCH_THREADS, FWBENCH_INTEROP_THREADS) are
read here, once, and handed to its constructor as a PluginContext.

Security (docs/security.md): --token-file (or $FWBENCH_AGENT_TOKEN_FILE, or the token itself in
$FWBENCH_AGENT_TOKEN) makes every AgentService call carry `authorization: Bearer TOKEN`;
--tls-cert and --tls-key serve TLS, and --tls-client-ca also demands client certificates that CA
signed (mutual TLS); $FWBENCH_TLS_CERT, $FWBENCH_TLS_KEY, $FWBENCH_TLS_CLIENT_CA likewise. A bad
file exits 2 with one line. Serving beyond loopback with neither warns on stderr."""

from __future__ import annotations

import argparse
import gc
import os
import resource
import select
import signal
import sys
import threading
from pathlib import Path

from fwbench.runtime import orphan
from fwbench.runtime.plugin import InvalidContext, context_from_environment
from fwbench.runtime.registry import PluginInvalid, PluginNotFound, load_plugin
from fwbench.runtime.security import (
    SecurityConfigError,
    ServerSecurity,
    is_loopback,
    server_security,
)
from fwbench.runtime.server import create_server
from fwbench.runtime.world import pin_cpus
from fwbench.spec import startup
from fwbench.spec.metadata import TokenError, read_token


def build_parser() -> argparse.ArgumentParser:
    env = os.environ.get
    p = argparse.ArgumentParser(prog="fwbench-agent", description=__doc__)
    plugin = env(startup.PLUGIN)
    p.add_argument("--plugin", required=not plugin, default=plugin, help="entry-point name")
    p.add_argument("--name", default=env(startup.AGENT_NAME), help="default: the plugin")
    p.add_argument("--variant", default=env(startup.VARIANT, ""), help="e.g. cpu, cu12, mkl")
    p.add_argument(
        "--host", default=env(startup.HOST, startup.DEFAULT_HOST), help="address to bind"
    )
    p.add_argument(
        "--port", type=int, default=env(startup.GRPC_PORT, "0"), help="gRPC port, 0 = any"
    )
    p.add_argument(
        "--metrics-port",
        type=int,
        default=env(startup.METRICS_PORT, "0"),
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
        "--orphan-seconds",
        type=float,
        default=float(env(startup.ORPHAN_SECONDS, "0") or 0),
        metavar="N",
        help="exit when no call has arrived for N seconds and no run is active (its collector "
        "is gone: agents a scheduler started elsewhere); 0 = never",
    )
    p.add_argument(
        "--memory-limit-bytes",
        type=int,
        help="address-space limit; allocations beyond it fail as out of memory",
    )
    _security_options(p)
    return p


def _security_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--token-file",
        type=Path,
        help="file holding the token every AgentService call must carry as 'authorization: "
        "Bearer TOKEN' (default: $FWBENCH_AGENT_TOKEN_FILE, else $FWBENCH_AGENT_TOKEN itself)",
    )
    tls = (
        ("--tls-cert", startup.TLS_CERT, "the server's PEM certificate (chain): serve TLS"),
        ("--tls-key", startup.TLS_KEY, "the PEM private key of --tls-cert"),
        (
            "--tls-client-ca",
            startup.TLS_CLIENT_CA,
            "PEM CA: require client certificates it signed (mutual TLS)",
        ),
    )
    for flag, variable, text in tls:
        default = Path(os.environ[variable]) if os.environ.get(variable) else None
        p.add_argument(flag, type=Path, default=default, help=f"{text} (${variable})")


def _security(args: argparse.Namespace) -> ServerSecurity:
    """Raises SecurityConfigError or TokenError (one line each)."""
    token = read_token(args.token_file, os.environ)
    security = server_security(token, args.tls_cert, args.tls_key, args.tls_client_ca)
    if not (security.token or security.tls) and not is_loopback(args.host):
        print(
            f"fwbench-agent: warning: listening on {args.host} with neither a token nor TLS: "
            "whoever reaches this port can run and cancel workloads (docs/security.md)",
            file=sys.stderr,
            flush=True,
        )
    return security


def _watch_parent(pid: int, stop: threading.Event) -> None:
    """Sets `stop` when the parent `pid` is gone. On Linux the thread sleeps on a pidfd, woken
    only by the parent's exit: a thread polling once a second would wake on the CPU a world's
    rank steps on (docs/lab/world-overhead.md). Elsewhere it polls."""
    try:
        descriptor = os.pidfd_open(pid)
    except (AttributeError, OSError):  # no pidfd here (not Linux 5.3+), or the parent is gone
        descriptor = None
    if os.getppid() != pid:  # gone already, or `pid` named another process now
        stop.set()
    elif descriptor is not None:
        select.select([descriptor], [], [])  # readable once the process has ended
        stop.set()
    else:
        while not stop.wait(1.0):
            if os.getppid() != pid:
                stop.set()
    if descriptor is not None:
        os.close(descriptor)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.memory_limit_bytes:
        resource.setrlimit(resource.RLIMIT_AS, (args.memory_limit_bytes, args.memory_limit_bytes))
    # CUDA numbers GPUs fastest-first by default, NVML by PCI bus: make "cuda:N" the device
    # NVML calls N, so that telemetry joins the right GPU (before any framework loads CUDA).
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    try:
        security = _security(args)  # before the framework loads: a bad file fails at once
        pin_cpus()  # a rank's own CPUs, before the framework sizes its pools
        context = context_from_environment()
        plugin = load_plugin(args.plugin, context)
    except (InvalidContext, PluginNotFound, PluginInvalid, SecurityConfigError, TokenError) as e:
        print(f"fwbench-agent: {e}", file=sys.stderr)
        return 2
    try:
        agent = create_server(
            plugin,
            name=args.name or args.plugin,
            variant=args.variant,
            host=args.host,
            port=args.port,
            metrics_port=None if args.no_metrics else args.metrics_port,
            reflection_enabled=args.reflection,
            security=security,
            world=context.world,
        )
    except RuntimeError as error:  # the port cannot be bound, or gRPC refused the TLS files
        print(f"fwbench-agent: {error}", file=sys.stderr)
        return 2
    # What the process holds now was made at its start (the framework's modules, the plugin,
    # the server): the full collection before each cell (service.py) need not walk it again.
    # After TensorFlow's import that walk alone was 0.24 CPU-s a cell (AMD EPYC, 2026-12-07).
    gc.freeze()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    if args.exit_with_parent:
        threading.Thread(
            target=_watch_parent,
            args=(args.exit_with_parent, stop),
            name="fwbench-parent-watch",
            daemon=True,
        ).start()
    if args.orphan_seconds > 0:
        threading.Thread(
            target=orphan.watch,
            args=(agent.last_call, agent.servicer.busy, args.orphan_seconds, stop),
            name="fwbench-orphan-watch",
            daemon=True,
        ).start()
    if args.ports_file:
        startup.write_ports(args.ports_file, agent.port, agent.metrics_port)
    print(
        f"fwbench-agent {args.name or args.plugin} serving on {args.host}:{agent.port} "
        f"(metrics {agent.metrics_port}; {security.summary()})",
        file=sys.stderr,
        flush=True,
    )
    stop.wait()
    agent.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
