"""`collector compare` and `collector report`: questions asked of stored runs."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from fwbench.collector.analysis.output_format import OutputFormat
from fwbench.collector.cli.at_a_glance import glance_markdown, show_glance
from fwbench.collector.cli.common import StorePath, console, fail, fail_with, reads_store
from fwbench.collector.cli.decide import decisions_table
from fwbench.collector.stats.defaults import DEFAULT_MARGIN, DEFAULT_NOISE_FLOOR, MAX_HISTORY_MARGIN

if TYPE_CHECKING:
    from fwbench.collector.analysis.answers import Answers
    from fwbench.collector.analysis.comparison import ComparisonSet
    from fwbench.collector.analysis.contenders import RunData
    from fwbench.collector.analysis.findings import Findings
    from fwbench.collector.analysis.history import HostHistory
    from fwbench.collector.store import ResultStore
    from fwbench.collector.verdicts.record import (
        DecidedRun,  # what comparing takes is imported where it compares: `--help` is fast
    )


def _load(store: ResultStore, run_id: str) -> RunData:
    from fwbench.collector.analysis.contenders import ComparisonError, load_run

    try:
        return load_run(store, run_id)
    except ComparisonError as error:
        fail_with(error)


HostHistoryOption = Annotated[
    bool,
    typer.Option(
        "--host-history/--no-host-history",
        help="Where a side ran in one process, lean on how much that agent's processes "
        "differed in this host's earlier runs (a prior, docs/report.md), if it has them; "
        "without --margin, take each equivalence margin from how far apart they lay in the "
        "runs before the data compared (5% without).",
    ),
]


def _history(db: ResultStore, run: RunData, wanted: bool) -> HostHistory | None:
    from fwbench.collector.analysis.history import host_history

    return host_history(db, run) if wanted else None


def _margins(db: ResultStore, runs: list[RunData], wanted: bool) -> list[HostHistory] | None:
    """Each run's host's spreads measured before the earliest of `runs`, for the margins."""
    from fwbench.collector.analysis.history import margin_histories

    return margin_histories(db, runs) if wanted else None


def baseline_comparisons(
    db: ResultStore,
    run: RunData,
    baseline: str,
    noise_floor: float = DEFAULT_NOISE_FLOOR,
    margin: float | None = None,
    use_history: bool = True,
) -> ComparisonSet:
    """One run's agents against `baseline`, as `compare` and `explain` both make them: the
    host's history leaned on and the margins taken from it unless told otherwise; raises
    ComparisonError."""
    from fwbench.collector.analysis.compare import compare_to_baseline

    history = _history(db, run, use_history)
    margins = _margins(db, [run], use_history and margin is None)
    return compare_to_baseline(
        run, baseline, noise_floor, margin, history, margins[0] if margins else None
    )


@reads_store
def compare(
    runs: Annotated[
        list[str],
        typer.Argument(
            help="RUN (with --baseline) or RUN_A RUN_B (regressions): run IDs or run folders."
        ),
    ],
    baseline: Annotated[
        str | None,
        typer.Option(
            help="Agent the others are compared with (one run), or 'family': each agent "
            "against its family's native agent (Keras on X against X, ONNX Runtime against "
            "the framework its graphs reproduce)."
        ),
    ] = None,
    threshold: Annotated[
        float,
        typer.Option(help="Two runs: smallest relative change called (0.05 = 5%)."),
    ] = 0.05,
    noise_floor: Annotated[
        float,
        typer.Option(help="One run: default noise floor, raised by A/A pairs in the run."),
    ] = DEFAULT_NOISE_FLOOR,
    margin: Annotated[
        float | None,
        typer.Option(
            help="Equivalence margin: a comparison whose whole 95% interval lies within "
            "±margin (or the noise floor, if larger) is called equivalent (0.05 = 5%). "
            "Default: each comparison's from this host's earlier runs (how far apart one "
            f"process of each side lay, within {DEFAULT_MARGIN:.0%} to "
            f"{MAX_HISTORY_MARGIN:.0%}), else {DEFAULT_MARGIN:.0%}."
        ),
    ] = None,
    output_format: Annotated[
        OutputFormat, typer.Option("--format", help="How to print the comparisons.")
    ] = OutputFormat.TABLE,
    as_json: Annotated[bool, typer.Option("--json", help="Same as --format json.")] = False,
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose",
            "-v",
            help="The table: every figure (medians, p, floor, margin, processes) and every "
            "row's notes in full, the sequential decisions' own table and every finding; "
            "without it, one line per comparison and each reason once.",
        ),
    ] = False,
    use_history: HostHistoryOption = True,
    store: StorePath = None,
) -> None:
    """Speedups with 95% intervals, tests and verdicts: agents against a baseline in one run,
    or every agent's cells in RUN_B against RUN_A. One line per comparison, its reasons as
    numbered notes under the table (--verbose: every figure and note)."""
    from fwbench.collector.analysis import formats
    from fwbench.collector.analysis.answers import rich_answers, with_decisions
    from fwbench.collector.analysis.compare import compare_runs
    from fwbench.collector.analysis.contenders import ComparisonError
    from fwbench.collector.analysis.decisions import SEQUENTIAL_NOTE, stored_decisions
    from fwbench.collector.analysis.efficiency import one_replica_world
    from fwbench.collector.analysis.findings import find
    from fwbench.collector.analysis.history import host_histories
    from fwbench.collector.store import ResultStore, default_store_path

    if as_json:
        output_format = OutputFormat.JSON
    if not 0 <= threshold < 1 or not 0 <= noise_floor < 1 or not 0 <= (margin or 0) < 1:
        fail("--threshold, --noise-floor and --margin are fractions in [0, 1), e.g. 0.05 for 5%")
    db = ResultStore(store or default_store_path(), create=False)
    loaded = [_load(db, run_id) for run_id in runs]
    try:
        if len(loaded) == 1:
            named = list(dict.fromkeys(loaded[0].results["agent"].dropna()))
            if baseline is None and len(named) == 1:
                baseline = str(named[0])  # its modes against its first, or nothing to compare
            if baseline is None:  # one agent's worlds: each scales from its 1-replica world
                baseline = one_replica_world(loaded[0].results)
            if baseline is None:
                fail(f"one run needs --baseline AGENT; agents in {runs[0]}: {', '.join(named)}")
            result = baseline_comparisons(db, loaded[0], baseline, noise_floor, margin, use_history)
        elif len(loaded) == 2:
            if baseline is not None:
                fail("--baseline compares agents within one run; give one run")
            histories = host_histories(db, loaded) if use_history else None
            pair = (histories[0], histories[1]) if histories else None
            margins = _margins(db, loaded, use_history and margin is None)
            before = (margins[0], margins[1]) if margins else None
            result = compare_runs(loaded[0], loaded[1], threshold, margin, pair, before)
        else:
            fail("give one run (with --baseline) or two runs (RUN_A RUN_B)")
    except ComparisonError as error:
        fail_with(error)
    decided = stored_decisions(loaded[0].metadata) if len(loaded) == 1 else None
    # One answer per question: a run's sequential decisions are the verdicts they cover.
    result = with_decisions(result, decided)
    answered = _answers(result, loaded, baseline, decided)
    found = [find(run) for run in {run.run_id: run for run in loaded}.values()]
    if output_format == OutputFormat.TABLE and not verbose:
        console.print(rich_answers(answered), highlight=False, soft_wrap=True)
        show_glance(result, decided, found)
    elif output_format == OutputFormat.TABLE:
        console.print(rich_answers(answered), highlight=False, soft_wrap=True)
        console.print(formats.rich_table(result))
        for reason in result.skipped:
            console.print(f"not compared: {reason}", highlight=False)
        for change in result.changes:
            console.print(f"changed: {change}", highlight=False)
        if decided is not None:
            console.print(decisions_table(decided, f"run {runs[0]}"))
            console.print(SEQUENTIAL_NOTE, highlight=False)
        for findings in found:
            show_findings(findings)
    elif output_format == OutputFormat.MARKDOWN and not verbose:
        print(glance_markdown(result, decided, answered), end="")
    elif output_format == OutputFormat.MARKDOWN:
        print(formats.markdown(result, decided, found, answered=answered), end="")
    elif output_format == OutputFormat.CSV:
        print(formats.csv(result), end="")
    else:
        print(formats.json_text(result, decided, found, answered=answered))


def _answers(
    result: ComparisonSet,
    loaded: list[RunData],
    baseline: str | None,
    decided: DecidedRun | None,
) -> Answers:
    """What the comparisons found, said first (analysis/answers.py)."""
    from fwbench.collector.analysis.answers import answers, answers_title

    if len(loaded) == 2:
        pair = (loaded[0].run_id, loaded[1].run_id)
        title = f"What changed from run {pair[0]} to run {pair[1]}"
        return answers(result, title, runs=pair)
    run = loaded[0]
    title = answers_title(run.run_id, baseline or "", decided)
    return answers(result, title, decided, str(run.metadata.get("command") or ""), run=run)


def show_findings(found: Findings) -> None:
    """A run's findings on the terminal, or the one line that says none were found in what."""
    from fwbench.collector.analysis.findings import rich_table

    if found.findings:
        console.print(rich_table(found))
    else:
        console.print(f"run {found.run_id}: {found.none_line}", highlight=False)


@reads_store
def report(
    run_id: Annotated[str, typer.Argument(help="Run to report on: its ID or its folder.")],
    baseline: Annotated[
        str | None,
        typer.Option(help="Agent the others are compared with (default: the first that ran)."),
    ] = None,
    out: Annotated[
        Path | None, typer.Option(help="Folder for the report (default: RUN_FOLDER/report).")
    ] = None,
    use_history: HostHistoryOption = True,
    store: StorePath = None,
) -> None:
    """Write report.html (self-contained: plots embedded) and report.md (with figures/*.png)."""
    from fwbench.collector.analysis.contenders import ComparisonError
    from fwbench.collector.analysis.report import write_report
    from fwbench.collector.store import ResultStore, default_store_path

    db = ResultStore(store or default_store_path(), create=False)
    run = _load(db, run_id)
    runs = db.runs()
    folder = runs.loc[runs["run_id"] == run.run_id, "out_dir"].iloc[0]
    target = out or Path(folder) / "report"
    try:
        margins = _margins(db, [run], use_history)
        history = _history(db, run, use_history)
        files = write_report(run, target, baseline, history, margins[0] if margins else None)
    except (ComparisonError, ValueError) as error:
        fail(str(error))
    except OSError as error:
        fail(f"cannot write the report to {target}: {error}; choose another --out")
    console.print(f"wrote {files.html} and {files.markdown} ({len(files.figures)} figures)")
