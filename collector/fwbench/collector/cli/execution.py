"""How `collector run` carries out what it was asked: execute a run (or resume one), print
its summary (and, measured until decided, its decisions) and exit with the code that tells
the truth about it."""

from __future__ import annotations

import dataclasses
import shlex
import sys
from pathlib import Path

import typer

from fwbench.collector.agents.image_labels import images_by_id
from fwbench.collector.agents.manifest import AgentManifest
from fwbench.collector.agents.security import ChannelSecurity
from fwbench.collector.agents.specs import AgentSpecError
from fwbench.collector.analysis.answers import rich_answers, run_comparisons
from fwbench.collector.analysis.contenders import load_run
from fwbench.collector.analysis.findings import find, summary_lines
from fwbench.collector.analysis.one_agent import next_steps
from fwbench.collector.analysis.scaling import world_table
from fwbench.collector.cli.at_a_glance import show_glance
from fwbench.collector.cli.calibrate import calibration_for_run
from fwbench.collector.cli.common import (
    ExitCode,
    console,
    errors,
    fail,
    fail_with,
    known_errors,
    load_manifests,
    take_interrupts_once,
)
from fwbench.collector.cli.decide import decisions_table, earlier_spreads
from fwbench.collector.cli.security import SECURITY_OPTIONS
from fwbench.collector.run.model_file import ModelRefused, with_model
from fwbench.collector.run.options import RunOptions, options_from_record
from fwbench.collector.run.plan import Selection
from fwbench.collector.run.resume import ResumePoint, resume_point
from fwbench.collector.run.run_table import summary_table
from fwbench.collector.run.session import DEFAULT_OUT, execute_run
from fwbench.collector.store import (
    PersistenceError,
    ResultStore,
    StorageUnusable,
    default_store_path,
)
from fwbench.collector.store.integrity import check_folder, check_store
from fwbench.collector.store.owner import ResumeRefused
from fwbench.collector.verdicts.record import DecidedRun
from fwbench.spec import load_catalogue

# What --resume takes from its own command line: where things are, and credentials (never
# recorded with the run).
_RESUME_OPTIONS = ("resume", "manifests", "store", *SECURITY_OPTIONS)


def resume_run(
    ctx: typer.Context,
    run_id: str,
    manifests: list[Path] | None,
    store: Path | None,
    security: ChannelSecurity | None,
) -> None:
    given = [
        f"--{name.replace('_', '-')}"
        for name in ctx.params
        if name not in _RESUME_OPTIONS
        and getattr(ctx.get_parameter_source(name), "name", "") == "COMMANDLINE"
    ]
    if given:
        fail(
            f"--resume measures the run with its own selection and settings; drop "
            f"{', '.join(given)}"
        )
    store_path = store or default_store_path()
    try:
        point = resume_point(ResultStore(store_path, create=False), run_id)
        options = options_from_record(
            point.options,
            point.out_dir,
            store_path,
            shlex.join(["collector", *sys.argv[1:]]),
            security,
        )
    except (
        ResumeRefused,
        PersistenceError,
        StorageUnusable,
        AgentSpecError,
        ModelRefused,
    ) as error:
        fail_with(error)
    extra = manifests or [Path(folder) for folder in options.launch.manifest_dirs]
    declared = load_manifests(extra)
    with known_errors():
        declared.update(images_by_id(options.launch.images))
    execute(options, point.selection, declared, point)


def execute(
    options: RunOptions,
    selection: Selection,
    declared: dict[str, AgentManifest],
    resume: ResumePoint | None = None,
) -> None:
    try:  # before any agent starts: the store and the run folder can take the run
        check_store(options.store_path)
        out = options.out_dir
        check_folder(out or DEFAULT_OUT, f"--out {out}" if out else f"{DEFAULT_OUT}/ (no --out)")
    except StorageUnusable as error:
        fail_with(error)
    catalogue = with_model(load_catalogue(), options.model)
    options = dataclasses.replace(
        options,
        calibration=lambda: calibration_for_run(declared),
        # The host's earlier runs are read only for margins that come from them (no --margin).
        history=(
            (lambda run_id, metadata: earlier_spreads(options.store_path, run_id, metadata))
            if options.decision.margin is None
            else None
        ),
    )
    take_interrupts_once()
    try:
        with known_errors():
            summary = execute_run(options, selection, catalogue, declared, errors, resume)
    except KeyboardInterrupt:
        fail(
            "interrupted before measuring began; agents stopped, nothing written",
            ExitCode.INTERRUPTED,
        )
    store = ResultStore(options.store_path)
    results = store.results(summary.run_id)
    # What the run found opens its summary (analysis/answers.py); the tables follow. The
    # results are stored already: working out what they say must not change how the run ends.
    try:
        compared = run_comparisons(store, summary.run_id, options.decision.baseline or None)
        findings = summary_lines(find(load_run(store, summary.run_id)))
    except Exception as error:  # noqa: BLE001 (said, and `collector compare` can say it)
        compared, findings = (
            None,
            [
                f"warning: what run {summary.run_id} found could not be worked out ({error!r}); "
                f"its results are stored: `collector compare {summary.out_dir}` reads them"
            ],
        )
    if compared is not None:
        console.print(rich_answers(compared[1]), highlight=False, soft_wrap=True)
    if summary.decisions is None:
        console.print(summary_table(results, f"run {summary.run_id}"))
        worlds = world_table(
            results, f"run {summary.run_id}: distributed", store.samples(summary.run_id)
        )
        if worlds is not None:
            console.print(worlds)
    elif compared is not None:  # one line per comparison, each reason once (glance.py)
        show_glance(compared[0], compared[2])
    else:
        decided = DecidedRun.from_record(summary.decisions)
        console.print(decisions_table(decided, f"run {summary.run_id}"))
    # What the rows say by themselves (analysis/findings/), one line each.
    for line in findings:
        console.print(line, highlight=False, soft_wrap=True)
    counts = ", ".join(f"{n} {status}" for status, n in sorted(summary.statuses.items()))
    console.print(f"results: {summary.out_dir}/results.parquet ({counts})", highlight=False)
    if summary.statuses.get("ok") and len(results):  # one agent: never against itself
        hint = next_steps(results, summary.out_dir, options.decision.baseline or None)
        console.print(hint, highlight=False, soft_wrap=True)
    if summary.interrupted:
        fail("interrupted; results measured so far are saved", ExitCode.INTERRUPTED)
    if summary.status != "ok":
        fail(f"run {summary.run_id} is {summary.status}", ExitCode.FAILED)
