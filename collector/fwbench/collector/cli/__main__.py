"""`python -m fwbench.collector.cli`, the same as the `collector` command."""

from fwbench.collector.cli import app

app(prog_name="collector")
