"""Tests for fwbench.spec: the shipped workload catalogue, its parser and the version rules."""

from __future__ import annotations

import json
import math
from importlib import resources
from pathlib import Path

import pytest

from fwbench.spec import Catalogue, CatalogueError, load_catalogue, versions_compatible
from fwbench.spec.catalogue import UnknownWorkload, parse_catalogue

EXPECTED_WORKLOADS = (
    "gemm",
    "conv2d",
    "lenet",
    "resnet18",
    "resnet50",
    "resnet152",
    "vgg16",
    "mobilenet_v2",
    "efficientnet_b0",
    "lstm",
    "attention",
    "bert",
    "gpt",
    "generate",
    "allreduce",
    "train_to_accuracy",
)


@pytest.fixture(scope="module")
def catalogue() -> Catalogue:
    return load_catalogue()


def catalogue_text(
    *,
    schema_version: int = 1,
    flops: str = "2 * m",
    default: int = 4,
) -> str:
    """A minimal catalogue with one workload `w` and one parameter `m` (1..16)."""
    return f"""
schema_version = {schema_version}
train_flops_factor = 3

[run]
warmup_iterations = {{ default = 5, min = 0, max = 100 }}
min_iterations = {{ default = 10, min = 1, max = 100 }}
max_iterations = {{ default = 100, min = 1, max = 1000 }}
min_seconds = {{ default = 1.0, max = 60.0 }}

[workloads.w]
kind = "op"
description = "test workload"
item = "one thing"
phases = ["train", "infer"]
max_batch_size = 8
flops_forward = "{flops}"
params.m = {{ default = {default}, min = 1, max = 16 }}
"""


def conv_output_size(size: int, kernel: int, padding: int, stride: int = 1) -> int:
    """The output size of a convolution, as every framework computes it."""
    return (size + 2 * padding - kernel) // stride + 1


# --- the shipped catalogue -------------------------------------------------------------------


def test_load_catalogue_lists_the_standard_workloads(catalogue: Catalogue) -> None:
    assert tuple(catalogue.workloads) == EXPECTED_WORKLOADS


def test_load_catalogue_workloads_are_ops_or_models_with_both_phases(catalogue: Catalogue) -> None:
    for name, workload in catalogue.workloads.items():
        assert workload.name == name
        if workload.kind in ("accuracy", "collective", "generation"):
            continue
        assert workload.kind in ("op", "model")
        assert set(workload.phases) == {"train", "infer"}
        assert workload.max_batch_size >= 1


def test_the_collective_is_a_training_step_that_computes_nothing_counted(
    catalogue: Catalogue,
) -> None:
    allreduce = catalogue.get("allreduce")
    assert allreduce.kind == "collective" and allreduce.phases == ("train",)
    assert catalogue.flops_per_item("allreduce", "train", {}) == 0
    # batch_size sets the message: 1024 elements of the dtype per item.
    assert catalogue.bytes_per_step("allreduce", "infer", {}, 4, "float32") == 4 * 1024 * 4
    assert catalogue.arithmetic_intensity("allreduce", "train", {}, 4, "float32") is None


def test_accuracy_workload_trains_a_catalogue_model(catalogue: Catalogue) -> None:
    workload = catalogue.get("train_to_accuracy")
    assert workload.kind == "accuracy"
    assert workload.phases == ("train",)
    assert catalogue.get(workload.model).kind == "model"
    assert workload.resolve_params({})["target_accuracy_permille"] == 970
    assert workload.forward_flops_per_item({}) == catalogue.get("lenet").forward_flops_per_item({})


def test_kind_must_be_known_and_accuracy_needs_a_model() -> None:
    text = (resources.files("fwbench.spec") / "workloads.toml").read_text("utf-8")
    base = text.split("[workloads.gemm]")[0]
    entry = (
        '[workloads.x]\nkind = "{kind}"\n{model}description = "d"\nitem = "i"\n'
        'phases = ["train"]\nmax_batch_size = 1\nflops_forward = "1"\n'
    )
    with pytest.raises(CatalogueError, match="kind must be one of"):
        parse_catalogue(base + entry.format(kind="oops", model=""))
    with pytest.raises(CatalogueError, match="'model' is required"):
        parse_catalogue(base + entry.format(kind="accuracy", model=""))
    with pytest.raises(CatalogueError, match="'model' is required"):
        parse_catalogue(base + entry.format(kind="op", model='model = "lenet"\n'))


def test_gemm_flops_default_is_2mnk(catalogue: Catalogue) -> None:
    assert catalogue.flops_per_item("gemm", "infer", {}) == 2 * 2048 * 2048 * 2048


def test_gemm_flops_custom_shape_is_2mnk(catalogue: Catalogue) -> None:
    flops = catalogue.flops_per_item("gemm", "infer", {"m": 3, "n": 5, "k": 7})
    assert flops == 2 * 3 * 5 * 7


def test_conv2d_flops_default_shape(catalogue: Catalogue) -> None:
    assert catalogue.flops_per_item("conv2d", "infer", {}) == 2 * 64 * 64 * 9 * 56 * 56


def test_conv2d_flops_even_kernel_uses_real_output_size(catalogue: Catalogue) -> None:
    # padding kernel//2 = 2 with kernel 4: the output grows to 57 x 57 (H + 1).
    out = conv_output_size(56, kernel=4, padding=4 // 2)
    assert out == 56 + 1
    flops = catalogue.flops_per_item("conv2d", "infer", {"kernel": 4})
    assert flops == 2 * 64 * 64 * 4**2 * out * out


def test_conv2d_flops_non_square_odd_kernel(catalogue: Catalogue) -> None:
    params = {"channels_in": 3, "channels_out": 8, "height": 10, "width": 20, "kernel": 5}
    flops = catalogue.flops_per_item("conv2d", "infer", params)
    assert flops == 2 * 3 * 8 * 25 * 10 * 20


@pytest.mark.parametrize(
    "name", [w for w in EXPECTED_WORKLOADS if w not in ("allreduce", "generate")]
)
def test_flops_per_item_train_is_three_times_infer(catalogue: Catalogue, name: str) -> None:
    infer = catalogue.flops_per_item(name, "infer", {})
    assert infer > 0
    assert catalogue.flops_per_item(name, "train", {}) == 3 * infer


# --- the byte model and arithmetic intensity -------------------------------------------------

CANONICAL_SHAPES = Path(__file__).parents[1] / "equivalence" / "canonical_shapes.json"


MODELS = ("lenet", "resnet18", "resnet50", "resnet152", "vgg16", "mobilenet_v2")


@pytest.mark.parametrize("name", [*MODELS, "efficientnet_b0", "lstm"])
def test_model_parameters_are_the_trainable_parameter_count(
    catalogue: Catalogue, name: str
) -> None:
    """The byte model's shared elements are the model's trainable parameters, as checked in
    for the equivalence tests (batch-norm running statistics are buffers, not parameters)."""
    shapes = json.loads(CANONICAL_SHAPES.read_text())[name]
    trainable = sum(
        math.prod(shape)
        for key, shape in shapes.items()
        if not key.endswith(("running_mean", "running_var", "num_batches_tracked"))
    )
    workload = catalogue.get(name)
    assert workload.forward_elements({}, 0) == trainable


def test_gemm_bytes_are_both_operands_and_the_result_per_item(catalogue: Catalogue) -> None:
    params = {"m": 64, "n": 32, "k": 16}
    elements = 64 * 16 + 16 * 32 + 64 * 32
    assert catalogue.bytes_per_step("gemm", "infer", params, 3, "float32") == 3 * elements * 4
    assert catalogue.bytes_per_step("gemm", "infer", params, 3, "float64") == 3 * elements * 8
    assert catalogue.bytes_per_step("gemm", "infer", params, 3, "bfloat16") == 3 * elements * 2
    intensity = catalogue.arithmetic_intensity("gemm", "infer", params, 3, "float32")
    assert intensity == pytest.approx(2 * 64 * 32 * 16 / (elements * 4))


def test_conv2d_weights_are_shared_by_the_batch(catalogue: Catalogue) -> None:
    one = catalogue.bytes_per_step("conv2d", "infer", {}, 1, "float32")
    two = catalogue.bytes_per_step("conv2d", "infer", {}, 2, "float32")
    assert one is not None and two is not None
    weights = 64 * 64 * 3 * 3 * 4
    assert two - one == one - weights  # a second image adds its input and output, not weights


@pytest.mark.parametrize("name", ["gemm", "conv2d", "resnet18", "lstm"])
def test_train_intensity_uses_the_train_factors(catalogue: Catalogue, name: str) -> None:
    infer = catalogue.arithmetic_intensity(name, "infer", {}, 8, "float32")
    train = catalogue.arithmetic_intensity(name, "train", {}, 8, "float32")
    assert infer is not None and train is not None
    ratio = catalogue.train_flops_factor / catalogue.train_bytes_factor
    assert train == pytest.approx(infer * ratio)


def test_intensity_grows_with_the_batch_for_models(catalogue: Catalogue) -> None:
    small = catalogue.arithmetic_intensity("resnet50", "infer", {}, 1, "float32")
    large = catalogue.arithmetic_intensity("resnet50", "infer", {}, 64, "float32")
    assert small is not None and large is not None and large > small


def test_no_byte_model_or_unknown_dtype_gives_none() -> None:
    bare = parse_catalogue(catalogue_text())
    assert bare.bytes_per_step("w", "infer", {}, 1, "float32") is None
    assert bare.arithmetic_intensity("w", "infer", {}, 1, "float32") is None
    shipped = load_catalogue()
    assert shipped.arithmetic_intensity("gemm", "infer", {}, 1, "int8") is None


def test_parse_catalogue_wants_both_byte_fields() -> None:
    text = catalogue_text() + 'elements_forward = "m"\n'
    with pytest.raises(CatalogueError, match="both elements_forward and parameters"):
        parse_catalogue(text)


def test_resolve_params_fills_defaults(catalogue: Catalogue) -> None:
    assert catalogue.get("gemm").resolve_params({"m": 64}) == {"m": 64, "n": 2048, "k": 2048}
    assert catalogue.get("lenet").resolve_params({}) == {}


@pytest.mark.parametrize("value", [0, 32769])
def test_resolve_params_out_of_range_names_field_and_range(
    catalogue: Catalogue, value: int
) -> None:
    with pytest.raises(CatalogueError) as caught:
        catalogue.get("gemm").resolve_params({"m": value})
    assert caught.value.field == "params.m"
    assert "params.m" in str(caught.value)
    assert "1..32768" in str(caught.value)


def test_resolve_params_unknown_name_lists_valid_ones(catalogue: Catalogue) -> None:
    with pytest.raises(CatalogueError) as caught:
        catalogue.get("gemm").resolve_params({"image_size": 64})
    message = str(caught.value)
    assert caught.value.field == "params.image_size"
    assert "'image_size'" in message
    assert "valid: m, n, k" in message


def test_resolve_params_unknown_name_for_workload_without_params(catalogue: Catalogue) -> None:
    with pytest.raises(CatalogueError, match="valid: none"):
        catalogue.get("lenet").resolve_params({"m": 1})


def test_resolve_params_enforces_multiple_of(catalogue: Catalogue) -> None:
    resnet = catalogue.get("resnet18")
    assert resnet.resolve_params({"image_size": 96}) == {"image_size": 96}
    with pytest.raises(CatalogueError) as caught:
        resnet.resolve_params({"image_size": 100})
    assert caught.value.field == "params.image_size"
    assert "multiple of 32" in str(caught.value)


def test_catalogue_get_unknown_lists_valid_names(catalogue: Catalogue) -> None:
    with pytest.raises(UnknownWorkload) as caught:
        catalogue.get("nope")
    message = str(caught.value)
    assert "'nope'" in message
    for name in EXPECTED_WORKLOADS:
        assert name in message
    assert isinstance(caught.value, CatalogueError)
    assert caught.value.field == "workload"


def test_check_batch_size_accepts_limits(catalogue: Catalogue) -> None:
    catalogue.check_batch_size("gemm", 1)
    catalogue.check_batch_size("gemm", catalogue.get("gemm").max_batch_size)


@pytest.mark.parametrize("name", ["gemm", "lenet"])
def test_check_batch_size_rejects_zero_and_over_max(catalogue: Catalogue, name: str) -> None:
    limit = catalogue.get(name).max_batch_size
    for size in (0, limit + 1):
        with pytest.raises(CatalogueError) as caught:
            catalogue.check_batch_size(name, size)
        assert caught.value.field == "batch_size"
        assert f"1..{limit}" in str(caught.value)


# --- parse_catalogue --------------------------------------------------------------------------


def test_parse_catalogue_accepts_minimal_text() -> None:
    parsed = parse_catalogue(catalogue_text())
    assert tuple(parsed.workloads) == ("w",)
    assert parsed.flops_per_item("w", "train", {"m": 5}) == 3 * 10


def test_parse_catalogue_rejects_wrong_schema_version() -> None:
    with pytest.raises(CatalogueError, match="schema_version"):
        parse_catalogue(catalogue_text(schema_version=2))


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os')",
        "__import__('os').system('true')",
        "m.real",
        "abs(m)",
        "m if m else 1",
        "unknown_name * 2",
    ],
)
def test_parse_catalogue_rejects_unsafe_flops_expression(expression: str) -> None:
    with pytest.raises(CatalogueError, match="unsupported element"):
        parse_catalogue(catalogue_text(flops=expression))


def test_parse_catalogue_rejects_default_out_of_its_range() -> None:
    with pytest.raises(CatalogueError) as caught:
        parse_catalogue(catalogue_text(default=17))
    assert "m=17" in str(caught.value)
    assert "1..16" in str(caught.value)


# --- versions ---------------------------------------------------------------------------------


def test_versions_compatible_same_major() -> None:
    assert versions_compatible("1.0", "1.3")


def test_versions_compatible_other_major() -> None:
    assert not versions_compatible("1.0", "2.0")


@pytest.mark.parametrize("theirs", ["", "1", "1.", ".1", "v1.0", "1.0.0", "one.zero"])
def test_versions_compatible_malformed_is_false(theirs: str) -> None:
    assert not versions_compatible("1.0", theirs)
