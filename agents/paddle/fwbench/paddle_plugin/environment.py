"""Process-wide Paddle set-up and facts: the device, the CPU thread count, the libraries and
switches Describe reports, and how Paddle says it ran out of memory.

Threads. Paddle's CPU kernels are single-threaded Eigen code except the matrix products
(convolutions are im2col plus a product), which call MKL (mklml, on Intel's OpenMP runtime).
``paddle.base.core.set_num_threads(n)`` sets MKL's thread count, which is process-wide
(measured: a count set on one Python thread holds for products run on another), and the
calling thread's OpenMP count; it can be called at any time, so threads are not fixed at
start-up and every build applies its cell's count. Paddle's own default is one thread
(``FLAGS_paddle_num_threads=1``, meant for many serving instances per host); the plugin's
default, like the other frameworks', is every CPU this process may run on, unless
``FLAGS_paddle_num_threads`` is set in the agent's environment, which then wins. Importing
paddle sets ``OMP_NUM_THREADS=1`` in the process's environment when it is unset
(``paddle.base.__bootstrap__``), so rows show that variable although nobody set it: it holds
for OpenMP regions on threads other than the measurement thread (the static executor's),
not for MKL, whose count set_num_threads sets for every thread.

oneDNN. The PyPI CPU wheel is built with oneDNN, but Paddle uses it only with
``FLAGS_use_mkldnn=1`` and then only in static programs (dynamic-graph kernels stay the
native ones: measured with ONEDNN_VERBOSE); with it on, training ResNet-50 in static mode
aborts the process in oneDNN's ``pool2d_grad`` (Paddle 3.3.1). The agent keeps Paddle's
default, off, and reports the flag."""

from __future__ import annotations

import os
import sys

import numpy as np
import paddle

THREADS_FLAG = "FLAGS_paddle_num_threads"
ONEDNN_FLAG = "FLAGS_use_mkldnn"
# Variables besides Paddle's FLAGS_* that change what it computes or how many threads it uses.
_OTHER_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "KMP_AFFINITY",
    "KMP_BLOCKTIME",
    "ONEDNN_VERBOSE",
    "GLOG_v",
    "GLOG_minloglevel",
)
# How Paddle words a failed allocation: its ResourceExhausted status becomes Python's
# MemoryError ("(ResourceExhausted) Fail to alloc memory of N size"); other wrappings
# (EnforceNotMet, a static program's RuntimeError) keep the status in the message.
_OOM_MESSAGES = ("resourceexhausted", "out of memory", "fail to alloc")


def is_out_of_memory(error: Exception) -> bool:
    if isinstance(error, MemoryError):
        return True
    text = str(error).lower().replace(" ", "")
    known = (RuntimeError, OSError, paddle.base.core.EnforceNotMet)
    return isinstance(error, known) and any(m.replace(" ", "") in text for m in _OOM_MESSAGES)


def select_device(requested: str) -> str:
    """PluginContext.device: this agent runs Paddle's CPU build, so "cuda" is refused rather
    than measured on the CPU under a CUDA label; "auto" and "cpu" are the CPU."""
    if requested == "cuda":
        raise RuntimeError("FWBENCH_DEVICE=cuda but this Paddle plugin runs on the CPU only")
    paddle.device.set_device("cpu")
    return "cpu"


def usable_cores() -> int:
    return len(os.sched_getaffinity(0))


def default_threads(requested: int) -> int:
    """The thread count a cell with threads=0 runs with: the context's, else the agent's
    FLAGS_paddle_num_threads, else every usable CPU."""
    if requested:
        return requested
    raw = os.environ.get(THREADS_FLAG, "").strip()
    if raw:
        try:
            value = int(raw)
        except ValueError:
            raise RuntimeError(f"{THREADS_FLAG}={raw!r}: expected a positive integer") from None
        if value >= 1:
            return value
    return usable_cores()


def apply_threads(threads: int) -> int:
    """Sets MKL's (process-wide) and this thread's OpenMP thread counts; returns the count."""
    paddle.base.core.set_num_threads(threads)
    return threads


def onednn_enabled() -> bool:
    return bool(paddle.get_flags([ONEDNN_FLAG])[ONEDNN_FLAG])


def libraries() -> dict[str, str]:
    """Paddle's build: its commit, MKL, oneDNN (compiled in, and whether it is used), CUDA."""
    version = paddle.version
    return {
        "paddle_commit": str(version.commit),
        "blas": "mklml" if str(version.mkl()).upper() == "ON" else "openblas",
        "onednn_compiled": str(bool(paddle.base.core.is_compiled_with_onednn())).lower(),
        "onednn_enabled": str(onednn_enabled()).lower(),
        "cuda_build": str(bool(paddle.device.is_compiled_with_cuda())).lower(),
        "numpy": np.__version__,
        "python": sys.version.split()[0],
    }


def reported_environment() -> dict[str, str]:
    """Paddle's FLAGS_* switches and the threading variables that are set."""
    return {
        name: value
        for name, value in sorted(os.environ.items())
        if name.startswith("FLAGS_") or name in _OTHER_VARIABLES
    }
