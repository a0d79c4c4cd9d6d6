"""The measurements of a host calibration, as a script any Python runs (the collector's, or an
agent environment's with PyTorch): it imports nothing of fwbench and prints one JSON object.

    python probe.py gemm --library numpy --threads 2 --dtypes float32,float64 --max-size 2048
    python probe.py triad --threads 2 --elements 16777216 --repetitions 5
    python probe.py read --library torch --threads 2 --elements 16777216 --repetitions 5

gemm: C = A @ B on square matrices with the library's own GEMM (NumPy's BLAS; torch.mm; oneDNN
through PyTorch, which computes A @ B^T: the same 2 n^3 FLOPs). At
each size, from 256, one untimed call, then products are timed until both --repetitions and
--seconds are reached, and the fastest gives FLOP/s = 2 n^3 / seconds. The size doubles while
that rate grows by more than GROWTH over the best size's (up to --max-size): it stops where a
larger product is no faster, not where one is slow (which a loaded machine reaches early).
The best size's rate is the result; every size's is listed. Threads: the BLAS variables (set
by the caller before this process starts) and torch.set_num_threads.

triad: a = b + s * c over float64 arrays (STREAM's triad), split into one contiguous part per
thread (NumPy releases the GIL in its loops). Each thread works in blocks of BLOCK elements
with a small reused temporary that stays in cache, so memory traffic is b and c read and a
written once: 24 bytes per element are counted, as STREAM does. The write-allocate read of a
(which a store without streaming hints costs) is not counted. The fastest pass gives
bytes/second.

read: a pass that only reads as many bytes as triad's arrays hold, counted once, nothing
written, the traffic of a decode step reading every weight (where stores cost a write-allocate
read, it outruns triad's counted bytes). NumPy (--library numpy): the sum of a float64 array,
split and blocked as triad; PyTorch (--library torch): a matrix-vector product (torch.mv, the
kernel that reads a dense layer's weights) over a float32 matrix of the same bytes."""

from __future__ import annotations

import argparse
import importlib
import json
import threading
import time
from collections.abc import Callable
from typing import Any

GROWTH = 0.05  # a doubled size must be this much faster (relative) to go on doubling
BLOCK = 32768  # triad elements per step: 256 KiB a temporary, within a core's L2


def _gemm_numpy(dtype: str, size: int) -> tuple[Any, str]:
    import numpy as np

    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size)).astype(dtype)
    b = rng.standard_normal((size, size)).astype(dtype)
    c = np.empty((size, size), dtype=dtype)
    return (lambda: np.matmul(a, b, out=c)), _numpy_blas()


def _numpy_blas() -> str:
    import numpy as np

    try:
        config = np.show_config(mode="dicts")
        blas = config["Build Dependencies"]["blas"]
        return f"numpy {np.__version__} ({blas.get('name', '?')} {blas.get('version', '')})".strip()
    except (TypeError, KeyError, AttributeError):
        return f"numpy {np.__version__}"


def _torch() -> Any:
    """PyTorch, in the interpreter of an agent environment that runs this script; never in
    the collector's own process (which never imports a framework: pyproject's contract)."""
    return importlib.import_module("torch")


def _gemm_torch(dtype: str, size: int) -> tuple[Any, str]:
    torch = _torch()

    generator = torch.Generator().manual_seed(0)
    kind = getattr(torch, dtype)
    a = torch.randn((size, size), generator=generator).to(kind)
    b = torch.randn((size, size), generator=generator).to(kind)
    c = torch.empty((size, size), dtype=kind)
    return (lambda: torch.mm(a, b, out=c)), f"torch {torch.__version__}"


def _gemm_onednn(dtype: str, size: int) -> tuple[Any, str]:
    """oneDNN's GEMM through PyTorch (its inner product, A @ B^T, on oneDNN tensors): the JIT
    kernels that PyTorch's convolutions use, faster than its BLAS on some CPUs (AMD's, for
    MKL). Checked against torch.mm once, so a wrong product fails the calibration."""
    torch = _torch()
    if not torch.backends.mkldnn.is_available():
        raise RuntimeError("this PyTorch has no oneDNN")
    generator = torch.Generator().manual_seed(0)
    kind = getattr(torch, dtype)
    a = torch.randn((size, size), generator=generator).to(kind)
    b = torch.randn((size, size), generator=generator).to(kind)
    a_dnn, b_dnn = a.to_mkldnn(), b.to_mkldnn()
    linear = torch._C._nn.mkldnn_linear
    expected = torch.mm(a[:8].float(), b.float().t())
    if not torch.allclose(linear(a_dnn, b_dnn, None).to_dense()[:8].float(), expected, 0.05, 0.5):
        raise RuntimeError(f"oneDNN's {dtype} product differs from torch.mm's")
    return (lambda: linear(a_dnn, b_dnn, None)), f"torch {torch.__version__} oneDNN"


def gemm(library: str, threads: int, dtype: str, max_size: int, reps: int, seconds: float) -> Any:
    make = {"torch": _gemm_torch, "onednn": _gemm_onednn}.get(library, _gemm_numpy)
    if library in ("torch", "onednn"):
        _torch().set_num_threads(threads)
    size, best, rates = min(256, max_size), 0.0, {}
    found: dict[str, Any] = {}
    while True:
        call, name = make(dtype, size)
        times = _timed(call, reps, seconds)
        rate = rates[str(size)] = 2.0 * size**3 / min(times)
        grew = rate > best * (1 + GROWTH)
        if rate > best:
            best, found = rate, {"library": name, "dtype": dtype, "threads": threads}
            found.update(size=size, repetitions=len(times), best_seconds=min(times))
        if not grew or size * 2 > max_size:
            return {**found, "flops_per_second": best, "rates_by_size": rates}
        size *= 2


def _timed(call: Any, reps: int, seconds: float) -> list[float]:
    """Seconds of each timed call, after one untimed (first touch, thread pools, packing)."""
    call()
    times: list[float] = []
    begun = time.perf_counter()
    while len(times) < reps or time.perf_counter() - begun < seconds:
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return times


def _threaded_passes(
    part: Callable[[int, threading.Barrier], None], threads: int, reps: int
) -> list[float]:
    """Seconds of each of `reps` passes of `part(index, barrier)` on `threads` threads at
    once, timed from the moment all of them are ready (the barrier) to the last one's end."""
    times = []
    for _ in range(reps):
        barrier = threading.Barrier(threads + 1)
        workers = [threading.Thread(target=part, args=(i, barrier)) for i in range(threads)]
        for worker in workers:
            worker.start()
        barrier.wait()
        started = time.perf_counter()
        for worker in workers:
            worker.join()
        times.append(time.perf_counter() - started)
    return times


def triad(threads: int, elements: int, reps: int) -> dict[str, Any]:
    import numpy as np

    a = np.zeros(elements)
    b = np.full(elements, 1.0)
    c = np.full(elements, 2.0)
    scalar = 3.0
    bounds = [elements * i // threads for i in range(threads + 1)]

    def part(index: int, barrier: threading.Barrier) -> None:
        start, stop = bounds[index], bounds[index + 1]
        temporary = np.empty(BLOCK)
        barrier.wait()
        for low in range(start, stop, BLOCK):
            high = min(low + BLOCK, stop)
            scratch = temporary[: high - low]
            np.multiply(c[low:high], scalar, out=scratch)
            np.add(b[low:high], scratch, out=a[low:high])

    times = _threaded_passes(part, threads, reps)
    if not np.all(a[:: max(1, elements // 1000)] == 7.0):
        raise RuntimeError("triad computed a wrong result")
    best = min(times)
    moved = 3 * 8 * elements
    return {
        "library": f"numpy {np.__version__}",
        "threads": threads,
        "elements": elements,
        "array_bytes": 8 * elements,
        "block_elements": BLOCK,
        "repetitions": reps,
        "best_seconds": best,
        "bytes_counted_per_pass": moved,
        "bytes_per_second": moved / best,
    }


def read(threads: int, elements: int, reps: int, library: str = "numpy") -> dict[str, Any]:
    best, name = (_read_torch if library == "torch" else _read_numpy)(threads, elements, reps)
    return {
        "library": name,
        "threads": threads,
        "elements": elements,
        "array_bytes": 8 * elements,
        "repetitions": reps,
        "best_seconds": best,
        "bytes_counted_per_pass": 8 * elements,
        "bytes_per_second": 8 * elements / best,
    }


def _read_numpy(threads: int, elements: int, reps: int) -> tuple[float, str]:
    import numpy as np

    values = np.full(elements, 0.5)
    bounds = [elements * i // threads for i in range(threads + 1)]
    sums = [0.0] * threads

    def part(index: int, barrier: threading.Barrier) -> None:
        total = 0.0
        barrier.wait()
        for low in range(bounds[index], bounds[index + 1], BLOCK):
            total += float(np.add.reduce(values[low : min(low + BLOCK, bounds[index + 1])]))
        sums[index] = total

    times = _threaded_passes(part, threads, reps)
    if sum(sums) != 0.5 * elements:
        raise RuntimeError("read computed a wrong sum")
    return min(times), f"numpy {np.__version__} (sum)"


def _read_torch(threads: int, elements: int, reps: int) -> tuple[float, str]:
    torch = _torch()
    torch.set_num_threads(threads)
    columns = 4096
    rows = max(1, 2 * elements // columns)  # float32: the bytes of `elements` float64
    matrix = torch.full((rows, columns), 0.5)
    vector = torch.ones(columns)
    times = _timed(lambda: torch.mv(matrix, vector), reps, 0.0)
    if not bool((torch.mv(matrix, vector) == 0.5 * columns).all()):
        raise RuntimeError("read computed a wrong product")
    return min(times), f"torch {torch.__version__} (mv)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="what", required=True)
    g = sub.add_parser("gemm")
    g.add_argument("--library", choices=["numpy", "torch", "onednn"], required=True)
    g.add_argument("--threads", type=int, required=True)
    g.add_argument("--dtypes", required=True)
    g.add_argument("--max-size", type=int, default=2048)
    g.add_argument("--repetitions", type=int, default=3)
    g.add_argument("--seconds", type=float, default=0.75)
    for name in ("triad", "read"):
        t = sub.add_parser(name)
        t.add_argument("--threads", type=int, required=True)
        t.add_argument("--elements", type=int, required=True)
        t.add_argument("--repetitions", type=int, default=5)
    t.add_argument("--library", choices=["numpy", "torch"], default="numpy")
    args = parser.parse_args()
    if args.what == "gemm":
        found = [
            gemm(args.library, args.threads, d, args.max_size, args.repetitions, args.seconds)
            for d in args.dtypes.split(",")
        ]
        print(json.dumps({"gemm": found}))
    elif args.what == "triad":
        print(json.dumps({"triad": triad(args.threads, args.elements, args.repetitions)}))
    else:
        passes = read(args.threads, args.elements, args.repetitions, args.library)
        print(json.dumps({"read": passes}))


if __name__ == "__main__":
    main()
