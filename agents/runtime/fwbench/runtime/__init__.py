"""The fwbench agent runtime: everything an agent needs except the framework.

A framework plugs in as a `FrameworkPlugin` (see plugin.py, and docs/plugins.md for the
whole contract), registered under the `fwbench.plugins` entry-point group. The runtime owns
the gRPC server, the timing loop, error mapping and the Prometheus endpoint."""

__version__ = "0.1.0"
