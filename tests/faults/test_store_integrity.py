"""The store and the run folder, checked and kept whole: the real `collector` command, real
local agents of the framework-free fake plugin.

- an unusable `--store` (empty, garbage, another program's database, damaged, under a file) or
  `--out` (under a file) is refused before any agent starts: exit 2, one line naming it, nothing
  started, nothing written; and, as root, a read-only or full file system too;
- `results`, `compare` and `report` on a damaged store say in one line that it cannot be read;
- refusals with their real reason: a collective without `--world-sizes`, `--budget` alone;
- every command's agent logs are kept in the run folder (a killed collector's too, moved there
  by the next command), and the record of a resume that was itself killed stays in run.json."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from subprocess import PIPE

import pytest
from fake_agent import write_fake_agents
from fault_cli import folder_rows
from interrupted import with_sigint

COLLECTOR = Path(sys.executable).with_name("collector")
SWEEP = ["--workloads", "gemm", "--phases", "infer", "--param", "m=20000"]


@pytest.fixture(scope="module")
def manifests(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_fake_agents(tmp_path_factory.mktemp("agents"), {"steady": {}})


def _command(tmp_path: Path, *args: str, **popen: object) -> subprocess.Popen[str]:
    """A collector command in `tmp_path`, with TMPDIR a folder of its own there."""
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    return subprocess.Popen(
        with_sigint([COLLECTOR, *args]),  # interrupted as from a terminal
        cwd=tmp_path,
        env={**os.environ, "TMPDIR": str(tmp), "COLUMNS": "300"},
        text=True,
        **popen,  # type: ignore[arg-type]
    )


def _collector(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    process = _command(tmp_path, *args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout, stderr = process.communicate(timeout=300)
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def _refused(done: subprocess.CompletedProcess[str], *said: str) -> str:
    """The command exited 2 with one `error:` line saying `said`, and started nothing."""
    line = " ".join(done.stderr.split())
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.count("error:") == 1 and line.startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr and "cannot save" not in done.stderr, done.stderr
    for text in said:
        assert text in line, line
    return line


@pytest.fixture(scope="module")
def stored_run(tmp_path_factory: pytest.TempPathFactory, manifests: Path) -> tuple[Path, str]:
    """A store holding a real two-cell run, and the run's id: one run for every test that
    damages such a store (each a copy of its own)."""
    tmp_path = tmp_path_factory.mktemp("stored")
    store = tmp_path / "store.sqlite"
    done = _collector(
        tmp_path,
        "run",
        "--manifests",
        str(manifests),
        "--agents",
        "steady",
        *SWEEP,
        "--batch-sizes",
        "1,2",
        "--min-seconds",
        "0",
        "--store",
        str(store),
        "--out",
        str(tmp_path / "first"),
    )
    assert done.returncode == 0, done.stderr
    return store, str(json.loads((tmp_path / "first" / "run.json").read_text())["run_id"])


def _stored_run(request: pytest.FixtureRequest, store: Path) -> str:
    """A copy of `stored_run`'s store (made at the first call) at `store`; returns its run's
    id."""
    made, run_id = request.getfixturevalue("stored_run")
    for path in made.parent.glob(f"{made.name}*"):  # with its -wal and -shm, if any
        shutil.copy(path, store.with_name(store.name + path.name.removeprefix(made.name)))
    return str(run_id)


def _damage(path: Path) -> None:
    """Garbage over every page but the first (the schema): the tables cannot be read."""
    with path.open("r+b") as sink:
        sink.seek(4096)
        sink.write(os.urandom(max(path.stat().st_size - 4096, 8 * 4096)))


def _foreign(path: Path) -> None:
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE notes (text TEXT)")


STORES: dict[str, tuple[Callable[[Path], object], str]] = {
    "empty": (lambda p: p.write_bytes(b""), "it is empty (0 bytes), not an fwbench store"),
    "garbage": (lambda p: p.write_bytes(os.urandom(40_000)), "file is not a database"),
    "foreign": (_foreign, "not an fwbench store (its tables: notes)"),
    "damaged": (_damage, "is damaged: SQLite's quick_check says"),
}


@pytest.mark.parametrize("kind", [*STORES, "under-a-file", "out-under-a-file"])
def test_an_unusable_store_or_out_is_refused_before_any_agent_starts(
    tmp_path: Path, manifests: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    store, out = tmp_path / "store.sqlite", tmp_path / "run"
    if kind in STORES:
        if kind == "damaged":
            _stored_run(request, store)
        make, said = STORES[kind]
        make(store)
        said_first = f"--store {store}"
    elif kind == "under-a-file":
        (tmp_path / "afile").write_text("x")
        store, said_first, said = tmp_path / "afile" / "s.sqlite", "--store", "is a file"
    else:
        (tmp_path / "afile").write_text("x")
        out = tmp_path / "afile" / "run"
        said_first, said = f"--out {out}", "is a file"
    before = store.read_bytes() if store.is_file() else None
    began = time.monotonic()
    done = _collector(
        tmp_path,
        "run",
        "--manifests",
        str(manifests),
        "--agents",
        "steady",
        *SWEEP,
        "--store",
        str(store),
        "--out",
        str(out),
    )
    line = _refused(done, said)
    assert line.startswith(f"error: {said_first}"), line
    assert time.monotonic() - began < 30  # no agent was started, no environment made
    assert not out.exists() and list((tmp_path / "tmp").iterdir()) == []
    assert (store.read_bytes() if store.is_file() else None) == before


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a tmpfs needs root")
@pytest.mark.parametrize("fault", ["read-only", "full"])
def test_a_read_only_or_full_file_system_is_refused_before_any_agent_starts(
    tmp_path: Path, manifests: Path, fault: str
) -> None:
    disk = tmp_path / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)], check=True)
    try:
        if fault == "read-only":
            subprocess.run(["mount", "-o", "remount,ro", str(disk)], check=True)
        for store, out in ((disk / "s.sqlite", tmp_path / "run"), (tmp_path / "s", disk / "r")):
            done = _collector(
                tmp_path,
                "run",
                "--manifests",
                str(manifests),
                "--agents",
                "steady",
                *SWEEP,
                "--store",
                str(store),
                "--out",
                str(out),
            )
            said = "is on a read-only file system" if fault == "read-only" else "MiB free on"
            line = _refused(done, str(disk), said)
            assert line.startswith(f"error: --{'store' if store.parent == disk else 'out'} ")
            assert not store.exists() and not out.exists()
    finally:
        subprocess.run(["umount", "--lazy", str(disk)], check=True)


@pytest.mark.parametrize("kind", ["empty", "garbage", "damaged"])
def test_reading_a_store_that_cannot_be_read_says_so_in_one_line(
    tmp_path: Path, kind: str, request: pytest.FixtureRequest
) -> None:
    store = tmp_path / "store.sqlite"
    run_id = _stored_run(request, store) if kind == "damaged" else "20250101-000000-ab"
    STORES[kind][0](store)
    commands = [  # side by side: each is mostly the interpreter's start
        _command(tmp_path, *args, "--store", str(store), stdout=PIPE, stderr=PIPE)
        for args in (
            ["results"],
            ["results", run_id],
            ["compare", run_id, "--baseline", "steady"],
            ["report", run_id],
        )
    ]
    for process in commands:
        stdout, stderr = process.communicate(timeout=300)
        done = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
        _refused(done, f"error: cannot read the results store {store}: ")


def test_refusals_say_their_real_reason_before_anything_starts(
    tmp_path: Path, manifests: Path
) -> None:
    base = ["run", "--manifests", str(manifests), "--agents", "steady", "--phases", "train"]
    store = ["--store", str(tmp_path / "s.sqlite"), "--out", str(tmp_path / "run")]
    alone = _collector(tmp_path, *base, "--workloads", "gemm,allreduce", *store)
    _refused(alone, "allreduce is a collective", "needs --world-sizes")
    budget = _collector(tmp_path, *base, "--workloads", "gemm", "--budget", "10m", *store)
    _refused(budget, "--budget only goes with --until-decided")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tmp"]
    assert list((tmp_path / "tmp").iterdir()) == []


def _wait_rows(process: subprocess.Popen[str], out: Path, count: int) -> None:
    deadline = time.monotonic() + 300
    while len(folder_rows(out)) < count:
        assert process.poll() is None and time.monotonic() < deadline
        time.sleep(0.1)


def test_every_commands_agent_logs_are_kept_and_a_killed_resume_is_recorded(
    tmp_path: Path, manifests: Path
) -> None:
    out, store = tmp_path / "run", ["--store", str(tmp_path / "store.sqlite")]
    command = [
        "run",
        "--manifests",
        str(manifests),
        "--agents",
        "steady",
        *SWEEP,
        "--batch-sizes",
        "1,2,3,4,5",
        "--min-seconds",
        "1",
        "--out",
        str(out),
    ]
    with (tmp_path / "collector.log").open("w") as log:
        first = _command(tmp_path, *command, *store, stdout=log, stderr=subprocess.STDOUT)
        _wait_rows(first, out, 1)
        first.kill()  # SIGKILL: its logs stay in its temporary folder
        first.wait(timeout=30)
        run_id = json.loads((out / "run.json").read_text())["run_id"]
        resume = ["run", "--resume", run_id, *store]
        second = _command(tmp_path, *resume, stdout=log, stderr=subprocess.STDOUT)
        _wait_rows(second, out, len(folder_rows(out)) + 1)  # the resume measures
        second.kill()
        second.wait(timeout=30)
    assert [p.name for p in (tmp_path / "tmp").iterdir() if p.name.startswith("fwbench-logs")]

    done = _collector(tmp_path, *resume)
    assert done.returncode == 0, done.stderr
    logs = sorted(p.name for p in (out / "logs").iterdir())
    assert logs == ["steady.log", "steady.resume-1.log", "steady.resume-2.log"], logs
    assert all((out / "logs" / name).stat().st_size for name in logs)
    assert list((tmp_path / "tmp").iterdir()) == []  # moved, then removed
    metadata = json.loads((out / "run.json").read_text())
    assert metadata["status"] == "ok" and len(metadata["resumed"]) == 2
    killed, finished = metadata["resumed"]
    assert "finished_at" not in killed and finished["status"] == "ok" and finished["finished_at"]
    assert not (out / ".reserve").exists()
