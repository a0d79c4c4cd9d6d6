"""Finding the BLAS a process runs (fwbench.runtime.blas): the dynamic linker's answer for a
symbol, BLAS files named from their paths, MKL's choices read from the mapped files, Debian's
package versions, and the start-up expectation ($FWBENCH_EXPECT_BLAS). The torch plugin's use
of it: tests/torch_plugin/test_torch_blas.py; on four real BLAS libraries:
tests/docker/test_torch_deb.py."""

from __future__ import annotations

import ctypes.util
import os
from pathlib import Path

import pytest

from fwbench.runtime.blas import (
    EXPECT_VARIABLE,
    BlasLibrary,
    BlasMismatch,
    debian_package_version,
    expected_blas,
    identify,
    kind_of,
    mapped_files,
    mkl_choices,
    provider_of,
    require_expected,
)
from fwbench.runtime.plugin import InvalidContext

LIB = "/usr/lib/x86_64-linux-gnu"
MAPS = f"""\
55d0c0a00000-55d0c0a01000 r--p 00000000 08:01 123 /usr/bin/python3.11
7f00a0000000-7f00a0001000 r-xp 00000000 08:01 456 {LIB}/libmkl_rt.so
7f00a0001000-7f00a0002000 r--p 00001000 08:01 456 {LIB}/libmkl_rt.so
7f00a0100000-7f00a0101000 r-xp 00000000 08:01 457 {LIB}/libmkl_gnu_thread.so
7f00a0200000-7f00a0201000 r-xp 00000000 08:01 458 {LIB}/libmkl_avx2.so
7f00a0300000-7f00a0301000 r-xp 00000000 08:01 459 {LIB}/libmkl_vml_avx2.so
7f00a0400000-7f00a0401000 rw-p 00000000 00:00 0
7f00a0500000-7f00a0501000 rw-p 00000000 00:00 0 [heap]
"""


def test_mapped_files_lists_each_file_once_in_order() -> None:
    assert mapped_files(MAPS) == [
        "/usr/bin/python3.11",
        f"{LIB}/libmkl_rt.so",
        f"{LIB}/libmkl_gnu_thread.so",
        f"{LIB}/libmkl_avx2.so",
        f"{LIB}/libmkl_vml_avx2.so",
    ]
    assert any(os.path.basename(f).startswith("libc.so") for f in mapped_files())  # this one


@pytest.mark.parametrize(
    ("path", "kind"),
    [
        (f"{LIB}/openblas-openmp/libblas.so.3", "openblas"),
        (f"{LIB}/openblas-pthread/libopenblasp-r0.3.21.so", "openblas"),
        ("/venv/numpy.libs/libscipy_openblas64_-32a4b2a6.so", "openblas"),
        (f"{LIB}/blis-openmp/libblas.so.3", "blis"),
        (f"{LIB}/libblis.so.4", "blis"),
        (f"{LIB}/libmkl_rt.so", "mkl"),
        (f"{LIB}/blas/libblas.so.3.11.0", "netlib"),
        (f"{LIB}/lapack/liblapack.so.3.11.0", None),  # LAPACK is not the BLAS
        (f"{LIB}/libtorch_cpu.so.1.13.0", None),
    ],
)
def test_blas_files_are_named_from_their_paths(path: str, kind: str | None) -> None:
    assert kind_of(path) == kind


def test_mkl_choices_are_read_from_what_its_dispatcher_mapped() -> None:
    assert mkl_choices(mapped_files(MAPS)) == ("gnu-openmp", "avx2")  # not vml_avx2 again
    assert mkl_choices([f"{LIB}/libmkl_intel_thread.so", f"{LIB}/libmkl_def.so"]) == (
        "intel-openmp",
        "def",
    )
    assert mkl_choices([f"{LIB}/libmkl_sequential.so"]) == ("sequential", "")


def test_the_dynamic_linker_names_the_file_that_provides_a_symbol() -> None:
    libm = ctypes.util.find_library("m")
    assert libm is not None
    ctypes.CDLL(libm)  # loaded, as a framework's library is when the plugin asks
    provider = provider_of("cos", libm)
    assert provider is not None and os.path.basename(provider).startswith("libm.so")
    assert provider_of("no_such_symbol_here", libm) is None
    assert provider_of("cos", "libnot-loaded-anywhere.so.9") is None


def test_an_unknown_file_is_named_unknown_with_its_resolved_path(tmp_path: Path) -> None:
    real = tmp_path / "libsomething.so.1"
    real.write_bytes(b"")
    link = tmp_path / "libblas-link.so"
    link.symlink_to(real)
    found = identify(str(link), maps="")
    assert (found.name, found.location) == ("unknown", str(real))


def test_describe_says_name_version_threading_kernels_and_where() -> None:
    found = BlasLibrary("openblas", "0.3.21", "openmp", "Zen", "/lib/libopenblasp-r0.3.21.so")
    assert found.describe() == "openblas 0.3.21, openmp, kernels Zen (/lib/libopenblasp-r0.3.21.so)"
    assert BlasLibrary("mkl", "2024.2", location="static, torch wheel").describe() == (
        "mkl 2024.2 (static, torch wheel)"
    )
    assert BlasLibrary("unknown").describe() == "unknown"


def _dpkg(root: Path) -> Path:
    (root / "info").mkdir(parents=True)
    (root / "info" / "libblis4-openmp:amd64.list").write_text(
        f"/.\n{LIB}/blis-openmp\n{LIB}/blis-openmp/libblas.so.3\n"
    )
    (root / "info" / "libblas3:amd64.list").write_text(f"{LIB}/blas/libblas.so.3.11.0\n")
    (root / "status").write_text(
        "Package: libblas3\nStatus: install ok installed\nVersion: 3.11.0-2\n\n"
        "Package: libblis4-openmp\nStatus: install ok installed\nArchitecture: amd64\n"
        "Version: 0.9.0-1\nDescription: BLIS\n multi-line text\n"
    )
    return root


def test_a_file_without_a_version_of_its_own_gets_its_debian_packages(tmp_path: Path) -> None:
    dpkg = _dpkg(tmp_path)
    assert debian_package_version(f"{LIB}/blis-openmp/libblas.so.3", str(dpkg)) == "0.9.0-1"
    assert debian_package_version(f"{LIB}/blis-openmp", str(dpkg)) == "0.9.0-1"
    assert debian_package_version(f"{LIB}/not-packaged.so", str(dpkg)) == ""
    assert debian_package_version(f"{LIB}/blis-openmp", str(tmp_path / "no-dpkg")) == ""


OPENBLAS = BlasLibrary("openblas", "0.3.21", "openmp", "Zen", "/lib/libopenblasp-r0.3.21.so")


@pytest.mark.parametrize("wanted", ["openblas", "openblas-openmp", " OpenBLAS-OpenMP "])
def test_the_expected_blas_passes(wanted: str) -> None:
    require_expected(OPENBLAS, {EXPECT_VARIABLE: wanted})
    require_expected(OPENBLAS, {})  # nothing asked for: nothing to refuse


@pytest.mark.parametrize("wanted", ["blis", "openblas-pthread", "mkl-gnu-openmp"])
def test_another_blas_or_threading_than_expected_refuses(wanted: str) -> None:
    with pytest.raises(BlasMismatch) as refused:
        require_expected(OPENBLAS, {EXPECT_VARIABLE: wanted})
    assert str(refused.value).startswith(f"{EXPECT_VARIABLE}={wanted} but this process loaded")
    assert OPENBLAS.describe() in str(refused.value)
    assert isinstance(refused.value, InvalidContext)  # fwbench-agent: one line, exit 2


def test_an_unknown_expected_name_is_an_invalid_setting() -> None:
    with pytest.raises(InvalidContext, match="expected one of openblas, blis, mkl, netlib"):
        expected_blas({EXPECT_VARIABLE: "atlas"})
    assert expected_blas({EXPECT_VARIABLE: ""}) is None
