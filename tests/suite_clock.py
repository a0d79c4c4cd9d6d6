"""Where a `make test` run's time went: each stage's start and end with the host's CPU time
over it (busy, idle, iowait, steal), every test's duration (pytest's junit XML, one file per
pytest run), and a report of both.

    python3 tests/suite_clock.py start STAGE      # a stage begins (Makefile recipes call it)
    python3 tests/suite_clock.py stop STAGE [RC]  # it ends, with its exit status
    python3 tests/suite_clock.py report [FOLDER] [--top N]   # `make test-time`

The run's folder is $FWBENCH_TEST_RUN (the Makefile sets it: test-runs/UTC-TIME, with
test-runs/latest naming the newest); `report` reads test-runs/latest unless given one. The
folder holds stages.jsonl (one line an event; a make stage's end with the pace, below),
host.json (the CPU model, its count, the pace at the start) and the junit files (*.xml) the
Makefile's pytest runs and tests/plugin_matrix.py write there.

Standard library only: it runs with the system's Python before `make setup`."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "test-runs"
VARIABLE = "FWBENCH_TEST_RUN"
STAGES = "stages.jsonl"
TOP = 30
# /proc/stat's cpu line: user nice system idle iowait irq softirq steal (guest time is in user).
CPU_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def cpu_times() -> list[int]:
    """The host's CPU time in clock ticks, all CPUs, as /proc/stat counts it; [] off Linux."""
    try:
        line = Path("/proc/stat").read_text().splitlines()[0]
    except OSError:
        return []
    return [int(v) for v in line.split()[1 : 1 + len(CPU_FIELDS)]]


def host() -> dict[str, object]:
    facts: dict[str, object] = {"cpus": os.cpu_count(), "machine": platform.machine()}
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return facts
    for key, name in (("model name", "model"), ("cpu family", "family"), ("model", "model_id")):
        for line in info.splitlines():
            if line.split(":")[0].strip() == key:
                facts[name] = line.split(":", 1)[1].strip()
                break
    return facts


PACE_BYTES = 96 * 2**20
PACE_LOOP = 3_000_000


def pace() -> float:
    """CPU seconds this process spends on a fixed workload (SHA-256 over 96 MiB, a pure-Python
    loop): how fast one of the host's CPUs is at that moment. Runs on one CPU model differ by
    a third in their tests' CPU time (a neighbour on the shared cache, a lower clock); the pace
    of each says which host was slower, where the tests' own times cannot."""
    started = time.process_time()
    hashlib.sha256(bytes(PACE_BYTES)).digest()
    total = 0
    for value in range(PACE_LOOP):
        total += value & 7
    return round(time.process_time() - started, 3)


def run_folder() -> Path:
    """$FWBENCH_TEST_RUN, made (with host.json and test-runs/latest) on first use."""
    folder = Path(os.environ.get(VARIABLE) or RUNS / time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))
    if not folder.exists():
        folder.mkdir(parents=True)
        facts = {**host(), "pace_seconds": pace()}
        (folder / "host.json").write_text(json.dumps(facts, indent=1) + "\n")
        if folder.parent == RUNS:
            latest = RUNS / "latest"
            latest.unlink(missing_ok=True)
            latest.symlink_to(folder.name)
    return folder


def record(event: str, stage: str, rc: int | None = None, say: bool = True) -> None:
    """Appends the event (one short write: stages in threads may share the file); says it on
    stdout, the stage's time at its stop, where `say`."""
    now = time.time()
    line = {"stage": stage, "event": event, "t": now, "cpu": cpu_times()}
    if rc is not None:
        line["rc"] = rc
    folder = run_folder()
    if say and event == "stop":  # a make stage's end (not the plugin stage's parts): the pace
        line["pace"] = pace()
    if say and event == "start":
        print(f"== {stage}: started {time.strftime('%H:%M:%S', time.gmtime(now))} UTC", flush=True)
    elif say:
        began = [s.began for s in stages(folder) if s.name == stage and s.ended is None]
        spent = f" after {minutes(now - began[-1]).strip()}" if began else ""
        status = "" if rc is None else f", exit status {rc}"
        print(f"== {stage}: ended{spent}{status}", flush=True)
    with (folder / STAGES).open("a") as out:
        out.write(json.dumps(line) + "\n")


@dataclass
class Stage:
    name: str
    began: float
    ended: float | None  # None: it never stopped (make gave up, or the run was killed)
    rc: int | None
    cpu: dict[str, float]  # share of the host's CPU time over the stage, by kind


def cpu_shares(before: list[int], after: list[int]) -> dict[str, float]:
    if len(before) != len(CPU_FIELDS) or len(after) != len(CPU_FIELDS):
        return {}
    spent = dict(zip(CPU_FIELDS, (b - a for a, b in zip(before, after, strict=True)), strict=True))
    total = sum(spent.values()) or 1
    busy = spent["user"] + spent["nice"] + spent["system"] + spent["irq"] + spent["softirq"]
    return {
        "busy": busy / total,
        "idle": spent["idle"] / total,
        "iowait": spent["iowait"] / total,
        "steal": spent["steal"] / total,
    }


def stage_paces(folder: Path) -> list[float]:
    """The pace taken at each make stage's end, in order."""
    path = folder / STAGES
    if not path.exists():
        return []
    events = (json.loads(line) for line in path.read_text().splitlines())
    return [float(event["pace"]) for event in events if "pace" in event]


def stages(folder: Path) -> list[Stage]:
    path = folder / STAGES
    if not path.exists():
        return []
    found: list[Stage] = []
    open_: dict[str, tuple[float, list[int]]] = {}
    for line in path.read_text().splitlines():
        event = json.loads(line)
        if event["event"] == "start":
            open_[event["stage"]] = (event["t"], event["cpu"])
        elif event["stage"] in open_:
            began, cpu = open_.pop(event["stage"])
            shares = cpu_shares(cpu, event["cpu"])
            found.append(Stage(event["stage"], began, event["t"], event.get("rc"), shares))
    found += [Stage(name, began, None, None, {}) for name, (began, _) in open_.items()]
    return sorted(found, key=lambda s: s.began)


@dataclass
class Case:
    nodeid: str  # as junit writes it: tests.folder.test_module.Class::test_name[params]
    seconds: float  # setup, call and teardown
    outcome: str  # passed, failed, error, skipped
    source: str  # the junit file it came from (its pytest run)
    cpu: float | None = None  # CPU seconds, its process's and its waited-for children's


def junit_id(nodeid: str) -> str:
    """A pytest node id as junit XML names the test (pytest's mangle_test_address: the
    parameters, which may hold '::', kept whole)."""
    address, bracket, params = nodeid.partition("[")
    names = address.split("::")
    names[0] = names[0].removesuffix(".py").replace("/", ".")
    return f"{'.'.join(names[:-1])}::{names[-1]}{bracket}{params}"


def cpu_seconds(folder: Path) -> dict[tuple[str, str], float]:
    """{(pytest run, junit id): CPU seconds} from the lines tests/conftest.py writes (a pytest
    run is named by its junit file: the same test runs in several agents' environments)."""
    found: dict[tuple[str, str], float] = {}
    for path in folder.glob("cpu-*.jsonl"):
        for line in path.read_text().splitlines():
            try:
                test = json.loads(line)
            except json.JSONDecodeError:  # a worker killed while writing
                continue
            key = (test.get("run", ""), junit_id(test["nodeid"]))
            found[key] = found.get(key, 0.0) + test["cpu"]
    return found


def cases(folder: Path) -> list[Case]:
    cpu = cpu_seconds(folder)
    found = []
    for path in sorted(folder.glob("*.xml")):
        try:
            tree = ET.parse(path)
        except ET.ParseError:  # a run killed while writing: say so, read the rest
            print(f"(unreadable: {path.name})")
            continue
        for case in tree.iter("testcase"):
            outcome = "passed"
            for kind in ("failure", "error", "skipped"):
                if case.find(kind) is not None:
                    outcome = "failed" if kind == "failure" else kind
            nodeid = f"{case.get('classname', '')}::{case.get('name', '')}"
            seconds = float(case.get("time") or 0)
            found.append(Case(nodeid, seconds, outcome, path.stem, cpu.get((path.stem, nodeid))))
    return found


def area(nodeid: str) -> str:
    """tests.collector.test_x.Class::name -> tests/collector (the folder a test lives in)."""
    parts = nodeid.split("::")[0].split(".")
    return "/".join(parts[:2]) if len(parts) > 2 else parts[0]


def minutes(seconds: float) -> str:
    return f"{seconds / 60:6.1f} min"


def report(folder: Path, top: int = TOP) -> str:
    lines = [f"Test run {folder.resolve().name}"]
    facts = (
        json.loads((folder / "host.json").read_text()) if (folder / "host.json").exists() else {}
    )
    if facts:
        lines[0] += (
            f" on {facts.get('model', '?')} (family {facts.get('family', '?')} model "
            f"{facts.get('model_id', '?')}), {facts.get('cpus', '?')} CPUs"
        )
    paces = [facts["pace_seconds"]] if "pace_seconds" in facts else []
    paces += stage_paces(folder)
    if paces:
        lines.append(
            f"pace (CPU seconds of a fixed workload, lower is faster): {paces[0]:.2f} at the "
            f"start, {min(paces):.2f} to {max(paces):.2f} over the run"
        )
    found = stages(folder)
    if found:
        lines += ["", "stage                              time     busy  idle  iowait steal  rc"]
        for stage in found:
            if stage.ended is None:
                lines.append(f"{stage.name:<30} {'(never ended)':>13}")
                continue
            shares = "".join(f" {stage.cpu.get(k, 0) * 100:5.0f}%" for k in ("busy", "idle"))
            shares += "".join(f" {stage.cpu.get(k, 0) * 100:6.1f}%" for k in ("iowait", "steal"))
            rc = "" if stage.rc is None else f"  {stage.rc}"
            lines.append(f"{stage.name:<30} {minutes(stage.ended - stage.began)}{shares}{rc}")
        ends = [s.ended for s in found if s.ended is not None]
        if ends:
            whole = max(ends) - found[0].began
            lines.append(f"{'the run, first start to last end':<30} {minutes(whole)}")
    every = cases(folder)
    if every:
        lines += tests_report(every, top)
    if not found and not every:
        lines.append("nothing recorded here")
    return "\n".join(lines)


def tests_report(every: list[Case], top: int) -> list[str]:
    by_outcome: dict[str, int] = defaultdict(int)
    by_area: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    for case in every:
        by_outcome[case.outcome] += 1
        spent = by_area[f"{case.source}: {area(case.nodeid)}"]
        spent[0] += case.seconds
        spent[1] += case.cpu or 0.0
    counts = ", ".join(f"{n} {outcome}" for outcome, n in sorted(by_outcome.items()))
    total, cpu = sum(c.seconds for c in every), sum(c.cpu or 0.0 for c in every)
    lines = ["", f"{len(every)} tests ({counts}): {minutes(total).strip()} of test time"]
    lines[-1] += f", {minutes(cpu).strip()} of CPU time" if cpu else ""
    lines += ["", "by pytest run and folder (workers' times added up):", "        time        CPU"]
    for name, (seconds, used) in sorted(by_area.items(), key=lambda kv: -kv[1][0])[:top]:
        lines.append(f"  {minutes(seconds)} {minutes(used)}  {name}")
    lines += ["", f"the {top} slowest tests (setup, call and teardown; CPU where recorded):"]
    for case in sorted(every, key=lambda c: -c.seconds)[:top]:
        mark = "" if case.outcome in ("passed", "skipped") else f" [{case.outcome}]"
        used = f"{case.cpu:7.1f} s" if case.cpu is not None else " " * 9
        lines.append(f"  {case.seconds:7.1f} s {used}  {case.source}: {case.nodeid}{mark}")
    failed = [c for c in every if c.outcome in ("failed", "error")]
    if failed:
        lines += ["", f"{len(failed)} failed:"] + [f"  {c.source}: {c.nodeid}" for c in failed]
    return lines


def main(argv: list[str]) -> int:
    if argv[:1] in (["start"], ["stop"]) and len(argv) >= 2:
        rc = int(argv[2]) if argv[0] == "stop" and len(argv) > 2 else None
        record(argv[0], argv[1], rc)
        return 0
    if argv[:1] == ["report"]:
        rest = argv[1:]
        top = TOP
        if "--top" in rest:
            at = rest.index("--top")
            top = int(rest[at + 1])
            del rest[at : at + 2]
        folder = Path(rest[0]) if rest else RUNS / "latest"
        if not folder.exists():
            print(f"no test run recorded at {folder}: `make test` records one", file=sys.stderr)
            return 2
        print(report(folder, top))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
