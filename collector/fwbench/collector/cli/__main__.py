"""`python -m fwbench.collector.cli`, the same as the `collector` command."""

from fwbench.collector.cli import app

if __name__ == "__main__":
    app(prog_name="collector")
