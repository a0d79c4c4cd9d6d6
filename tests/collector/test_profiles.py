"""A cell's profile on the collector's side (run/profiles.py): what an agent sends is checked
before a row is made of it (none where one was asked, other steps, a name twice, a negative
time, a class the mapping lacks: each a protocol violation naming its field), and the row's
columns add up: the classes' seconds per step and the time outside every operation make the
step, coverage leaves out what is unmapped, and an agent of an older protocol is said to be
one; a comparison not decided is never attributed. The common mapping classes PyTorch's names
as docs/profiling.md says."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.analysis import attribution as attribution_module
from fwbench.collector.analysis import contenders as contenders_module
from fwbench.collector.analysis.answers.gaps import gap_namer
from fwbench.collector.analysis.attribution import Attribution, ClassGap, attribute
from fwbench.collector.analysis.contenders import RunData
from fwbench.collector.analysis.report.profiles import class_colors
from fwbench.collector.run.profiles import (
    BadProfile,
    check_profile,
    profile_columns,
    profile_request,
    profile_text,
)
from fwbench.spec import op_classes

DESCRIBE = agent_pb2.DescribeResponse(spec_version="1.10", profiler="p 1")
MS = 1_000_000


def _result(**profile: object) -> agent_pb2.RunResult:
    operations = [
        agent_pb2.OperationTime(
            name="aten::mm", op_class="matmul", self_nanoseconds=5 * MS, calls=2
        ),
        agent_pb2.OperationTime(
            name="aten::relu", op_class="elementwise", self_nanoseconds=2 * MS, calls=1
        ),
        agent_pb2.OperationTime(name="odd::op", op_class="", self_nanoseconds=1 * MS, calls=1),
    ]
    fields: dict[str, object] = {"profiler": "p 1", "steps": 3, "step_nanoseconds": 10 * MS}
    fields["operations"] = operations
    fields.update(profile)
    return agent_pb2.RunResult(profile=agent_pb2.ProfileResult(**fields))  # type: ignore[arg-type]


REQUEST = agent_pb2.RunRequest(profile=agent_pb2.ProfileRequest(steps=3))


def test_a_profile_that_answers_its_request_makes_the_columns(tmp_path: Path) -> None:
    result = _result(trace_file=str(tmp_path / "profiles" / "t.json"), trace_format="chrome-trace")
    (tmp_path / "profiles").mkdir()
    (tmp_path / "profiles" / "t.json").write_text("{}")
    check_profile(REQUEST, result)
    row = profile_columns(3, DESCRIBE, result, 0.008, tmp_path)
    classes = json.loads(row["profile_classes"])
    assert classes == pytest.approx(
        {"matmul": 0.005, "elementwise": 0.002, "unmapped": 0.001, "outside": 0.002}
    )
    assert sum(classes.values()) == pytest.approx(row["profile_step_seconds"])
    assert row["profile_coverage"] == pytest.approx(0.9)  # all but the unmapped 1 of 10 ms
    assert row["profile_effect"] == pytest.approx(0.010 / 0.008)
    assert row["profile_trace"] == "profiles/t.json" and row["profile_note"] == ""
    first = json.loads(row["profile_operations"])[0]
    assert first == ["aten::mm", "matmul", 0.005, 2.0]
    said = profile_text(row)
    shares = "matmul 50%, elementwise 20%, outside 20% of a step"
    assert said == f"; profile: {shares} (3 steps, 1.25x the timed one)"


def test_what_was_not_profiled_says_why(tmp_path: Path) -> None:
    assert profile_columns(0, DESCRIBE, _result(), 0.01, tmp_path) == {}
    old = agent_pb2.DescribeResponse(spec_version="1.9")
    assert profile_request(3, old, tmp_path) is None
    said = profile_columns(3, old, agent_pb2.RunResult(), 0.01, tmp_path)
    assert said == {"profile_note": "the agent speaks protocol 1.9: profiles came with 1.10"}
    refused = _result(not_profiled="no profiler here", operations=[])
    assert (
        profile_columns(3, DESCRIBE, refused, 0.01, tmp_path)["profile_note"] == "no profiler here"
    )
    away = _result(trace_file="/in/a/container/t.json", trace_format="chrome-trace")
    row = profile_columns(3, DESCRIBE, away, 0.01, tmp_path)
    assert row["profile_trace"] is None
    assert (
        row["profile_note"] == "the trace stayed where the agent wrote it: /in/a/container/t.json"
    )


@pytest.mark.parametrize(
    ("result", "field", "why"),
    [
        (agent_pb2.RunResult(), "profile", "3 profiled steps were asked; the result has none"),
        (_result(steps=2), "profile.steps", "2 steps profiled, 3 asked"),
        (_result(step_nanoseconds=0), "profile.step_nanoseconds", "not positive (0)"),
        (
            _result(
                operations=[agent_pb2.OperationTime(name="a"), agent_pb2.OperationTime(name="a")]
            ),
            "profile.operations",
            "a name empty or sent twice: profile.operations['a']",
        ),
        (
            _result(operations=[agent_pb2.OperationTime(name="a", self_nanoseconds=-1)]),
            "profile.operations['a']",
            "negative self time (-1)",
        ),
        (
            _result(operations=[agent_pb2.OperationTime(name="a", calls=float("nan"))]),
            "profile.operations['a']",
            "calls nan is no count",
        ),
        (
            _result(operations=[agent_pb2.OperationTime(name="a", op_class="gemm")]),
            "profile.operations['a']",
            "class 'gemm' is not a common class",
        ),
        (
            _result(trace_file="/t", trace_format="svg"),
            "profile.trace_format",
            "'svg' is no trace format",
        ),
    ],
)
def test_a_profile_that_breaks_the_protocol_names_its_field(result, field, why) -> None:
    with pytest.raises(BadProfile) as broken:
        check_profile(REQUEST, result)
    assert (broken.value.field, broken.value.why) == (field, why)


def test_the_mapping_classes_pytorchs_names() -> None:
    expected = {
        "aten::mkldnn_convolution": "convolution",
        "aten::convolution_backward": "convolution",
        "aten::addmm": "matmul",
        "aten::_scaled_dot_product_flash_attention_for_cpu": "attention",
        "aten::native_batch_norm": "normalization",
        "aten::max_pool2d_with_indices": "reduction",
        "aten::add_": "elementwise",
        "aten::copy_": "data_movement",
        "Optimizer.step#SGD.step/aten::add_": "optimizer",
        "autograd::engine::evaluate_function: AddmmBackward0": "framework",
        "AddmmBackward0": "framework",
        "aten::no_such_op": "",
    }
    assert {name: op_classes.classify("torch", name) for name in expected} == expected
    assert op_classes.classify("no-such-framework", "aten::mm") == ""
    assert "outside" not in op_classes.classes()  # the collector's, never an operation's


def test_the_documented_classes_are_the_mappings() -> None:
    page = (Path(__file__).parents[2] / "docs" / "profiling.md").read_text("utf-8")
    section = page.split("## Common classes")[1].split("\n## ")[0]
    documented = re.findall(r"^\| `(\w+)` \|", section, re.M)
    assert documented == [*op_classes.classes(), op_classes.OUTSIDE]


def test_a_gap_not_decided_is_never_attributed() -> None:
    run = RunData("r", pd.DataFrame(), pd.DataFrame())
    for verdict in ("undecided", "equivalent"):
        asked = SimpleNamespace(verdict=verdict, agent="a", mode="", key=None, baseline="b")
        asked.baseline_mode = ""
        (found,) = attribute(run, [asked], [])  # type: ignore[list-item]
        said = f"the comparison is {verdict}: only a decided gap is attributed"
        assert found.not_attributed == said and found.classes == ()


def _namer(monkeypatch: pytest.MonkeyPatch, attribution: Attribution):
    """gap_namer over a profiled run whose one comparison attributes as given."""
    monkeypatch.setattr(attribution_module, "attribute", lambda run, asked, cells: [attribution])
    monkeypatch.setattr(contenders_module, "contenders", lambda run: [])
    run = RunData("r", pd.DataFrame({"profile_classes": ['{"matmul": 0.001}']}), pd.DataFrame())
    return gap_namer(run, [attribution.comparison])


def _compared(verdict: str = "slower") -> SimpleNamespace:
    asked = SimpleNamespace(verdict=verdict, agent="a", mode="", key="k", baseline="b")
    asked.baseline_mode, asked.median_seconds, asked.baseline_median_seconds = "", 0.0075, 0.002
    return asked


def test_an_answer_names_the_class_holding_most_of_a_decided_gap(monkeypatch) -> None:
    asked = _compared()
    parts = (
        ClassGap("matmul", 0.001, 0.005, 0.4 / 0.55),
        ClassGap("outside", 0.001, 0.0025, 0.15 / 0.55),
    )
    name = _namer(monkeypatch, Attribution(asked, parts))  # type: ignore[arg-type]
    assert name(asked) == "most of the gap in matmul: 4 of 5.5 ms (73%; collector explain)"
    spread = (ClassGap("outside", 0.0, 0.002, 0.4), ClassGap("matmul", 0.0, 0.0015, 0.3))
    name = _namer(monkeypatch, Attribution(asked, spread))  # type: ignore[arg-type]
    assert name(asked).startswith("the largest part of the gap outside operations: 2 of 5.5 ms")


def test_an_answer_says_why_its_gap_is_not_attributed_and_an_unprofiled_run_nothing(
    monkeypatch,
) -> None:
    asked = _compared()
    why = "profiling took 3.00x and 1.00x the timed steps: ..."
    name = _namer(monkeypatch, Attribution(asked, not_attributed=why))  # type: ignore[arg-type]
    assert name(asked) == f"gap not attributed: {why}"
    equivalent = _compared("equivalent")
    name = _namer(monkeypatch, Attribution(equivalent, not_attributed="the comparison is ..."))  # type: ignore[arg-type]
    assert name(equivalent) == ""
    plain = RunData("r", pd.DataFrame({"median_seconds": [0.001]}), pd.DataFrame())
    assert gap_namer(plain, [asked])(asked) == ""  # type: ignore[list-item]


def test_each_class_has_its_own_colour_in_the_report() -> None:
    colors = class_colors()
    assert set(colors) == {*op_classes.classes(), op_classes.OUTSIDE, "unmapped"}
    assert len(set(colors.values())) == len(colors)  # eleven classes: none shares a colour


def test_the_trace_folder_sent_is_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--out run` (relative): a local agent runs in a folder of its own, so a relative trace
    folder put its traces in the agent's environment, and the row said they stayed there."""
    monkeypatch.chdir(tmp_path)
    asked = profile_request(3, DESCRIBE, Path("run") / "profiles")
    assert asked is not None and asked.trace_dir == str(tmp_path / "run" / "profiles")
