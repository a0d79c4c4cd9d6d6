"""`collector run --until-decided`, end to end with agents whose difference is under the test's
control (the sleeping fake plugin: steps of 1, 1.5 and 1.02 ms scaled, whatever the CPU): the
rounds stop when every comparison is decided, decided cells stop being measured, the budget is
respected, and the decisions are printed and stored."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from collector_cli import collector
from fake_agent import write_fake_agents
from quiet_host import require_quiet_host

pytestmark = pytest.mark.timing  # its rounds end when timings decide
INTERFERENCE_OFF = ("--interference-threshold", "100")


def _run(tmp_path: Path, agents: dict[str, dict[str, str]], *extra: str) -> tuple[Path, object]:
    manifests = write_fake_agents(tmp_path / "agents", agents)
    out = tmp_path / "run"
    done = collector(
        "run",
        "--manifests",
        str(manifests),
        "--agents",
        ",".join(agents),
        "--workloads",
        "gemm",
        "--phases",
        "infer",
        "--batch-sizes",
        "1,2",
        "--param",
        "m=3000",
        "--min-seconds",
        "0.2",
        "--scrape-interval",
        "0",
        "--until-decided",
        "--out",
        str(out),
        *extra,
        # The steps sleep, so what else the host runs does not change them: no process is to
        # be left out as interfered (test_interference.py tests that), or a busy host would
        # leave rounds short.
        *INTERFERENCE_OFF,
        cwd=tmp_path,
    )
    return out, done


def test_rounds_go_on_until_every_comparison_is_decided(tmp_path: Path, isolated_store) -> None:
    out, done = _run(
        tmp_path,
        {"fast": {}, "slow": {"FAKE_STEP_SCALE": "1.5"}},
        "--aa",
        "slow",
        "--budget",
        "5m",
    )
    assert done.returncode == 0, done.stderr
    metadata = json.loads((out / "run.json").read_text())
    decided = metadata["until_decided"]
    detail = json.dumps(decided, indent=1)
    verdicts = {(d["agent"], d["key"][2]): d["verdict"] for d in decided["decisions"]}
    assert verdicts[("slow", 1)] == verdicts[("slow", 2)] == "slower", detail
    # The A/A twin is compared with its own agent, not the baseline: equivalent, as the rules
    # decide it in nearly every run; on a machine so loaded that two processes differ, it may
    # stay open, but it is never called a difference.
    against = {d["agent"]: d["against"] for d in decided["decisions"]}
    assert against == {"slow": "fast", "slow#2": "slow"}, detail
    for batch in (1, 2):
        assert verdicts[("slow#2", batch)] in ("equivalent", "undecided"), detail
    if set(verdicts.values()) == {"slower", "equivalent"}:
        assert decided["stopped"] == "every comparison decided", detail
    for decision in decided["decisions"]:
        assert decision["repetitions"] >= 2
        # A new store: no history of this host, so the default margin, said so.
        assert decision["margin"] == 0.05 and decision["margin_from"].startswith("by default: ")
        assert decision["ci_low"] <= decision["speedup"] <= decision["ci_high"]
        assert 0.95 < decision["level"] < 1, decision  # strict: shared over looks and cells
        if decision["verdict"] == "equivalent":  # the interval of its one-sided tests, inside
            assert decision["ci_low"] >= 1 / 1.05 and decision["ci_high"] <= 1.05, decision
        if decision["agent"] == "slow":
            # 1 / 1.5 plus each step's small constant overhead. Its interval may be wide (two
            # processes a side at a strict level), but "slower" says it clears the floor.
            assert 0.62 < decision["speedup"] < 0.72, decision
    rows = pd.read_parquet(out / "results.parquet")
    assert set(rows["status"]) == {"ok"}
    assert sorted(set(rows["repetition"])) == list(range(decided["rounds"]))
    # Each round is a fresh process of every agent it measures (pids may be reused later).
    for _, agent_rows in rows.groupby("agent"):
        per_round = agent_rows.groupby("repetition")["agent_pid"].nunique()
        assert (per_round == 1).all()
        assert agent_rows["agent_pid"].diff().fillna(1).ne(0).sum() == len(per_round)
    assert "measured until decided" in done.stdout and "slower" in done.stdout
    # The next step a new user would take, with the folder the run printed.
    assert f"next: collector report {out}" in done.stdout
    assert f"collector compare {out} --baseline fast" in done.stdout
    assert metadata["status"] == "ok"
    # compare and the report show the run's own sequential decisions, said to be the answers.
    run_id = metadata["run_id"]
    compared = collector("compare", run_id, "--baseline", "fast", "--format", "json", cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    assert json.loads(compared.stdout)["until_decided"]["decisions"] == decided["decisions"]
    table = collector("compare", run_id, "--baseline", "fast", cwd=tmp_path)
    assert "measured until decided" in table.stdout and "rounds of fresh processes" in table.stdout
    every = collector("compare", run_id, "--baseline", "fast", "--verbose", cwd=tmp_path)
    assert "sequential decisions" in every.stdout
    reported = collector("report", run_id, "--out", str(tmp_path / "report"), cwd=tmp_path)
    assert reported.returncode == 0, reported.stderr
    page = (tmp_path / "report" / "report.md").read_text()
    section = page.split("## Measured until decided (baseline fast)")[1]
    for decision in decided["decisions"]:
        assert f"| {decision['cell']} | {decision['agent']} | {decision['against']} |" in section


def test_without_margin_each_comparison_takes_its_margin_from_the_earlier_runs(
    tmp_path: Path, isolated_store
) -> None:
    """Two earlier runs measured "slow" in three processes each: its A/A pair's margin comes
    from them (the sleeping steps lie well within 5%, so the margin is 5%, said to be from the
    history); "fast" has no history, so its comparison keeps the default. A given --margin
    wins over both."""
    manifests = write_fake_agents(tmp_path / "agents", {"fast": {}, "slow": {}})
    for earlier in ("one", "two"):
        done = collector(
            "run",
            "--manifests",
            str(manifests),
            "--agents",
            "slow",
            "--workloads",
            "gemm",
            "--phases",
            "infer",
            "--batch-sizes",
            "1",
            "--param",
            "m=3000",
            "--min-seconds",
            "0.2",
            "--scrape-interval",
            "0",
            "--repeat",
            "3",
            "--out",
            str(tmp_path / earlier),
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr
    for extra, out in (((), "decided"), (("--margin", "0.07"), "given")):
        done = collector(
            "run",
            "--manifests",
            str(manifests),
            "--agents",
            "fast,slow",
            "--aa",
            "slow",
            "--workloads",
            "gemm",
            "--phases",
            "infer",
            "--batch-sizes",
            "1",
            "--param",
            "m=3000",
            "--min-seconds",
            "0.2",
            "--scrape-interval",
            "0",
            "--until-decided",
            "--repeat",
            "3",
            "--budget",
            "2m",
            "--out",
            str(tmp_path / out),
            *extra,
            cwd=tmp_path,
        )
        assert done.returncode == 0, done.stderr
        decided = json.loads((tmp_path / out / "run.json").read_text())["until_decided"]
        margins = {d["agent"]: (d["margin"], d["margin_from"]) for d in decided["decisions"]}
        if extra:
            assert decided["margin"] == 0.07
            assert margins == {"slow": (0.07, "--margin"), "slow#2": (0.07, "--margin")}
            continue
        assert decided["margin"] is None
        assert margins["slow"][0] == 0.05 and margins["slow"][1].startswith("by default: ")
        assert "fast" in margins["slow"][1], margins  # the side without history
        # the two earlier runs only, not this run's own processes
        margin, source = margins["slow#2"]
        assert margin == 0.05 and source.startswith("from this host's earlier runs: ")
        assert "slow#2's processes" in source and "over 2 runs, 6 processes" in source, source
        assert "(SD, at least 5%; " in source, source
        # at a glance, the A/A pair's margin as a note, said once (analysis/answers/glance.py)
        assert "from this host's earlier runs: how far apart one process of each side" in (
            done.stdout
        )


def test_a_decided_cell_is_not_measured_again(tmp_path: Path, isolated_store) -> None:
    # "near" is 3% slower, right at the 3% floor and the 3% margin: its interval straddles
    # both, so it stays open while "slow" is decided at an early look.
    out, done = _run(
        tmp_path,
        {"fast": {}, "slow": {"FAKE_STEP_SCALE": "1.5"}, "near": {"FAKE_STEP_SCALE": "1.03"}},
        "--margin",
        "0.03",
        "--repeat",
        "4",
        "--budget",
        "5m",
    )
    assert done.returncode == 0, done.stderr
    decided = json.loads((out / "run.json").read_text())["until_decided"]
    rows = pd.read_parquet(out / "results.parquet")
    measured = rows.groupby(["agent", "batch_size"]).size()
    for decision in decided["decisions"]:
        cell = (decision["agent"], decision["key"][2])
        if decision["verdict"] != "undecided":  # measured up to its deciding look, no more
            assert measured[cell] == decision["repetitions"], (decision, measured)
        else:
            assert measured[cell] == decided["rounds"] == 4, (decision, measured)
            assert decision["why"].startswith("--repeat 4: the most rounds allowed; "), decision
            assert "would likely decide it" in decision["why"] or "edge" in decision["why"]
    slow = [d for d in decided["decisions"] if d["agent"] == "slow"]
    # Decided at an early look (two processes a side on a quiet machine; the first look's
    # share of the budget is a third at --repeat 4, so a loaded one may need a third).
    assert all(d["verdict"] == "slower" and d["repetitions"] <= 3 for d in slow), slow
    baseline = max(d["repetitions"] for d in decided["decisions"])
    assert measured[("fast", 1)] >= baseline


def test_the_budget_stops_the_rounds_and_a_verdict_says_the_sides_ran_different_arithmetic(
    tmp_path: Path, isolated_store
) -> None:
    # As on a GPU: JAX multiplies float32 in TF32 by default, PyTorch in float32; both convolve
    # in TF32. The agents report it in their rows' settings (FAKE_SETTINGS stands for that).
    out, done = _run(
        tmp_path,
        {
            "fast": {"FAKE_SETTINGS": "float32_matmul=tf32,float32_conv=tf32"},
            "slow": {
                "FAKE_STEP_SCALE": "1.5",
                "FAKE_SETTINGS": "float32_matmul=float32,float32_conv=tf32",
            },
        },
        "--budget",
        "1s",
    )
    assert done.returncode == 0, done.stderr
    metadata = json.loads((out / "run.json").read_text())
    decided = metadata["until_decided"]
    # Rounds of a 1 s budget: the first ran past it ("all 1 s spent"), or a later one would.
    assert decided["stopped"].startswith(("budget: the next round would", "budget: all 1 s")), (
        decided["stopped"]
    )
    # Short processes by default (3 iterations), a given --min-seconds kept.
    loop = metadata["selection"]["loop"]
    assert (loop["min_iterations"], loop["min_seconds"]) == (3, 0.2), loop
    assert loop["warmup_iterations"] == 1, loop
    assert decided["rounds"] == 1  # the first round alone overruns 1 s
    assert all(d["verdict"] == "undecided" for d in decided["decisions"])
    assert all(d["why"].startswith("budget") for d in decided["decisions"])
    # At a glance: every line undecided, the budget's reason one note, which the rounds name.
    assert re.search(r"stopped: note \d+", done.stdout) and "\n1: budget: " in done.stdout
    assert "1 round of fresh processes in " in done.stdout  # counted in English
    # Each verdict, undecided as it is, says the two sides did not do the same arithmetic.
    said = (
        "not the same arithmetic: float32 matmul float32 in slow, tf32 in fast "
        "(--agent-env FWBENCH_TF32=off (or on) gives every agent the same)"
    )
    assert [d["arithmetic"] for d in decided["decisions"]] == [said, said], decided
    printed = re.sub(r"[│\s]+", " ", done.stdout)  # the verdict column, wrapped in its cell
    assert "not the same arithmetic: float32 matmul float32 in slow" in printed, done.stdout
    # compare's fixed-level table says it too, next to the other notes of each comparison.
    run_id = metadata["run_id"]
    compared = collector("compare", run_id, "--baseline", "fast", "--format", "json", cwd=tmp_path)
    assert compared.returncode == 0, compared.stderr
    notes = [c["notes"] for c in json.loads(compared.stdout)["comparisons"]]
    assert len(notes) == 2 and all(said in n for n in notes), notes


def test_bad_until_decided_input_is_refused_before_anything_starts(
    tmp_path: Path, isolated_store
) -> None:
    for extra, message in (
        (("--budget", "ten"), "--budget 'ten'"),
        (("--baseline", "nope"), "--baseline 'nope' is not among fast, slow"),
        (("--same-process",), "drop --same-process"),
        (("--margin", "1.5"), "--margin is a fraction"),
        (("--repeat", "1"), "--repeat 1 with --until-decided: give 2 or more rounds"),
    ):
        out, done = _run(tmp_path / extra[0].strip("-"), {"fast": {}, "slow": {}}, *extra)
        assert done.returncode == 2 and message in done.stderr, (extra, done.stderr)
        assert not out.exists()
    lonely = collector("run", "--agents", "torch-cpu", "--until-decided", cwd=tmp_path)
    assert lonely.returncode == 2 and "two or more" in lonely.stderr
    stray = collector("run", "--agents", "torch-cpu", "--margin", "0.1", cwd=tmp_path)
    assert stray.returncode == 2 and "--margin only goes with --until-decided" in stray.stderr


@pytest.mark.quiet
def test_an_open_comparison_names_processes_that_differed_in_kernel_time(
    tmp_path: Path, isolated_store
) -> None:
    # Its premise is that b's processes differ by the pages one of them faults in, and by
    # nothing else: beside two busy processes (make test-stress) the host's own noise made b's
    # processes differ by 182% and the comparison was rightly put down to that instead. So it
    # runs on a quiet host, alone (quiet_host.py), and skips saying so elsewhere.
    require_quiet_host()
    # "b" computes like "a" (busy steps of 3 ms), but its first process also faults in 32 MiB
    # of fresh pages every step, as a process whose allocator drew the bad ticket does. "c"
    # is twice as slow and faults them in in every process: decided, with where its CPU went.
    manifests = write_fake_agents(
        tmp_path / "agents",
        {
            "a": {"FAKE_SPIN": "1"},
            "b": {
                "FAKE_SPIN": "1",
                "FAKE_FAULT_MIB": "32",
                "FAKE_FAULT_ONCE": str(tmp_path / "drawn"),
            },
            "c": {"FAKE_SPIN": "1", "FAKE_FAULT_MIB": "32", "FAKE_STEP_SCALE": "2"},
        },
    )
    out = tmp_path / "run"
    done = collector(
        "run",
        "--manifests",
        str(manifests),
        "--agents",
        "a,b,c",
        "--workloads",
        "gemm",
        "--phases",
        "infer",
        "--batch-sizes",
        "1",
        "--param",
        "m=3000",
        "--min-seconds",
        "1",
        # Three rounds, not two: c's processes fault pages in every step, which on a KVM guest
        # made c ~10x slower than a with its two processes 19% apart, and two processes a side
        # (one degree of freedom) left even that open. This test is about kernel time, not
        # interference: a process left out for the hypervisor's steal (22% of a's round, seen
        # on a KVM guest) would leave a round too few.
        "--until-decided",
        "--repeat",
        "3",
        "--out",
        str(out),
        *INTERFERENCE_OFF,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    rows = pd.read_parquet(out / "results.parquet")
    shares = rows["cpu_system_percent"] / (rows["cpu_system_percent"] + rows["cpu_user_percent"])
    detail = rows[["agent", "repetition", "cpu_user_percent", "cpu_system_percent"]].to_string()
    decision, heavy = json.loads((out / "run.json").read_text())["until_decided"]["decisions"]
    assert decision["verdict"] == "undecided", decision
    assert re.search(
        r"b's processes spent \d+% to \d+% of their CPU in the kernel", decision["why"]
    )
    assert "a's processes" not in decision["why"], (decision, detail)
    assert "glibc's mmap threshold" in decision["why"]
    assert shares[rows["agent"] == "b"].max() > 0.5, detail  # the faulting process, measured
    assert heavy["agent"] == "c" and heavy["verdict"] == "slower", (heavy, detail)
    assert re.match(r"CPU in the kernel: c \d+%.*, a \d+%", heavy["kernel"]), (heavy, detail)
    assert "every step" in heavy["kernel"] and "a's processes" not in heavy["kernel"]
    # At a glance: c's line is slower, its mark the note that says where c's CPU went. Its
    # interval is "unbounded" where it spans over 100x (a loaded host: [0.0037, 0.53] once).
    found = re.search(r"\bc\s+\d\.\d{3}x\s+(?:\[[^]]+\]|unbounded)\s+slower\s+(\d+)", done.stdout)
    assert found, done.stdout
    assert f"{found.group(1)}: CPU in the kernel: c" in done.stdout, done.stdout


def test_a_failed_process_stops_its_comparisons_undecided_and_compare_agrees(
    tmp_path: Path, isolated_store
) -> None:
    # The first cell that "slow" or its twin builds fails (FAKE_FAILS_ONCE): the processes
    # of that cell that finish later must not decide its comparisons, and it is not measured
    # again for them; every other comparison goes on as usual.
    marker = tmp_path / "failed-once"
    out, done = _run(
        tmp_path,
        {"fast": {}, "slow": {"FAKE_STEP_SCALE": "1.5", "FAKE_FAILS_ONCE": str(marker)}},
        "--aa",
        "slow",
        "--budget",
        "5m",
    )
    assert done.returncode != 0 and "is failed" in done.stderr, done.stderr  # a cell failed
    decided = json.loads((out / "run.json").read_text())["until_decided"]
    rows = pd.read_parquet(out / "results.parquet")
    failed = rows[rows["status"] == "failed"]
    assert len(failed) == 1, failed
    agent, batch = failed["agent"].iloc[0], int(failed["batch_size"].iloc[0])
    assert "fake failure, once" in failed["error"].iloc[0]
    touched = [
        d
        for d in decided["decisions"]
        if d["key"][2] == batch and agent in (d["agent"], d["against"])
    ]
    assert touched, decided
    for decision in touched:
        assert decision["verdict"] == "undecided", decision
        assert f"{agent}'s process in round 1 failed (" in decision["why"], decision
        assert "fake failure, once" in decision["why"] and "cannot stand for" in decision["why"]
    # Measured once (the first round), never again for the comparisons it stopped.
    assert len(rows[(rows["agent"] == agent) & (rows["batch_size"] == batch)]) == 1, rows
    other = 3 - batch
    slower = [d for d in decided["decisions"] if d["agent"] == "slow" and d["key"][2] == other]
    assert [d["verdict"] for d in slower] == ["slower"], decided
    assert f"{agent}'s process in round 1 failed" in done.stdout  # the printed table says it
    assert decided["stopped"] == (
        f"every comparison decided or stopped ({len(touched)} undecided: a process failed, ran "
        "otherwise than asked or computed other outputs)"
    ), decided
    # `compare` on the same run: that cell's one process of the agent failed, so it is no
    # contender there, and the comparison set says so rather than leaving it out unsaid.
    shown = collector("compare", str(out), "--baseline", "fast", "--format", "json", cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    listed = json.loads(shown.stdout)
    said = f"{agent} gemm infer bs={batch} float32: every process failed ("
    assert any(s.startswith(said) for s in listed["skipped"]), listed["skipped"]
    assert not [c for c in listed["comparisons"] if (c["agent"], c["batch_size"]) == (agent, batch)]


def test_processes_that_ran_otherwise_than_asked_stop_their_comparisons(
    tmp_path: Path, isolated_store
) -> None:
    # The fake plugin runs one thread whatever is asked: with --threads 2 every row says
    # "threads: asked 2, ran 1". A verdict from them would answer another question than the
    # one asked, so none is made, after the first round, and the run says why.
    out, done = _run(
        tmp_path,
        {"fast": {}, "slow": {"FAKE_STEP_SCALE": "1.5"}},
        "--threads",
        "2",
        "--budget",
        "5m",
    )
    assert done.returncode == 0, done.stderr  # every row is ok: true for what ran
    decided = json.loads((out / "run.json").read_text())["until_decided"]
    assert decided["rounds"] == 1, decided
    assert decided["stopped"].startswith("every comparison decided or stopped (2 undecided")
    for decision in decided["decisions"]:
        assert decision["verdict"] == "undecided", decision
        for agent in ("fast", "slow"):
            said = (
                f"{agent}'s process in round 1 ran otherwise than asked (threads: asked 2, ran 1)"
            )
            assert said in decision["why"], decision
        assert decision["why"].endswith("see the rows' settings_mismatch"), decision
