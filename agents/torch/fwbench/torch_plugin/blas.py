"""The BLAS this process's torch actually calls, found after one small matrix product: the file
that provides `sgemm_` to libtorch_cpu (Debian's torch: whichever library the generic
libblas.so.3 resolves to; update-alternatives chooses). PyPI's wheels link MKL statically into
libtorch_cpu itself, so there the answer is "mkl (static, torch wheel)", with the version
torch's build configuration reports."""

from __future__ import annotations

import os
import re

import torch

from fwbench.runtime.blas import (
    GEMM_SYMBOL,
    BlasLibrary,
    identify,
    kind_of,
    mapped_files,
    mkl_version,
    provider_of,
)

TORCH_LIBRARY = "libtorch_cpu"


def torch_library() -> str | None:
    """The mapped libtorch_cpu file (where ATen's CPU kernels, and its BLAS calls, live)."""
    return next((f for f in mapped_files() if os.path.basename(f).startswith(TORCH_LIBRARY)), None)


def build_blas_info(config: str) -> str:
    """BLAS_INFO of torch's build configuration (mkl, open, blis, generic...), or ""."""
    match = re.search(r"BLAS_INFO=(\w+)", config)
    return match.group(1) if match else ""


def torch_blas() -> BlasLibrary:
    """The BLAS torch's gemm runs on in this process (after running one)."""
    torch.matmul(torch.ones(8, 8), torch.ones(8, 8))  # lazily loaded back ends get mapped
    library = torch_library()
    provider = provider_of(GEMM_SYMBOL, library) if library else None
    if provider is None:
        return BlasLibrary("unknown", location=f"no {GEMM_SYMBOL} found from {library}")
    if kind_of(os.path.realpath(provider)):
        return identify(provider)
    config = torch.__config__.show()
    inside = os.path.realpath(provider) == os.path.realpath(library or "")
    if inside and build_blas_info(config) == "mkl":  # PyPI's wheels: MKL linked in
        version = mkl_version(provider) or _config_mkl_version(config)
        return BlasLibrary("mkl", version, location="static, torch wheel")
    return BlasLibrary("unknown", location=os.path.realpath(provider))


def _config_mkl_version(config: str) -> str:
    match = re.search(r"Math Kernel Library Version ([\d.]+)", config)
    return match.group(1) if match else ""
