"""Loading plugins: the context the runtime parses once and hands over, and the contract
checks made at load (required methods, declared optional capabilities)."""

from __future__ import annotations

from pathlib import Path

import pytest
from plugin_dist import write_entry_points

from fwbench.runtime import cli
from fwbench.runtime.plugin import (
    InvalidContext,
    PluginContext,
    context_from_environment,
)
from fwbench.runtime.registry import PluginInvalid, load_plugin

ODD = {
    "records": "odd_plugins:RecordsContext",
    "no-context": "odd_plugins:NoContext",
    "no-synchronize": "odd_plugins:NoSynchronize",
    "undeclared": "odd_plugins:Undeclared",
    "unknown-capability": "odd_plugins:UnknownCapability",
    "accuracy-without-trainer": "odd_plugins:AccuracyWithoutTrainer",
    "reference": "fake_reference:FakeReferencePlugin",
}


@pytest.fixture
def odd_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(write_entry_points(tmp_path, ODD)))


def test_context_from_environment_defaults_to_auto_and_framework_thread_defaults():
    assert context_from_environment({}) == PluginContext("auto", 0, 0)
    assert context_from_environment({"FWBENCH_THREADS": " "}) == PluginContext("auto", 0, 0)


def test_context_from_environment_reads_the_three_variables():
    environ = {"FWBENCH_DEVICE": "cuda", "FWBENCH_THREADS": "3", "FWBENCH_INTEROP_THREADS": "2"}
    assert context_from_environment(environ) == PluginContext("cuda", 3, 2)


def test_context_from_environment_reads_the_gpu_math_switches():
    environ = {
        "FWBENCH_TF32": "off",
        "FWBENCH_CUDNN_BENCHMARK": " ON ",
        "FWBENCH_CUDA_EVENTS": "no",
    }
    context = context_from_environment(environ)
    assert (context.tf32, context.cudnn_benchmark, context.cuda_events) == (False, True, False)
    assert context_from_environment({"FWBENCH_TF32": "1"}).tf32 is True
    assert context_from_environment({"FWBENCH_TF32": ""}).tf32 is None


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"FWBENCH_DEVICE": "tpu"}, "FWBENCH_DEVICE='tpu': expected cpu, cuda or auto"),
        ({"FWBENCH_THREADS": "two"}, "FWBENCH_THREADS='two': expected a non-negative integer"),
        ({"FWBENCH_THREADS": "-1"}, "FWBENCH_THREADS=-1: expected a non-negative integer"),
        ({"FWBENCH_INTEROP_THREADS": "1.5"}, "FWBENCH_INTEROP_THREADS='1.5': expected a non-neg"),
        ({"FWBENCH_TF32": "maybe"}, "FWBENCH_TF32='maybe': expected on or off"),
    ],
)
def test_context_from_environment_names_the_variable_and_its_allowed_values(environ, message):
    with pytest.raises(InvalidContext, match=message.replace("(", r"\(")):
        context_from_environment(environ)


def test_a_context_built_in_code_is_checked_too():
    with pytest.raises(InvalidContext, match="device='gpu'"):
        PluginContext(device="gpu")
    with pytest.raises(InvalidContext, match="threads=-2"):
        PluginContext(threads=-2)


@pytest.mark.usefixtures("odd_plugins")
def test_the_plugin_is_constructed_with_the_context():
    context = PluginContext("cpu", 2, 1)
    plugin = load_plugin("records", context)
    assert plugin.context is context  # type: ignore[attr-defined]
    assert load_plugin("reference", context).optional_capabilities == {"accuracy", "equivalence"}


@pytest.mark.usefixtures("odd_plugins")
@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("no-context", "must be callable with one PluginContext"),
        ("no-synchronize", "lacks synchronize"),
        ("undeclared", "must declare optional_capabilities"),
        ("unknown-capability", "unknown capability 'telepathy'; known: accuracy, equivalence"),
        ("accuracy-without-trainer", "declares capability 'accuracy' but lacks trainer"),
    ],
)
def test_a_plugin_breaking_the_contract_is_refused_at_load_naming_what(name, message):
    with pytest.raises(PluginInvalid, match=f"plugin '{name}' .*{message}"):
        load_plugin(name, PluginContext())


@pytest.mark.usefixtures("odd_plugins")
def test_autocast_is_refused_to_a_plugin_without_it():
    """FWBENCH_AUTOCAST=on reaches every agent of a run (--agent-env): a plugin that cannot
    autocast must not start and run its half-precision cells pure under that name."""
    assert context_from_environment({"FWBENCH_AUTOCAST": "on"}).autocast is True
    with pytest.raises(
        InvalidContext, match=r"FWBENCH_AUTOCAST=on: plugin 'records' .* no autocast"
    ):
        load_plugin("records", PluginContext(autocast=True))
    assert load_plugin("records", PluginContext(autocast=False)) is not None


def test_the_agent_refuses_to_start_on_a_bad_variable(monkeypatch, capsys):
    monkeypatch.setenv("FWBENCH_THREADS", "many")
    assert cli.main(["--plugin", "fake"]) == 2
    assert "FWBENCH_THREADS='many': expected a non-negative integer" in capsys.readouterr().err
