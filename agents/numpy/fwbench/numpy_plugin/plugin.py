"""NumpyPlugin: the dense matrix product on numpy's own BLAS, with no framework in between.

Why an agent for it: every framework's gemm is a BLAS call plus the framework's overhead, and
the studies this tool serves compare BLAS builds (OpenBLAS, MKL, BLIS). numpy-cpu measures the
BLAS that numpy's wheel bundles, named in Describe (threadpoolctl's report: library, version,
the kernel architecture it picked), so a framework's gemm can be read against the bare library.

Only gemm: a training step is the forward product and both input gradients with a gradient of
ones (C = A @ B; dA = G @ B.T; dB = A.T @ G: 3x the forward FLOPs, as the catalogue counts)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

import numpy as np
import psutil
from threadpoolctl import threadpool_info, threadpool_limits

from fwbench.runtime.hostinfo import cpu_model
from fwbench.runtime.plugin import (
    BuiltStep,
    Capability,
    DeviceInfo,
    OutOfMemory,
    PluginContext,
    PluginDescription,
    Settings,
    UnsupportedWorkload,
    WorkloadSpec,
)

PLUGIN_VERSION = "0.1.0"
DTYPES = {"float32": np.float32, "float64": np.float64}
MODES = ("eager",)
# Variables that change which BLAS kernel runs or how many threads it uses; reported when set
# (a host may pin OpenBLAS to an older core type: OPENBLAS_CORETYPE).
_BLAS_VARIABLES = (
    "OPENBLAS_CORETYPE",
    "OPENBLAS_L2_SIZE",
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
)


def _blas() -> dict[str, object] | None:
    """threadpoolctl's record of the BLAS numpy calls, None when none is loaded."""
    return next((i for i in threadpool_info() if i.get("user_api") == "blas"), None)


def blas_libraries() -> dict[str, str]:
    """The BLAS numpy calls: library, version, kernel architecture."""
    blas = _blas()
    if blas is None:
        return {}
    libraries = {"blas": str(blas.get("internal_api", "")), "blas_version": str(blas["version"])}
    if blas.get("architecture"):
        libraries["blas_architecture"] = str(blas["architecture"])
    return libraries


class NumpyPlugin:
    optional_capabilities: frozenset[str] = frozenset()

    def __init__(self, context: PluginContext) -> None:
        if context.device == "cuda":
            raise RuntimeError("FWBENCH_DEVICE=cuda but numpy runs on the CPU only")
        if context.threads:
            threadpool_limits(limits=context.threads, user_api="blas")
        self.default_threads = self._threads()

    @staticmethod
    def _threads() -> int:
        blas = _blas()
        return int(str(blas["num_threads"])) if blas else 1

    def describe(self) -> PluginDescription:
        memory = psutil.virtual_memory().total
        return PluginDescription(
            framework="numpy",
            framework_version=np.__version__,
            plugin_version=PLUGIN_VERSION,
            libraries=blas_libraries(),
            environment={k: os.environ[k] for k in _BLAS_VARIABLES if k in os.environ},
            devices=(DeviceInfo("cpu", 0, cpu_model(), memory),),
            intra_op_threads=self._threads(),
            inter_op_threads=1,
            capabilities={"gemm": Capability(("train", "infer"), tuple(DTYPES), MODES)},
        )

    def build(self, spec: WorkloadSpec) -> BuiltStep:
        if spec.workload.name != "gemm":
            raise UnsupportedWorkload(f"numpy plugin has no workload {spec.workload.name}")
        for aspect, value, offered in (
            ("dtype", spec.dtype, tuple(DTYPES)),
            ("mode", spec.mode, MODES),
        ):
            if value not in offered:
                raise UnsupportedWorkload(
                    f"numpy plugin: no {aspect} {value!r}; offered: {', '.join(offered)}"
                )
        threadpool_limits(limits=spec.threads or self.default_threads, user_api="blas")
        try:
            step: Callable[[], object]
            step = build_gemm(spec.params, spec.batch_size, DTYPES[spec.dtype], spec.seed)
            step = step if spec.phase == "infer" else train_step(step)
        except MemoryError as error:
            raise OutOfMemory(f"numpy: {error}") from error
        return BuiltStep(step, self._settings(spec))

    def _settings(self, spec: WorkloadSpec) -> Settings:
        return Settings(
            dtype=spec.dtype,
            intra_op_threads=self._threads(),
            inter_op_threads=1,
            mode=spec.mode,
            layout="row-major",
            device="cpu",
            extra=blas_libraries(),
        )

    def synchronize(self, output: object) -> None:
        """numpy returns when the product is done: nothing runs asynchronously."""


class _Gemm:
    """The operands of one gemm cell and its forward product."""

    def __init__(self, a: np.ndarray, b: np.ndarray) -> None:
        self.a, self.b = a, b
        self.grad = np.ones(a.shape[:-1] + b.shape[-1:], dtype=a.dtype)

    def __call__(self) -> np.ndarray:
        return np.matmul(self.a, self.b)


def build_gemm(params: Mapping[str, int], batch: int, dtype: type, seed: int) -> _Gemm:
    m, n, k = params["m"], params["n"], params["k"]
    lead = (batch,) if batch > 1 else ()
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((*lead, m, k), dtype=dtype)
    b = rng.standard_normal((*lead, k, n), dtype=dtype)
    return _Gemm(a, b)


def train_step(gemm: _Gemm) -> Callable[[], object]:
    """Forward and both input gradients, as the frameworks' training step of an op does."""

    def step() -> object:
        out = gemm()
        np.matmul(gemm.grad, np.swapaxes(gemm.b, -1, -2))
        np.matmul(np.swapaxes(gemm.a, -1, -2), gemm.grad)
        return out

    return step
