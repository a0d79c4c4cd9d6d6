"""Which BLAS library a process actually runs, found in the process itself rather than taken
from what was asked for: an agent whose image selects a BLAS (Debian's update-alternatives
behind the generic libblas.so.3) names the one it loaded, and refuses to start when the
environment asks for another ($FWBENCH_EXPECT_BLAS).

A plugin finds the file that provides `sgemm_` to its framework's library (`provider_of`: the
dynamic linker's own answer, dlsym then dladdr), then `identify` names that file: openblas,
blis, mkl or netlib (the reference BLAS), with the version the library reports about itself
where it can. Framework-free: ctypes and /proc/self/maps only."""

from __future__ import annotations

import ctypes
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

from fwbench.runtime.invalid_context import InvalidContext

EXPECT_VARIABLE = "FWBENCH_EXPECT_BLAS"
KNOWN = ("openblas", "blis", "mkl", "netlib")
GEMM_SYMBOL = "sgemm_"
# Basename patterns of BLAS files, checked in order; the reference BLAS is Debian's
# blas/libblas.so.3.X (any other plain libblas.so is named by its folder when that says more).
_FILES = (
    ("mkl", re.compile(r"^libmkl_")),
    ("openblas", re.compile(r"openblas")),
    ("blis", re.compile(r"^libblis")),
)
_NETLIB_FILE = re.compile(r"^libblas\.so\.3\.(\d+\.\d+)$")


class BlasMismatch(InvalidContext):
    """The loaded BLAS is not the one $FWBENCH_EXPECT_BLAS asks for: the agent must not start."""


@dataclass(frozen=True)
class BlasLibrary:
    name: str  # openblas, blis, mkl, netlib, or "unknown"
    version: str = ""  # as the library reports it (or its Debian package); "" when unknown
    threading: str = ""  # openmp, pthread, serial; MKL's layer: gnu-openmp, intel-openmp, ...
    kernels: str = ""  # the code path it picked for this CPU (OpenBLAS core, MKL library)
    location: str = ""  # the file doing the work, links resolved; or "static, ..."

    def describe(self) -> str:
        """e.g. "openblas 0.3.21, openmp, kernels Zen (/usr/lib/.../libopenblasp-r0.3.21.so)"."""
        details = [self.version] if self.version else []
        details += [self.threading] if self.threading else []
        details += [f"kernels {self.kernels}"] if self.kernels else []
        head = f"{self.name} {', '.join(details)}" if details else self.name
        return f"{head} ({self.location})" if self.location else head

    def matches(self, wanted: str) -> bool:
        """`wanted` is NAME or NAME-THREADING: "openblas", "openblas-openmp", "mkl-gnu-openmp"."""
        name, _, threading = wanted.partition("-")
        return self.name == name and (not threading or self.threading == threading)


class _DlInfo(ctypes.Structure):
    _fields_ = [
        ("dli_fname", ctypes.c_char_p),
        ("dli_fbase", ctypes.c_void_p),
        ("dli_sname", ctypes.c_char_p),
        ("dli_saddr", ctypes.c_void_p),
    ]


def provider_of(symbol: str, library: str) -> str | None:
    """The file (as the dynamic linker loaded it, links unresolved) that provides `symbol` to
    `library`, an already-loaded shared object, searched as dlsym searches it: the library,
    then its dependencies. None when `library` is not loaded or `symbol` is not found."""
    try:
        handle = ctypes.CDLL(library, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        function = getattr(handle, symbol)
    except (OSError, AttributeError):
        return None
    info = _DlInfo()
    libc = ctypes.CDLL(None)
    libc.dladdr.argtypes = [ctypes.c_void_p, ctypes.POINTER(_DlInfo)]
    address = ctypes.cast(function, ctypes.c_void_p).value
    if not libc.dladdr(address, ctypes.byref(info)) or not info.dli_fname:
        return None
    return os.fsdecode(info.dli_fname)


def mapped_files(maps: str | None = None) -> list[str]:
    """Files mapped into this process (/proc/self/maps), in order, each once."""
    if maps is None:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as stream:
            maps = stream.read()
    seen: dict[str, None] = {}
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and fields[5].startswith("/"):
            seen.setdefault(fields[5], None)
    return list(seen)


def kind_of(path: str) -> str | None:
    """openblas, blis, mkl or netlib from a BLAS file's resolved path; None for other files."""
    base = os.path.basename(path)
    for name, pattern in _FILES:
        if pattern.search(base):
            return name
    if _NETLIB_FILE.match(base):
        return "netlib"
    if base.startswith("libblas.so"):  # e.g. Debian's alternatives folder names the library
        folder = os.path.basename(os.path.dirname(path))
        for name, pattern in _FILES:
            if pattern.search(f"lib{folder}"):
                return name
    return None


def identify(loaded_as: str, maps: str | None = None) -> BlasLibrary:
    """Names the BLAS in `loaded_as` (a loaded file, as dladdr reports it) and asks it what it
    is: version, threading, kernels. An unrecognised file is "unknown", with its path. `maps`:
    /proc/self/maps' text (read when None), where MKL's dispatcher shows what it loaded."""
    path = os.path.realpath(loaded_as)
    name = kind_of(path) or "unknown"
    if name == "openblas":
        return _openblas(loaded_as)
    if name == "mkl":
        threading, kernels = mkl_choices(mapped_files(maps))
        return BlasLibrary(name, mkl_version(loaded_as), threading, kernels, path)
    version = _version(name, loaded_as, path) or debian_package_version(path)
    if name == "blis":  # Debian's folders say how it was built: blis-openmp, blis-pthread
        folder = os.path.basename(os.path.dirname(path))
        return BlasLibrary(name, version, folder.removeprefix("blis-"), location=path)
    threading = "serial" if name == "netlib" else ""
    return BlasLibrary(name, version, threading, location=path)


def _openblas(loaded_as: str) -> BlasLibrary:
    """Debian's openblas-*/libblas.so.3 is a thin interface over libopenblas.so.0, itself
    chosen by another alternative: the core that answers is the one that does the work."""
    core = provider_of("openblas_get_config", loaded_as) or loaded_as
    config = _call_string(core, "openblas_get_config")  # "OpenBLAS 0.3.21 DYNAMIC_ARCH ..."
    match = re.search(r"OpenBLAS ([\d.]+)", config)
    parallel = _call_int(core, "openblas_get_parallel")
    return BlasLibrary(
        "openblas",
        match.group(1) if match else "",
        {0: "serial", 1: "pthread", 2: "openmp"}.get(parallel, ""),
        _call_string(core, "openblas_get_corename"),
        os.path.realpath(core),
    )


_MKL_THREADING = re.compile(r"^libmkl_(gnu_thread|intel_thread|tbb_thread|pgi_thread|sequential)")
_MKL_KERNELS = re.compile(r"^libmkl_(def|mc3?|avx2?|avx512(?:_mic)?)\.so")


def mkl_choices(files: list[str]) -> tuple[str, str]:
    """(threading layer, kernel library) MKL's dispatcher loaded, from the mapped files."""
    names = [os.path.basename(f) for f in files]
    layers = [m.group(1) for n in names if (m := _MKL_THREADING.match(n))]
    kernels = [m.group(1) for n in names if (m := _MKL_KERNELS.match(n))]
    layer = {"gnu_thread": "gnu-openmp", "intel_thread": "intel-openmp", "tbb_thread": "tbb"}
    return ",".join(layer.get(x, x.removesuffix("_thread")) for x in layers), ",".join(kernels)


def _call_int(library: str, symbol: str) -> int:
    try:
        function = getattr(ctypes.CDLL(library, mode=os.RTLD_NOLOAD | os.RTLD_LAZY), symbol)
    except (OSError, AttributeError):
        return -1
    function.restype = ctypes.c_int
    function.argtypes = []
    return int(function())


def _call_string(library: str, symbol: str) -> str:
    try:
        function = getattr(ctypes.CDLL(library, mode=os.RTLD_NOLOAD | os.RTLD_LAZY), symbol)
    except (OSError, AttributeError):
        return ""
    function.restype = ctypes.c_char_p
    function.argtypes = []
    value = function()
    return value.decode(errors="replace") if value else ""


def mkl_version(library: str) -> str:
    try:
        function = ctypes.CDLL(library, mode=os.RTLD_NOLOAD | os.RTLD_LAZY).MKL_Get_Version_String
    except (OSError, AttributeError):
        return ""
    buffer = ctypes.create_string_buffer(256)
    function.argtypes = [ctypes.c_char_p, ctypes.c_int]
    function(buffer, len(buffer))
    # "Intel(R) Math Kernel Library Version 2020.0.4 Product Build 20200917 for ..."
    match = re.search(r"Version ([\d.]+)", buffer.value.decode(errors="replace"))
    return match.group(1) if match else ""


def debian_package_version(path: str, dpkg: str = "/var/lib/dpkg") -> str:
    """The version of the Debian package that installed `path` ("0.9.0-1"), "" when none did:
    for a library that cannot report its own (Debian's BLIS exports BLAS symbols only)."""
    info = os.path.join(dpkg, "info")
    try:
        lists = sorted(n for n in os.listdir(info) if n.endswith(".list"))
    except OSError:
        return ""
    owner = ""
    for listed in lists:
        with open(os.path.join(info, listed), encoding="utf-8", errors="replace") as stream:
            if path in stream.read().splitlines():
                owner = listed.removesuffix(".list").split(":", 1)[0]
                break
    if not owner:
        return ""
    with open(os.path.join(dpkg, "status"), encoding="utf-8", errors="replace") as stream:
        for record in stream.read().split("\n\n"):
            fields = dict(re.findall(r"^([\w-]+): (.*)$", record, flags=re.MULTILINE))
            if fields.get("Package") == owner and "Version" in fields:
                return str(fields["Version"])
    return ""


def _version(name: str, library: str, path: str) -> str:
    if name == "blis":
        return _call_string(library, "bli_info_get_version_str")
    if name == "netlib":  # Debian's blas/libblas.so.3.11.0
        match = _NETLIB_FILE.match(os.path.basename(path))
        return f"3.{match.group(1)}" if match else ""
    return ""


def expected_blas(environ: Mapping[str, str] = os.environ) -> str | None:
    """The BLAS $FWBENCH_EXPECT_BLAS asks for (NAME or NAME-THREADING), None when unset;
    raises InvalidContext for a name outside KNOWN."""
    wanted = environ.get(EXPECT_VARIABLE, "").strip().lower()
    if not wanted:
        return None
    if wanted.partition("-")[0] not in KNOWN:
        raise InvalidContext(
            f"{EXPECT_VARIABLE}={wanted!r}: expected one of {', '.join(KNOWN)}, optionally "
            "with the threading after a dash (openblas-openmp)"
        )
    return wanted


def require_expected(found: BlasLibrary, environ: Mapping[str, str] = os.environ) -> None:
    """Raises BlasMismatch when $FWBENCH_EXPECT_BLAS names another BLAS than `found`."""
    wanted = expected_blas(environ)
    if wanted is not None and not found.matches(wanted):
        raise BlasMismatch(
            f"{EXPECT_VARIABLE}={wanted} but this process loaded {found.describe()}: "
            "refusing to start (check the image's update-alternatives for libblas.so.3)"
        )
