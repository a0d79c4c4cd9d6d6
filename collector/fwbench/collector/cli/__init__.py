"""Fair, reproducible comparisons of deep-learning frameworks and their build variants.

Exit codes, for every command: 0 done; 1 some work failed (cells, image builds) or results
could not be saved; 2 bad input, an unusable store or run folder, or agents, environments,
images or Docker unavailable (nothing written but a failed start's agent log, OUT/logs); 3
`collector conformance`: the agent failed a check; 130 interrupted (what was measured is
kept)."""

from __future__ import annotations

from typing import Annotated

import typer

from fwbench.collector import __version__
from fwbench.collector.cli import (
    agents,
    analysis,
    calibrate,
    conformance,
    doctor,
    explain,
    results,
    run,
)
from fwbench.collector.cli.images import images_app
from fwbench.collector.cli.k8s import k8s_app
from fwbench.collector.cli.panels import RUN_PANELS, in_panels

app = typer.Typer(no_args_is_help=True, help=__doc__)


def _version(show: bool) -> None:
    if show:
        print(f"collector {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version."),
    ] = False,
) -> None:
    """Fair, reproducible comparisons of deep-learning frameworks and their build variants.

    Exit codes, for every command: 0 done; 1 some work failed (cells, image builds) or results
    could not be saved; 2 bad input, an unusable store or run folder, or agents, environments,
    images or Docker unavailable (nothing written but a failed start's agent log, OUT/logs); 3
    `collector conformance`: the agent failed a check; 130 interrupted (what was measured is
    kept)."""


app.command()(in_panels(RUN_PANELS)(run.run))
app.command("agents")(agents.list_agents)
app.command()(agents.env)
app.command()(agents.lock)
app.command()(agents.describe)
app.command()(doctor.doctor)
app.command()(conformance.conformance)
app.command()(results.results)
app.command()(analysis.compare)
app.command()(analysis.report)
app.command()(explain.explain)
app.add_typer(images_app, name="images")
app.add_typer(k8s_app, name="k8s")
app.command()(results.schema)
app.command()(calibrate.calibrate)
