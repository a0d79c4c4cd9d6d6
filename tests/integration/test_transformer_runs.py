"""The transformer workloads through real agents: the torch agent refuses, as out of memory,
a GPT that cannot fit in this host before building it, and measures the next cell in the same
process; tests/benchmarks/bench_generate.py (docs/transformers.md's harness check) runs end to
end at a tiny shape: the agent over gRPC and both bare scripts, three figures each; and the
command docs/transformers.md shows, run as it is written, gives ok rows for every framework
(`make test-full`: each framework's transformers are proven in `make test` by their plugin
tests and tests/equivalence, and every agent's gRPC path by tests/integration/test_frameworks).
"""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import grpc
import pandas as pd
import pytest

from fwbench.agent.v1 import agent_pb2

sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
sys.path.insert(0, str(Path(__file__).parent))
import bench_generate
import bench_llamacpp_anchor
from collector_cli import collector

pytestmark = pytest.mark.agent
TINY = ["--layers", "2", "--hidden", "32", "--heads", "2", "--vocab", "64", "--context", "32"]


def test_a_model_that_cannot_fit_is_refused_and_the_agent_goes_on(torch_agent) -> None:
    huge = {"layers": 128, "hidden": 16384, "heads": 128, "vocab": 262144, "seq_len": 8}
    request = agent_pb2.RunRequest(
        workload="gpt",
        phase=agent_pb2.PHASE_TRAIN,
        batch_size=1,
        params=huge,
        min_iterations=1,
        warmup_iterations=0,
        min_seconds=0.0,
    )
    with pytest.raises(grpc.RpcError) as caught:
        list(torch_agent.client.run(request, 120))
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "refused before allocating" in (caught.value.details() or "")
    small = {"layers": 1, "hidden": 16, "heads": 2, "vocab": 32, "seq_len": 8}
    request.params.clear()
    request.params.update(small)
    result = list(torch_agent.client.run(request, 120))[-1].result
    assert len(result.sample_nanoseconds) == 1


def test_the_generation_harness_check_runs_end_to_end(tmp_path: Path) -> None:
    record = bench_generate.main(
        [
            *TINY,
            "--prompt-len",
            "8",
            "--new-tokens",
            "5",
            "--rounds",
            "1",
            "--iterations",
            "2",
            "--fixed-malloc",
            "--json",
            str(tmp_path / "bench.json"),
        ]
    )
    assert set(record["rounds"]) == {"fwbench", "bare (same model)", "bare (own)"}
    figures = pd.DataFrame(record["summary"]).T
    assert list(figures.columns) == ["ttft_ms", "itl_ms", "decode_tokens_per_second"]
    assert (figures > 0).all().all()
    assert (tmp_path / "bench.json").is_file() and record["fixed_malloc"] is True


@pytest.mark.full
def test_the_hugging_face_anchor_generates_the_same_tokens(tmp_path: Path) -> None:
    """The outside anchor (bench_generate.py --huggingface): transformers' own generate on the
    bare script's weights and prompt, timed per token, agreeing on every token."""
    shape = ["--prompt-len", "8", "--new-tokens", "6", "--rounds", "1", "--iterations", "1"]
    record = bench_generate.main([*TINY, *shape, "--batch", "2", "--huggingface"])
    assert record["tokens_agree"] is True
    figures = record["summary"]["Hugging Face"]
    assert figures["ttft_ms"] > 0 and figures["decode_tokens_per_second"] > 0


@pytest.mark.full
def test_the_llamacpp_anchor_times_the_agent_and_llamacpp_itself(tmp_path: Path) -> None:
    """bench_llamacpp_anchor.py at a tiny shape: a `collector run` of llamacpp-cpu and
    llama.cpp's own counter on the same GGUF, one round each, the three figures measured."""
    shape = [*TINY, "--prompt-len", "8", "--new-tokens", "6", "--threads", "1"]
    runs = ["--rounds", "1", "--bare-rounds", "1", "--generations", "2", "--iterations", "2"]
    record = bench_llamacpp_anchor.main([*shape, *runs, "--json", str(tmp_path / "a.json")])
    assert record["agent"][0] > 0 and record["llamacpp"][0] > 0 and record["bare_loop"][0] > 0
    assert record["ratio"] > 0 and record["harness_ratio"] > 0
    assert json.loads((tmp_path / "a.json").read_text())["shape"]["threads"] == 1


def doc_command(block: int = 0) -> list[str]:
    """A command docs/transformers.md shows (its bash blocks, the first by default), as
    arguments."""
    text = (Path(__file__).parents[2] / "docs" / "transformers.md").read_text()
    found = text.split("```bash\n")[1 + block].split("```", 1)[0]
    return shlex.split(found.replace("\\\n", " "))


@pytest.mark.full
def test_the_documented_command_gives_ok_rows_for_every_framework(tmp_path, isolated_store):
    command = doc_command()
    assert command[:2] == ["collector", "run"]
    done = collector(*command[1:], "--out", str(tmp_path / "run"), cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = pd.read_parquet(tmp_path / "run" / "results.parquet")
    assert set(table["status"]) == {"ok"}
    assert len(table) == 3 * (3 * 2 * 2 + 2)  # attention, bert, gpt x phases x batches; generate
    assert set(table["framework"]) == {"torch", "tensorflow", "jax"}
    generate = table[table["workload"] == "generate"]
    assert generate["decode_tokens_per_second"].notna().all()
    assert generate["time_to_first_token_seconds"].notna().all()
    kernels = {json.loads(s).get("attention_kernel", "") for s in table["settings"]}
    assert any(k.startswith("sdpa:") for k in kernels) and any("plain" in k for k in kernels)


@pytest.mark.full
def test_the_documented_every_agent_command_gives_ok_rows(tmp_path, isolated_store):
    """The second command docs/transformers.md shows (issue #57's): every CPU agent's
    transformers, llama.cpp refusing the two it cannot run (attention, bert) with a reason."""
    command = doc_command(1)
    assert command[:2] == ["collector", "run"]
    done = collector(*command[1:], "--out", str(tmp_path / "run"), cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    table = pd.read_parquet(tmp_path / "run" / "results.parquet")
    refused = table[table["status"] != "ok"]
    assert set(zip(refused["agent"], refused["workload"], refused["status"], strict=True)) == {
        ("llamacpp-cpu", "attention", "unsupported"),
        ("llamacpp-cpu", "bert", "unsupported"),
    }
    assert len(table) == 8 * 4 and table["agent"].nunique() == 8
    generate = table[table["workload"] == "generate"]
    assert len(generate) == 8 and generate["decode_bandwidth_fraction"].notna().all()
