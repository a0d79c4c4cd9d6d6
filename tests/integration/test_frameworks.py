"""All framework agents through the real collector: one table for every CPU agent (torch,
TensorFlow with and without oneDNN, JAX, NumPy, and any agent added later); time to accuracy in
every framework; thread sweeps on frameworks that size their pools at start-up. Which variant
is faster is the machine's business, not the tool's: these tests assert none (the figures are
in docs/frameworks.md with their CPUs; compare's verdicts are checked with a controlled
difference in test_compare_run.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from collector_cli import collector

from fwbench.collector.agents.manifest import discover_manifests

QUICK = ["--warmup", "1", "--iterations", "3", "--min-seconds", "0"]
# Every CPU agent the project ships: a new one joins these tests by its manifest alone.
SHIPPED = discover_manifests([Path(__file__).resolve().parents[2] / "agents" / "manifests"])
CPU_AGENTS = sorted(name for name, m in SHIPPED.items() if not m.requires_gpu)
ALL_AGENTS = ",".join(CPU_AGENTS)
# Agents whose framework runs the language models alone (llama.cpp: GPT-2 from a GGUF file):
# every cell of the one table is unsupported for them, with its reason; their path through
# the collector is test_language_model_agents_run_gpt_and_generate's.
LANGUAGE_MODEL_PLUGINS = ("llamacpp",)
LANGUAGE_AGENTS = [n for n in CPU_AGENTS if SHIPPED[n].plugin in LANGUAGE_MODEL_PLUGINS]
TABLE_AGENTS = [n for n in CPU_AGENTS if n not in LANGUAGE_AGENTS]
# What is known of the first four agents; an agent added later is held to the generic checks.
KNOWN_MODES = {"torch-cpu": "eager", "tf-mkl": "function", "tf-eigen": "function", "jax-cpu": "jit"}
KNOWN_LAYOUTS = {"torch-cpu": "NCHW", "tf-mkl": "NHWC", "tf-eigen": "NHWC", "jax-cpu": "NHWC"}


def run_table(tmp_path: Path, *args: str) -> pd.DataFrame:
    out = tmp_path / "run"
    done = collector("run", *args, "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return pd.read_parquet(out / "results.parquet").sort_values("cell")


# One run, every CPU agent: an op of each kind and a model, trained and inferred (every agent's
# path through the collector; the models themselves are proven in every framework by
# tests/equivalence, and LeNet takes the same path here as ResNet-18 at a fraction of its cost),
# and LeNet trained to a target accuracy: 90%, reached in a few epochs where the catalogue's
# 97% took 8-10 (the same loop, a third of its time). One run starts each agent's processes
# once: their start-up (importing the framework) is most of this test's time, not the steps.
WORKLOADS = ("gemm", "conv2d", "lenet")
TARGET_PERMILLE = 900
# The agents whose framework's profiler is wired in (docs/profiling.md), each with its trace.
PROFILED = {
    "torch-cpu": "chrome-trace",
    "keras-torch": "chrome-trace",
    "onnxruntime-cpu": "chrome-trace",
    "paddle-cpu": "chrome-trace",
    "tf-mkl": "xplane",
    "tf-eigen": "xplane",
    "keras-tf": "xplane",
    "jax-cpu": "xplane",
    "keras-jax": "xplane",
    "openvino-cpu": "no trace",
}


@pytest.fixture(scope="module")
def one_table(tmp_path_factory: pytest.TempPathFactory) -> pd.DataFrame:
    tmp_path = tmp_path_factory.mktemp("frameworks")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FWBENCH_STORE", str(tmp_path / "store.sqlite"))
        return run_table(
            tmp_path,
            "--agents",
            ALL_AGENTS,
            "--workloads",
            ",".join([*WORKLOADS, "train_to_accuracy"]),
            "--phases",
            "train,infer",
            "--batch-sizes",
            "32",
            "--param",
            "m=256",
            "--param",
            "n=256",
            "--param",
            "k=256",
            "--param",
            "height=16",
            "--param",
            "width=16",
            "--param",
            f"target_accuracy_permille={TARGET_PERMILLE}",
            *QUICK,
            # Two steps under each framework's profiler after the timed loop: the agents that
            # profile give the time by class, the others say why not (docs/profiling.md).
            "--profile",
            "2",
        )


def test_every_cpu_agent_gives_one_table(one_table: pd.DataFrame) -> None:
    table = one_table[one_table["workload"].isin(WORKLOADS)]
    assert len(table) == len(CPU_AGENTS) * len(WORKLOADS) * 2
    # An agent may lack a workload (it says so in Describe): unsupported, never failed.
    assert set(table["status"]) <= {"ok", "unsupported"}
    ok = table[table["status"] == "ok"]
    assert set(ok["agent"]) == set(TABLE_AGENTS)
    assert (table[table["agent"].isin(KNOWN_MODES)]["status"] == "ok").all()
    frameworks = ok.groupby("agent")["framework"].first().to_dict()
    assert frameworks == {name: SHIPPED[name].plugin for name in TABLE_AGENTS}
    modes = ok.groupby("agent")["mode"].unique().map(list).to_dict()
    assert {a: modes[a] for a in KNOWN_MODES} == {a: [m] for a, m in KNOWN_MODES.items()}
    conv = ok[ok["workload"] == "conv2d"].groupby("agent")["layout"].first().to_dict()
    assert {a: conv[a] for a in KNOWN_LAYOUTS} == KNOWN_LAYOUTS
    assert (ok["intra_op_threads"] > 0).all()
    versions = table.groupby("agent")["framework_version"].first()
    assert versions["tf-mkl"] == versions["tf-eigen"]  # the same build, only the switch differs
    onednn = {
        agent: json.loads(table[table["agent"] == agent]["settings"].iloc[0])["onednn_enabled"]
        for agent in ("tf-mkl", "tf-eigen")
    }
    assert onednn == {"tf-mkl": "true", "tf-eigen": "false"}


def test_each_agent_profiles_its_cells_or_says_why_not(one_table: pd.DataFrame) -> None:
    table = one_table[one_table["workload"].isin(WORKLOADS) & (one_table["status"] == "ok")]
    profiled = table[table["profile_classes"].notna()]
    assert set(profiled["agent"]) >= set(PROFILED) & set(TABLE_AGENTS)
    for _, row in profiled.iterrows():
        classes = json.loads(row["profile_classes"])
        assert "unmapped" not in classes, (row["agent"], row["profile_operations"])
        # The classes make up the step: its operations and the time outside them, or more where
        # operations ran at once on several threads (TensorFlow's executor runs a training
        # step's independent gradients side by side): then nothing is outside.
        step, total = row["profile_step_seconds"], sum(classes.values())
        assert total == pytest.approx(step, rel=0.01) or (total > step and not classes["outside"])
        assert row["profile_steps"] == 2
        # The profiler's own trace, where it writes one (OpenVINO's counters have none).
        trace = row["profile_trace"]
        traced = isinstance(trace, str) and trace.startswith("profiles/")
        assert traced == (PROFILED.get(row["agent"]) != "no trace"), row["profile_trace"]
    conv = profiled[(profiled["workload"] == "conv2d") & (profiled["phase"] == "train")]
    assert all(json.loads(c)["convolution"] > 0 for c in conv["profile_classes"])
    others = table[table["profile_classes"].isna()]
    assert others["profile_note"].str.len().gt(0).all(), others[["agent", "profile_note"]]


def test_every_framework_trains_to_the_target_accuracy(one_table: pd.DataFrame) -> None:
    table = one_table[one_table["workload"] == "train_to_accuracy"]
    assert list(table["phase"].unique()) == ["train"]  # an accuracy workload only trains
    assert sorted(table["agent"]) == CPU_AGENTS
    assert (table[table["agent"].isin(KNOWN_MODES)]["status"] == "ok").all()
    table = table[table["status"] == "ok"]  # a plugin without train_to_accuracy: unsupported
    assert table["reached_target"].all(), table[["agent", "final_accuracy", "epochs"]]
    assert (table["final_accuracy"] >= TARGET_PERMILLE / 1000).all()
    assert (table["target_accuracy"] == TARGET_PERMILLE / 1000).all()
    assert (table["time_to_target_seconds"] > 0).all()
    for history in table["accuracy_history"]:
        curve = json.loads(history)
        assert [e["epoch"] for e in curve] == list(range(1, len(curve) + 1))
    # Same data, order, initial weights and optimizer: the frameworks need similar epochs.
    epochs = table["epochs_to_target"]
    assert epochs.max() - epochs.min() <= max(3, epochs.min()), table[["agent", "epochs_to_target"]]


@pytest.mark.skipif(not LANGUAGE_AGENTS, reason="no language-model agent is shipped")
def test_language_model_agents_run_gpt_and_generate(tmp_path, isolated_store):
    shape = {"layers": 1, "hidden": 32, "heads": 2, "vocab": 64, "context": 16}
    shape |= {"seq_len": 8, "prompt_len": 4, "new_tokens": 4}
    params = [f"--param={name}={value}" for name, value in shape.items()]
    agents = ",".join(LANGUAGE_AGENTS)
    table = run_table(
        tmp_path,
        *("--agents", agents, "--workloads", "gpt,generate", "--phases", "infer"),
        *("--batch-sizes", "2", *params, *QUICK),
    )
    assert (table["status"] == "ok").all(), table[["agent", "workload", "status"]]
    assert sorted(table["agent"]) == sorted(LANGUAGE_AGENTS * 2)
    assert (table[table["workload"] == "generate"]["decode_tokens_per_second"] > 0).all()
    rows = zip(table["agent"], table["settings"], strict=True)
    weights = {agent: json.loads(settings)["weights"] for agent, settings in rows}
    assert weights == {a: "Q8_0" if a == "llamacpp-q8" else "F32" for a in LANGUAGE_AGENTS}


# Both fix their pools at start-up; the collector restarts either the same way (make test-full).
@pytest.mark.parametrize("agent", ["jax-cpu", pytest.param("tf-eigen", marks=pytest.mark.full)])
def test_thread_sweep_restarts_agents_that_fix_their_pools(tmp_path, isolated_store, agent):
    table = run_table(
        tmp_path,
        "--agents",
        agent,
        "--workloads",
        "gemm",
        "--phases",
        "infer",
        "--batch-sizes",
        "1",
        "--threads",
        "1,2",
        "--param",
        "m=512",
        "--param",
        "n=512",
        "--param",
        "k=512",
        *QUICK,
    )
    assert list(table["threads_requested"]) == [1, 2]
    assert list(table["intra_op_threads"]) == [1, 2]
    logs = sorted(p.name for p in (tmp_path / "run" / "logs").iterdir())
    assert logs == [f"{agent}-threads1.log", f"{agent}-threads2.log", f"{agent}.log"]
