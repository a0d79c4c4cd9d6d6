"""How much an agent's processes differ on this host, from the store's runs: the prior that a
comparison of one process a side leans on (significance.py, docs/report.md "The host's
history").

A run measured that spread wherever one agent's cell ran in two or more processes (`--repeat`
with fresh processes, `--until-decided`, an A/A pair: `tf-eigen` and `tf-eigen#2` are two
processes of one agent). For each run on the same host that started no later than the run
being compared (so a comparison never changes when later runs are added), the log medians of
those processes are centred on their run's mean; the SD pooled over runs is the prior.

A host's spread differs from day to day (tf-eigen's conv2d processes differed by 2 to 17.5%
in runs an hour apart here), so a new run's processes may differ more than the pooled SD
says. The prior's degrees of freedom carry that: when the runs' variances differ more than
sampling explains, the spread of the variances is taken as a scaled inverse chi-square whose
degrees of freedom nu match the extra variance of their logarithms (trigamma(nu / 2) = that
variance), and a new run's process difference is then Student's t with nu degrees of freedom;
the prior's are the smaller of nu and the processes less the runs. So a prior needs at least
MIN_RUNS runs (one run cannot show how much days differ) and MIN_DEGREES degrees of freedom.
In simulation (tests/collector/test_history.py) this keeps false calls at or under 5% where
the pooled SD alone made 6 to 9%.

Only processes that ran the same way count: the same agent, mode and cell, and the same
launcher, device, CPU, cores, framework version and environment switches (`--agent-env`)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fwbench.collector.agents.specs import aa_base
from fwbench.collector.analysis import hosts
from fwbench.collector.analysis.contenders import Contender, RunData
from fwbench.collector.stats.margins import NO_HISTORY_MARGIN, margin_for
from fwbench.collector.stats.significance import DEFAULT_MARGIN, Prior, ProcessSpread
from fwbench.collector.store import ResultStore
from fwbench.collector.store.cell_key import CellKey, clean

# What makes two processes the same experiment, besides the agent, mode and cell.
SAME_WAY = (
    "launcher",
    "device",
    "cpu_model",
    "usable_cores",
    "framework_version",
    "environment",
)
MIN_DEGREES = 4  # a prior of fewer degrees of freedom (processes less runs) is not used
MIN_RUNS = 2
HISTORY_NOTE = "host history (SD between processes): "
Identity = tuple[Any, ...]


@dataclass(frozen=True)
class HostHistory:
    """The spreads measured on one host, by agent, mode, cell and SAME_WAY."""

    spreads: dict[Identity, ProcessSpread] = field(default_factory=dict)

    def spread(self, run: RunData, cell: Contender) -> ProcessSpread | None:
        """The spread of `cell`'s agent, mode and cell as `run` ran it, if measured."""
        rows = run.results[run.results["cell"] == cell.first_cell]
        if rows.empty:
            return None
        return self.of_row(rows.iloc[0].to_dict())

    def of_row(self, row: Mapping[Any, Any]) -> ProcessSpread | None:
        """The spread of the agent, mode and cell a result row (stored or being recorded)
        measured, as it ran it, if measured."""
        return self.spreads.get(_identity(row))


def prior_of(first: ProcessSpread | None, second: ProcessSpread | None) -> Prior | None:
    """Both sides' spreads, or None when either side has no usable history."""
    return None if first is None or second is None else (first, second)


def _host(run_id: str, metadata: Mapping[str, Any]) -> str:
    found = hosts.host_of_metadata(run_id, metadata)
    return str(found["fingerprint_id"] or found["hostname"] or "")


def _identity(row: Mapping[Any, Any]) -> Identity:
    mode = clean(row.get("mode")) or ""
    same = tuple(clean(row.get(column)) for column in SAME_WAY)
    return (aa_base(str(row["agent"])), mode, CellKey.of_row(row), same)


def host_history(store: ResultStore, run: RunData) -> HostHistory:
    """The spreads of every agent and cell measured on `run`'s host by runs that started no
    later than it (itself included)."""
    return host_histories(store, [run])[0]


def earlier_history(store: ResultStore, run_id: str, metadata: Mapping[str, Any]) -> HostHistory:
    """The spreads measured on the host of run `run_id` (being measured: `metadata` is its own)
    by runs that started before it, itself excluded: what was known before it began, so what
    it takes from them (--until-decided's margin, stats/margins.py) does not depend on its own
    data."""
    started = str(metadata.get("started_at") or "")
    return _histories(store, [(_host(run_id, metadata), started, run_id)])[0]


def margin_histories(store: ResultStore, runs: Sequence[RunData]) -> list[HostHistory]:
    """For each of `runs` (one, or two compared), the spreads measured on its host by runs that
    started before the earliest of them, none of them counted: what was known before any of
    the data being judged, for equivalence margins (stats/margins.py)."""
    first = min((str(r.metadata.get("started_at") or "") for r in runs), default="")
    return _histories(store, [(_host(r.run_id, r.metadata), first, r.run_id) for r in runs])


def host_histories(store: ResultStore, runs: Sequence[RunData]) -> list[HostHistory]:
    """host_history of each of `runs`, reading the store once: every run's metadata, then the
    rows of the runs on their hosts."""
    asked = [
        (_host(r.run_id, r.metadata), str(r.metadata.get("started_at") or ""), None) for r in runs
    ]
    return _histories(store, asked)


def _histories(
    store: ResultStore, asked: Sequence[tuple[str, str, str | None]]
) -> list[HostHistory]:
    """For each (host, start, excluded run): the spreads of the runs on that host that started
    no later than the start, or, when a run is excluded, before it and not that run."""
    wanted = {host for host, _, _ in asked} - {""}
    measured = []  # run, host, start, and each identity's sum of squares and df
    for run_id, metadata in store.metadata_by_run().items():
        host = _host(run_id, metadata)
        if host in wanted:
            started = str(metadata.get("started_at") or "")
            measured.append((run_id, host, started, _squares(_process_logs(store.rows(run_id)))))
    histories = []
    for host, started, excluded in asked:
        found: dict[Identity, list[tuple[float, int]]] = {}
        for other_id, other_host, other_started, squares_by_identity in measured:
            if other_host != host or other_id == excluded:
                continue
            if other_started < started or (excluded is None and other_started == started):
                for identity, squares in squares_by_identity.items():
                    found.setdefault(identity, []).append(squares)
        spreads = {identity: pooled(per_run) for identity, per_run in found.items()}
        histories.append(HostHistory({k: v for k, v in spreads.items() if v is not None}))
    return histories


def _squares(logs_by_identity: Mapping[Identity, list[float]]) -> dict[Identity, tuple[float, int]]:
    """Each identity's sum of squared deviations of its processes' log medians and their
    degrees of freedom, where two or more processes measured it."""
    squares = {}
    for identity, logs in logs_by_identity.items():
        if len(logs) >= 2:
            values = np.asarray(logs)
            squares[identity] = (float(((values - values.mean()) ** 2).sum()), len(values) - 1)
    return squares


def pooled(runs: list[tuple[float, int]]) -> ProcessSpread | None:
    """The prior from each run's sum of squared deviations of its processes' log medians and
    their degrees of freedom; None below MIN_RUNS runs or MIN_DEGREES degrees of freedom, or
    without spread."""
    total, df = sum(r[0] for r in runs), sum(r[1] for r in runs)
    if len(runs) < MIN_RUNS or df < MIN_DEGREES or total <= 0:
        return None
    variances = [squares / d for squares, d in runs]
    degrees: float = df
    if min(variances) > 0:
        # Var(log s^2) of a run with d degrees of freedom is trigamma(d / 2) from sampling
        logs = np.log(variances)
        extra = float(logs.var(ddof=1)) - float(np.mean([_trigamma(d / 2) for _, d in runs]))
        degrees = min(df, _days_degrees(extra))
    return ProcessSpread(math.sqrt(total / df), max(degrees, 1.0), df + len(runs), len(runs))


def _days_degrees(extra: float) -> float:
    """nu with trigamma(nu / 2) = `extra`, the variance of log variances beyond sampling's;
    infinite when there is none."""
    if extra <= 1e-9:
        return math.inf
    from scipy.optimize import brentq

    return float(brentq(lambda nu: _trigamma(nu / 2) - extra, 1e-3, 1e9))


def _trigamma(x: float) -> float:
    """polygamma(1, x), as scipy computes it (the Hurwitz zeta function zeta(2, x)), without
    polygamma's Python wrapper: most of a root search's time."""
    from scipy.special import zeta  # scipy when a figure is computed: a light start

    return float(zeta(2, x))


def _process_logs(rows: list[dict[str, Any]]) -> dict[Identity, list[float]]:
    """One run's ok rows as the log median of each process, by identity. A process that
    measured a cell more than once (`--same-process`) counts once, at the median of its rows."""
    by_process: dict[tuple[Identity, Any, Any], list[float]] = {}
    for row in rows:
        median, pid = row.get("median_seconds"), clean(row.get("agent_pid"))
        if row.get("status") != "ok" or pid is None or not median or median != median:
            continue
        identity = _identity(row)
        by_process.setdefault((identity, clean(row.get("node")), pid), []).append(median)
    logs: dict[Identity, list[float]] = {}
    for (identity, _, _), medians in by_process.items():
        logs.setdefault(identity, []).append(math.log(float(np.median(medians))))
    return logs


def history_note(agent: str, other: str, prior: Prior) -> str:
    """What the prior was, for the reader: each side's spread, runs and processes."""
    first, second = prior
    return (
        f"{HISTORY_NOTE}{agent} {first.sd:.1%} ({first.runs} runs, {first.processes} "
        f"processes), {other} {second.sd:.1%} ({second.runs}, {second.processes})"
    )


Side = tuple[str, RunData, Contender, HostHistory | None]  # name, run, cell, spreads before


def comparison_margin(
    given: float | None, side: Side, against: Side, earlier: str
) -> tuple[float, str]:
    """The margin of a comparison: `given` (--margin), else from each side's spreads measured
    before the data being judged (stats/margins.py); by default without them."""
    if given is None and (side[3] is None or against[3] is None):
        return DEFAULT_MARGIN, NO_HISTORY_MARGIN
    first, second = ((h.spread(r, c) if h else None) for _, r, c, h in (side, against))
    twins = aa_base(side[0]) == aa_base(against[0])  # an A/A pair: its spread said once
    return margin_for(given, side[0], first, against[0], second, twins, earlier)
