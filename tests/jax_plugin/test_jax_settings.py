"""FWBENCH_TF32 (PluginContext.tf32) as jax's default matmul precision, and the dtype policy
half-precision rows report. Runs inside the jax-cpu agent environment."""

from __future__ import annotations

import jax

from fwbench.jax_plugin.plugin import JaxPlugin, float32_kind
from fwbench.runtime.plugin import PluginContext, WorkloadSpec
from fwbench.spec import load_catalogue

GEMM = load_catalogue().get("gemm")


def _gemm(dtype: str) -> WorkloadSpec:
    params = GEMM.resolve_params({"m": 8, "n": 8, "k": 8})
    return WorkloadSpec(GEMM, "infer", 1, dtype, params, 0, 0, "jit")


def test_tf32_switch_sets_the_default_matmul_precision_and_rows_report_it():
    saved = jax.config.jax_default_matmul_precision  # type: ignore[attr-defined]
    try:
        off = JaxPlugin(PluginContext(device="cpu", tf32=False)).build(_gemm("float32"))
        on = JaxPlugin(PluginContext(device="cpu", tf32=True)).build(_gemm("float32"))
    finally:
        jax.config.update("jax_default_matmul_precision", saved)
    assert off.settings.extra["matmul_precision"] == "float32"
    assert on.settings.extra["matmul_precision"] == "tensorfloat32"


def test_half_precision_rows_say_they_run_pure():
    built = JaxPlugin(PluginContext(device="cpu")).build(_gemm("bfloat16"))
    assert built.settings.extra["dtype_policy"].startswith("pure")
    assert (
        "dtype_policy"
        not in JaxPlugin(PluginContext(device="cpu")).build(_gemm("float32")).settings.extra
    )


def test_each_default_precision_names_what_float32_runs_in_on_a_gpu():
    # XLA's DEFAULT and HIGH precisions use TF32 tensor cores on a GPU; HIGHEST is float32.
    for precision in (None, "default", "bfloat16", "fastest", "tensorfloat32", "high"):
        assert float32_kind(precision) == "tf32", precision
    assert float32_kind("float32") == float32_kind("highest") == "float32"
