"""The fwbench collector: the only program users run. It starts or connects to agents,
plans and runs workload cells over gRPC, and keeps every result in one normalized table.
It holds no framework code and never imports the agent runtime."""

__version__ = "0.1.0"
