"""`collector run` with a generation workload end to end: the framework-free fake agent in this
interpreter, whose prefill sleeps 20 us a prompt token and whose decode steps sleep as long as
the test says, so the row's time to first token, inter-token latency and tokens per second can
be checked against durations the test controls, whatever the CPU; and a shape that breaks a
rule between parameters is refused before any agent starts."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

TESTS = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(TESTS))
from fake_agent import write_fake_agents  # noqa: E402

SHAPE = ["layers=1", "hidden=8", "heads=2", "vocab=50", "context=64", "prompt_len=40"]


@pytest.fixture
def manifests(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("FWBENCH_STORE", str(tmp_path / "store.sqlite"))
    return write_fake_agents(tmp_path / "agents", {"fake": {"FAKE_DECODE_MICROS": "2000"}})


def _run(tmp_path: Path, manifests: Path, *options: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "fwbench.collector.cli", "run", "--agents", "fake"]
    command += ["--python", f"fake={sys.executable}", "--manifests", str(manifests)]
    command += ["--iterations", "3", "--min-seconds", "0", "--out", str(tmp_path / "run")]
    for item in SHAPE:
        command += ["--param", item]
    return subprocess.run(
        [*command, *options], capture_output=True, text=True, timeout=600, check=False
    )


def test_a_generation_row_carries_its_latencies_and_rates(tmp_path: Path, manifests: Path) -> None:
    options = ["--workloads", "generate,gemm", "--phases", "train,infer"]
    done = _run(tmp_path, manifests, *options, "--batch-sizes", "4", "--param", "new_tokens=6")
    assert done.returncode == 0, done.stdout + done.stderr
    table = pd.read_parquet(tmp_path / "run" / "results.parquet")
    # generate has no training: no cell at all, not an "unsupported" one blamed on the agent.
    assert sorted(zip(table["workload"], table["phase"], strict=True)) == [
        ("gemm", "infer"),
        ("gemm", "train"),
        ("generate", "infer"),
    ]
    assert set(table["status"]) == {"ok"}
    row = table[table["workload"] == "generate"].iloc[0]
    assert row["kind"] == "generation" and row["decode_steps"] == 5 and row["prompt_tokens"] == 40
    assert 40 * 20e-6 <= row["time_to_first_token_seconds"] < 40 * 20e-6 + 0.02
    assert 2e-3 <= row["inter_token_latency_seconds"] < 2e-3 + 0.02
    assert row["inter_token_latency_p99_seconds"] >= row["inter_token_latency_seconds"]
    # 4 sequences a step, one step every inter-token latency.
    rate = 4 / row["inter_token_latency_seconds"]
    assert row["decode_tokens_per_second"] == pytest.approx(rate, rel=0.2)
    assert row["decode_bandwidth_bytes_per_second"] == pytest.approx(
        row["decode_bytes_per_step"] / row["inter_token_latency_seconds"], rel=0.2
    )
    assert row["kv_cache_bytes"] == 4 * 2 * 1 * 8 * (40 + 6 - 1) * 4
    decode = json.loads(row["decode_step_samples_ns"])
    assert len(decode) == 3 * 5 and len(json.loads(row["prefill_samples_ns"])) == 3
    assert pd.isna(table[table["workload"] == "gemm"]["time_to_first_token_seconds"]).all()
    said = " ".join(done.stderr.split())  # the cell's line, however the terminal wrapped it
    assert "; first token " in said and " a token, " in said and " tokens/s" in said


def test_a_shape_that_breaks_a_rule_is_refused_before_anything_starts(
    tmp_path: Path, manifests: Path
) -> None:
    for options, says in (
        (
            ["--param", "new_tokens=30"],
            "params.new_tokens=30 is out of range: the prompt and "
            "the new tokens must fit the context (context=64, prompt_len=40)",
        ),
        (["--param", "heads=3"], "params.heads=3 is out of range: heads must divide hidden"),
    ):
        done = _run(tmp_path, manifests, "--workloads", "generate", "--phases", "infer", *options)
        assert done.returncode == 2, done.stdout + done.stderr
        assert says in done.stderr
        assert not (tmp_path / "run").exists()
    done = _run(tmp_path, manifests, "--workloads", "generate", "--phases", "train")
    assert done.returncode == 2
    assert "workload generate has no phase train: it has infer" in done.stderr
