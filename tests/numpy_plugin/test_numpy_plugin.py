"""The NumPy plugin in its own agent environment (numpy-cpu): gemm forward and training step,
the BLAS it reports, thread limits, and what it refuses."""

from __future__ import annotations

import numpy as np
import pytest
from threadpoolctl import threadpool_info

from fwbench.numpy_plugin.plugin import NumpyPlugin, build_gemm, train_step
from fwbench.runtime.plugin import PluginContext, UnsupportedWorkload, WorkloadSpec
from fwbench.spec import load_catalogue

CATALOGUE = load_catalogue()
SMALL = {"m": 64, "n": 32, "k": 16}


def spec(workload: str = "gemm", **changes: object) -> WorkloadSpec:
    values: dict[str, object] = dict(
        workload=CATALOGUE.get(workload),
        phase="infer",
        batch_size=1,
        dtype="float32",
        params=SMALL,
        threads=0,
        seed=3,
        mode="eager",
    )
    values.update(changes)
    return WorkloadSpec(**values)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def plugin() -> NumpyPlugin:
    return NumpyPlugin(PluginContext(device="cpu"))


def test_describe_names_the_blas_and_offers_gemm_only(plugin: NumpyPlugin) -> None:
    description = plugin.describe()
    assert description.framework == "numpy" and description.framework_version == np.__version__
    assert set(description.capabilities) == {"gemm"}
    assert description.libraries["blas"] in {"openblas", "mkl", "blis"}
    assert description.libraries["blas_version"]


def test_infer_is_the_product_of_seeded_operands(plugin: NumpyPlugin) -> None:
    built = plugin.build(spec(batch_size=3))
    out = built.step()
    gemm = build_gemm(SMALL, 3, np.float32, seed=3)
    assert isinstance(out, np.ndarray) and out.shape == (3, 64, 32) and out.dtype == np.float32
    np.testing.assert_allclose(out, gemm.a @ gemm.b, rtol=1e-5)
    assert built.settings.dtype == "float32" and built.settings.mode == "eager"


def test_train_step_computes_both_gradients(monkeypatch: pytest.MonkeyPatch) -> None:
    gemm = build_gemm(SMALL, 1, np.float64, seed=1)
    calls: list[tuple[tuple[int, ...], tuple[int, ...]]] = []
    real = np.matmul

    def counting(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        calls.append((x.shape, y.shape))
        return real(x, y)

    monkeypatch.setattr(np, "matmul", counting)
    train_step(gemm)()
    # forward (m,k)@(k,n); dA = G (m,n) @ B.T (n,k); dB = A.T (k,m) @ G (m,n): 3x the FLOPs
    assert calls == [((64, 16), (16, 32)), ((64, 32), (32, 16)), ((16, 64), (64, 32))]


def test_threads_are_applied_per_cell_and_zero_restores_the_default(plugin: NumpyPlugin) -> None:
    def blas_threads() -> int:
        return next(i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas")

    default = blas_threads()
    assert plugin.build(spec(threads=1)).settings.intra_op_threads == 1
    assert blas_threads() == 1
    plugin.build(spec(threads=0))
    assert blas_threads() == default


@pytest.mark.parametrize(
    "changes",
    [{"workload": "conv2d"}, {"dtype": "bfloat16"}, {"mode": "jit"}],
)
def test_what_it_does_not_offer_is_unsupported(
    plugin: NumpyPlugin, changes: dict[str, str]
) -> None:
    values: dict[str, object] = dict(changes)
    if "workload" in values:
        values["params"] = CATALOGUE.get(str(values["workload"])).resolve_params({})
    with pytest.raises(UnsupportedWorkload):
        plugin.build(spec(**values))  # type: ignore[arg-type]


def test_a_cuda_context_is_refused() -> None:
    with pytest.raises(RuntimeError, match="CPU only"):
        NumpyPlugin(PluginContext(device="cuda"))
