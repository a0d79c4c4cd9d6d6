"""Tests for run planning: validating the user's selection and expanding it into cells."""

from __future__ import annotations

import itertools

import pytest

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.run.call import loop_request
from fwbench.collector.run.plan import (
    LoopSettings,
    Selection,
    SelectionError,
    build_selection,
    plan_cells,
)
from fwbench.spec import Catalogue, load_catalogue


@pytest.fixture(scope="module")
def catalogue() -> Catalogue:
    return load_catalogue()


@pytest.fixture
def describe() -> agent_pb2.DescribeResponse:
    """An agent that runs gemm inference in float32 and nothing else."""
    return agent_pb2.DescribeResponse(
        spec_version="1.0",
        identity=agent_pb2.AgentIdentity(name="fake", framework="none"),
        workloads=[
            agent_pb2.WorkloadSupport(
                name="gemm",
                phases=[agent_pb2.PHASE_INFER],
                dtypes=[agent_pb2.DTYPE_FLOAT32],
                max_batch_size=1024,
            )
        ],
    )


def select(catalogue: Catalogue, **overrides: object) -> Selection:
    arguments: dict[str, object] = {
        "workloads": "gemm",
        "phases": "infer",
        "batch_sizes": "1",
    }
    arguments.update(overrides)
    return build_selection(catalogue, **arguments)  # type: ignore[arg-type]


def selection_error(catalogue: Catalogue, **overrides: object) -> str:
    with pytest.raises(SelectionError) as caught:
        select(catalogue, **overrides)
    message = str(caught.value)
    assert message
    assert "\n" not in message
    return message


# --- build_selection --------------------------------------------------------------------------


def test_build_selection_parses_comma_separated_values(catalogue: Catalogue) -> None:
    loop = LoopSettings(warmup_iterations=2, min_iterations=3, min_seconds=0.5)
    selection = build_selection(
        catalogue,
        workloads=" gemm, resnet18 ",
        phases="train,infer",
        batch_sizes="1, 8",
        dtypes="float32,bfloat16",
        threads="0,4",
        params=["m=64", "image_size=96"],
        loop=loop,
        seed=7,
    )
    assert selection.workloads == ("gemm", "resnet18")
    assert selection.phases == ("train", "infer")
    assert selection.batch_sizes == (1, 8)
    assert selection.dtypes == ("float32", "bfloat16")
    assert selection.threads == (0, 4)
    assert selection.params == {"m": (64,), "image_size": (96,)}
    assert selection.loop == loop
    assert selection.seed == 7


def test_build_selection_defaults(catalogue: Catalogue) -> None:
    selection = select(catalogue)
    assert selection.dtypes == ("float32",)
    assert selection.threads == (0,)
    assert selection.params == {}
    assert selection.loop == LoopSettings()


def test_build_selection_removes_duplicates_keeping_order(catalogue: Catalogue) -> None:
    selection = select(
        catalogue,
        workloads="lenet,gemm,lenet,gemm",
        phases="infer,train,infer",
        batch_sizes="8,1,8,2",
        dtypes="float16,float32,float16",
        threads="4,0,4",
    )
    assert selection.workloads == ("lenet", "gemm")
    assert selection.phases == ("infer", "train")
    assert selection.batch_sizes == (8, 1, 2)
    assert selection.dtypes == ("float16", "float32")
    assert selection.threads == (4, 0)


def test_build_selection_unknown_workload_names_valid_ones(catalogue: Catalogue) -> None:
    message = selection_error(catalogue, workloads="gemm,nope")
    assert "unknown workload 'nope'" in message
    for name in catalogue.workloads:
        assert name in message


def test_build_selection_unknown_phase_names_valid_ones(catalogue: Catalogue) -> None:
    message = selection_error(catalogue, phases="inference")
    assert "unknown phase 'inference'" in message
    assert "valid: train, infer" in message


@pytest.mark.parametrize(
    ("batch_sizes", "expected"),
    [
        ("0", "invalid batch size 0: must be >= 1"),
        ("-3", "invalid batch size -3: must be >= 1"),
        ("abc", "invalid batch size 'abc': must be an integer"),
        ("1,2.5", "invalid batch size '2.5': must be an integer"),
    ],
)
def test_build_selection_invalid_batch_size(
    catalogue: Catalogue, batch_sizes: str, expected: str
) -> None:
    assert selection_error(catalogue, batch_sizes=batch_sizes) == expected


def test_build_selection_batch_size_over_workload_max_names_workload(catalogue: Catalogue) -> None:
    limit = catalogue.get("gemm").max_batch_size
    message = selection_error(catalogue, workloads="lenet,gemm", batch_sizes=f"1,{limit + 1}")
    assert "gemm" in message
    assert str(limit + 1) in message
    assert f"max {limit}" in message


def test_build_selection_batch_size_at_workload_max_is_accepted(catalogue: Catalogue) -> None:
    limit = catalogue.get("gemm").max_batch_size
    assert select(catalogue, batch_sizes=str(limit)).batch_sizes == (limit,)


def test_build_selection_unknown_dtype_names_valid_ones(catalogue: Catalogue) -> None:
    message = selection_error(catalogue, dtypes="float32,int8")
    assert "unknown dtype 'int8'" in message
    assert "valid: float32, float16, bfloat16, float64" in message


def test_build_selection_invalid_thread_count(catalogue: Catalogue) -> None:
    assert "thread count" in selection_error(catalogue, threads="-1")


@pytest.mark.parametrize("item", ["m", "m:64", "=64"])
def test_build_selection_param_without_name_value_pair(catalogue: Catalogue, item: str) -> None:
    message = selection_error(catalogue, params=[item])
    assert f"invalid --param {item!r}" in message
    assert "NAME=INTEGER" in message


def test_build_selection_param_value_not_integer(catalogue: Catalogue) -> None:
    message = selection_error(catalogue, params=["m=big"])
    assert "invalid --param 'm=big'" in message
    assert "integer" in message


def test_build_selection_param_for_no_selected_workload(catalogue: Catalogue) -> None:
    message = selection_error(catalogue, workloads="gemm,lenet", params=["image_size=64"])
    assert "--param image_size applies to none of the selected workloads" in message
    assert "k, m, n" in message


def test_build_selection_param_for_workloads_without_params(catalogue: Catalogue) -> None:
    message = selection_error(catalogue, workloads="lenet", params=["m=64"])
    assert "applies to none of the selected workloads" in message
    assert message.endswith("none")


@pytest.mark.parametrize(
    ("param", "expected"),
    [
        ("m=0", "params.m=0 is out of range: allowed 1..32768"),
        ("m=40000", "params.m=40000 is out of range: allowed 1..32768"),
    ],
)
def test_build_selection_param_out_of_range(
    catalogue: Catalogue, param: str, expected: str
) -> None:
    assert selection_error(catalogue, params=[param]) == expected


def test_a_param_sweep_makes_a_cell_per_combination_of_a_workloads_own_values(
    catalogue: Catalogue,
) -> None:
    selection = select(
        catalogue, workloads="gemm,lenet", params=["m=8,16,8", "n=4,2"], phases="infer"
    )
    assert selection.params == {"m": (8, 16), "n": (4, 2)}  # repeats dropped, order kept
    cells = plan_cells("a", agent_pb2.DescribeResponse(), catalogue, selection)
    gemm = [(c.params["m"], c.params["n"]) for c in cells if c.workload == "gemm"]
    assert gemm == [(8, 4), (8, 2), (16, 4), (16, 2)]
    assert [c.params for c in cells if c.workload == "lenet"] == [{}]  # no m, no n: one cell
    assert all(c.unsupported_reason for c in cells)  # this agent declares nothing


def test_every_value_of_a_sweep_is_checked_before_anything_runs(catalogue: Catalogue) -> None:
    message = selection_error(catalogue, params=["m=8,40000"])
    assert message == "params.m=40000 is out of range: allowed 1..32768"
    assert "integers" in selection_error(catalogue, params=["m=8,x"])


def test_build_selection_param_not_multiple_of(catalogue: Catalogue) -> None:
    message = selection_error(catalogue, workloads="resnet18", params=["image_size=100"])
    assert "params.image_size=100" in message
    assert "multiple of 32" in message


@pytest.mark.parametrize("workloads", ["", " ", ",", " , ,"])
def test_build_selection_empty_workloads(catalogue: Catalogue, workloads: str) -> None:
    message = selection_error(catalogue, workloads=workloads)
    assert message.startswith("no workloads given")
    assert "gemm" in message


def test_build_selection_empty_phases_and_batch_sizes(catalogue: Catalogue) -> None:
    assert selection_error(catalogue, phases="").startswith("no phases given")
    assert selection_error(catalogue, batch_sizes=" ").startswith("no batch size given")


@pytest.mark.parametrize(
    ("loop", "expected"),
    [
        (LoopSettings(warmup_iterations=-1), "warmup_iterations=-1"),
        (LoopSettings(min_iterations=-5), "min_iterations=-5"),
        (LoopSettings(max_iterations=10_000_001), "max_iterations=10000001"),
        (LoopSettings(min_seconds=-1.0), "invalid min seconds -1.0"),
        (LoopSettings(min_seconds=3601.0), "invalid min seconds 3601.0"),
    ],
)
def test_build_selection_loop_settings_out_of_range(
    catalogue: Catalogue, loop: LoopSettings, expected: str
) -> None:
    assert expected in selection_error(catalogue, loop=loop)


def test_loop_request_leaves_unset_fields_out() -> None:
    assert loop_request(LoopSettings()) == {"min_iterations": 0, "max_iterations": 0}
    assert loop_request(LoopSettings(0, 3, 0.5, 9)) == {
        "min_iterations": 3,
        "max_iterations": 9,
        "warmup_iterations": 0,
        "min_seconds": 0.5,
    }


# --- plan_cells -------------------------------------------------------------------------------


def test_plan_cells_cross_product_in_stable_order(
    catalogue: Catalogue, describe: agent_pb2.DescribeResponse
) -> None:
    selection = select(
        catalogue,
        workloads="gemm,lenet",
        phases="train,infer",
        batch_sizes="1,8",
        dtypes="float32,float16",
        threads="0,2",
    )
    cells = plan_cells("fake", describe, catalogue, selection)
    expected = list(
        itertools.product(
            ("gemm", "lenet"), ("train", "infer"), (1, 8), ("float32", "float16"), (0, 2)
        )
    )
    assert [(c.workload, c.phase, c.batch_size, c.dtype, c.threads) for c in cells] == expected
    assert {c.agent for c in cells} == {"fake"}
    assert cells == plan_cells("fake", describe, catalogue, selection)


def test_plan_cells_marks_unsupported_cells_with_reason(
    catalogue: Catalogue, describe: agent_pb2.DescribeResponse
) -> None:
    selection = select(
        catalogue,
        workloads="gemm,lenet",
        phases="train,infer",
        batch_sizes="1,8",
        dtypes="float32,float16",
    )
    cells = plan_cells("fake", describe, catalogue, selection)
    assert len(cells) == 2 * 2 * 2 * 2
    reasons = {(c.workload, c.phase, c.batch_size, c.dtype): c.unsupported_reason for c in cells}
    for batch in (1, 8):
        assert reasons["gemm", "infer", batch, "float32"] == ""
        assert reasons["gemm", "infer", batch, "float16"] == (
            "agent does not support dtype float16 for gemm"
        )
        for dtype in ("float32", "float16"):
            assert reasons["gemm", "train", batch, dtype] == (
                "agent does not support phase train for gemm"
            )
            for phase in ("train", "infer"):
                assert reasons["lenet", phase, batch, dtype] == "agent does not implement lenet"


def test_plan_cells_resolves_params_per_workload(
    catalogue: Catalogue, describe: agent_pb2.DescribeResponse
) -> None:
    selection = select(catalogue, workloads="gemm,lenet,resnet18", params=["m=64"])
    cells = plan_cells("fake", describe, catalogue, selection)
    params = {c.workload: dict(c.params) for c in cells}
    assert params == {
        "gemm": {"m": 64, "n": 2048, "k": 2048},
        "lenet": {},
        "resnet18": {"image_size": 224},
    }


def _moded_agent(modes: list[str], fixed: bool = False) -> agent_pb2.DescribeResponse:
    return agent_pb2.DescribeResponse(
        spec_version="1.1",
        threads=agent_pb2.ThreadSettings(intra_op_threads=2, fixed_at_startup=fixed),
        workloads=[
            agent_pb2.WorkloadSupport(
                name="gemm",
                phases=[agent_pb2.PHASE_INFER, agent_pb2.PHASE_TRAIN],
                dtypes=[agent_pb2.DTYPE_FLOAT32],
                modes=modes,
                max_batch_size=1024,
            )
        ],
    )


def test_build_selection_modes(catalogue: Catalogue) -> None:
    assert select(catalogue).modes == ("default",)
    assert select(catalogue, modes="eager, compile,eager").modes == ("eager", "compile")
    assert "cannot be combined" in selection_error(catalogue, modes="all,eager")
    assert "no mode" in selection_error(catalogue, modes=" , ")
    assert "invalid mode" in selection_error(catalogue, modes="x;rm")


@pytest.mark.parametrize(
    ("modes", "expected"),
    [
        ("default", [("", "")]),
        ("all", [("eager", ""), ("compile", "")]),
        ("compile,xla,jit", [("compile", "")]),  # each agent runs the modes it offers
        ("compile,eager", [("compile", ""), ("eager", "")]),
    ],
)
def test_plan_cells_expands_modes_per_agent(
    catalogue: Catalogue, modes: str, expected: list[tuple[str, str]]
) -> None:
    cells = plan_cells(
        "a", _moded_agent(["eager", "compile"]), catalogue, select(catalogue, modes=modes)
    )
    assert [(c.mode, c.unsupported_reason) for c in cells] == expected


def test_plan_cells_agent_offering_none_of_the_modes_gets_one_unsupported_cell(
    catalogue: Catalogue,
) -> None:
    cells = plan_cells(
        "a", _moded_agent(["jit"]), catalogue, select(catalogue, modes="xla,compile")
    )
    assert len(cells) == 1
    assert cells[0].mode == "xla"
    assert "offers none of the modes xla, compile" in cells[0].unsupported_reason
    assert "it offers jit" in cells[0].unsupported_reason


def test_plan_cells_groups_threads_outermost_for_agents_with_fixed_pools(
    catalogue: Catalogue,
) -> None:
    selection = select(catalogue, phases="infer,train", threads="2,1")
    fixed = plan_cells("a", _moded_agent(["jit"], fixed=True), catalogue, selection)
    assert [(c.threads, c.phase) for c in fixed] == [
        (2, "infer"),
        (2, "train"),
        (1, "infer"),
        (1, "train"),
    ]
    flexible = plan_cells("a", _moded_agent(["eager"]), catalogue, selection)
    assert [(c.threads, c.phase) for c in flexible] == [
        (2, "infer"),
        (1, "infer"),
        (2, "train"),
        (1, "train"),
    ]


def _world_agent() -> agent_pb2.DescribeResponse:
    """A rank of a world that offers ddp for gemm and lenet, pipeline for lenet only."""
    support = [("gemm", ["ddp"]), ("lenet", ["ddp", "pipeline"])]
    return agent_pb2.DescribeResponse(
        spec_version="1.4",
        threads=agent_pb2.ThreadSettings(intra_op_threads=1),
        world=agent_pb2.WorldInfo(world_size=2, rank=0),
        workloads=[
            agent_pb2.WorkloadSupport(
                name=name,
                phases=[agent_pb2.PHASE_TRAIN],
                dtypes=[agent_pb2.DTYPE_FLOAT32],
                strategies=strategies,
                max_batch_size=1024,
            )
            for name, strategies in support
        ],
    )


def test_a_named_strategy_offered_for_other_workloads_is_an_unsupported_cell(
    catalogue: Catalogue,
) -> None:
    """--strategies pipeline,ddp,mirrored: gemm's pipeline is a row saying why (the agent
    offers it for lenet), never dropped; mirrored (another framework's) is left out."""
    chosen = select(
        catalogue, workloads="gemm,lenet", phases="train", strategies="pipeline,ddp,mirrored"
    )
    cells = plan_cells("a", _world_agent(), catalogue, chosen)
    found = {(c.workload, c.strategy): c.unsupported_reason for c in cells}
    assert set(found) == {
        ("gemm", "ddp"),
        ("gemm", "pipeline"),
        ("lenet", "ddp"),
        ("lenet", "pipeline"),
    }
    assert found[("gemm", "ddp")] == found[("lenet", "pipeline")] == ""
    assert "offers pipeline for other workloads, not for gemm" in found[("gemm", "pipeline")]
