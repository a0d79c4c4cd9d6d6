"""The torch plugin's BLAS report and its start-up refusal, and what it offers on a torch that
predates torch.compile (Debian 12's 1.13: the torch-deb images), the version monkeypatched
here. Runs inside the torch-cpu agent environment (PyPI's wheel: MKL linked statically into
libtorch_cpu); tests/docker/test_torch_deb.py runs the real 1.13 on four BLAS libraries."""

from __future__ import annotations

import pytest
import torch

from fwbench.runtime.blas import EXPECT_VARIABLE, BlasMismatch
from fwbench.runtime.plugin import PluginContext, UnsupportedWorkload, WorkloadSpec
from fwbench.spec import load_catalogue
from fwbench.torch_plugin import plugin as torch_plugin
from fwbench.torch_plugin.blas import torch_blas, torch_library
from fwbench.torch_plugin.plugin import TorchPlugin, is_out_of_memory

CATALOGUE = load_catalogue()


def spec(workload: str, mode: str) -> WorkloadSpec:
    w = CATALOGUE.get(workload)
    params = w.resolve_params({"m": 16, "n": 16, "k": 16} if workload == "gemm" else {})
    return WorkloadSpec(w, "infer", 1, "float32", params, 0, 0, mode)


def test_the_wheel_reports_its_static_mkl_not_numpys_openblas() -> None:
    found = torch_blas()
    assert torch_library() is not None
    assert (found.name, found.location) == ("mkl", "static, torch wheel")
    assert found.version[:4].isdigit()  # "2024.2"


def test_describe_names_the_loaded_blas_and_the_build_setting(monkeypatch) -> None:
    monkeypatch.delenv(EXPECT_VARIABLE, raising=False)
    libraries = TorchPlugin(PluginContext(device="cpu")).describe().libraries
    assert libraries["blas"].startswith("mkl ")
    assert libraries["blas"].endswith("(static, torch wheel)")
    assert libraries["blas_info"] == "mkl"


@pytest.mark.parametrize("wanted", ["openblas", "blis-openmp", "netlib"])
def test_another_expected_blas_refuses_to_start(monkeypatch, wanted: str) -> None:
    monkeypatch.setenv(EXPECT_VARIABLE, wanted)
    refusal = f"{EXPECT_VARIABLE}={wanted} but this process loaded mkl"
    with pytest.raises(BlasMismatch, match=refusal):
        TorchPlugin(PluginContext(device="cpu"))


def test_the_expected_blas_starts(monkeypatch) -> None:
    monkeypatch.setenv(EXPECT_VARIABLE, "mkl")
    assert TorchPlugin(PluginContext(device="cpu")).blas.name == "mkl"


@pytest.fixture
def torch_1_13(monkeypatch) -> TorchPlugin:
    monkeypatch.delenv(EXPECT_VARIABLE, raising=False)
    monkeypatch.setattr(torch, "__version__", "1.13.0a0")  # what Debian's build reports
    return TorchPlugin(PluginContext(device="cpu"))


def test_before_torch_2_describe_offers_eager_only(torch_1_13: TorchPlugin) -> None:
    capabilities = torch_1_13.describe().capabilities
    assert capabilities and all(c.modes == ("eager",) for c in capabilities.values())
    # No scaled_dot_product_attention before 2.0: no transformer offered at all.
    assert not {"attention", "bert", "gpt", "generate"} & set(capabilities)


def test_before_torch_2_compile_is_unsupported_not_a_failure(torch_1_13: TorchPlugin) -> None:
    with pytest.raises(UnsupportedWorkload, match="no mode 'compile'; offered: eager"):
        torch_1_13.build(spec("gemm", "compile"))
    assert torch_1_13.build(spec("gemm", "eager")).step() is not None


def test_from_torch_2_compile_is_offered(monkeypatch) -> None:
    monkeypatch.setattr(torch, "__version__", "2.0.0")
    assert torch_plugin.offered_modes() == ("eager", "compile")


def test_out_of_memory_is_recognised_without_torch_out_of_memory_error(monkeypatch) -> None:
    """torch 1.13 has only torch.cuda.OutOfMemoryError."""
    monkeypatch.delattr(torch, "OutOfMemoryError", raising=False)
    assert is_out_of_memory(torch.cuda.OutOfMemoryError("CUDA out of memory"))
    assert not is_out_of_memory(ValueError("out of memory"))
