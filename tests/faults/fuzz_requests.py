"""Seeded random requests for the fuzz test (test_fuzz.py): RunRequests that are mostly cheap
and valid with one or more fields pushed out of range or made up, raw bytes that are not a
request at all, and Cancel ids. Valid values are kept small on purpose (gemm of at most 48 x
48 x 48, a handful of iterations, no minimum time), so a request the agent accepts finishes in
milliseconds; what is out of range is far out (any size, any number), because the agent must
refuse it before it builds anything."""

from __future__ import annotations

import math
import random
import string

from fwbench.agent.v1 import agent_pb2

UINT32_MAX = 2**32 - 1
INT64_MAX = 2**63 - 1
UINT64_MAX = 2**64 - 1
WORKLOADS = ("gemm", "conv2d", "lenet", "resnet18", "lstm", "train_to_accuracy")
SERVICE = "/fwbench.agent.v1.AgentService/"


def text(rng: random.Random, longest: int = 40) -> str:
    """Printable, unicode (a surrogate-free code point anywhere in the planes), or empty."""
    size = rng.randint(0, longest)
    kind = rng.random()
    if kind < 0.5:
        return "".join(rng.choice(string.printable) for _ in range(size))
    points = (
        rng.choice((rng.randint(1, 0xD7FF), rng.randint(0xE000, 0x10FFFF))) for _ in range(size)
    )
    return "".join(map(chr, points))


def _uint32_out_of(rng: random.Random, low: int, high: int) -> int:
    """A uint32 outside low..high (below only when low > 0)."""
    if low > 0 and rng.random() < 0.3:
        return rng.randint(0, low - 1)
    return rng.choice((high + 1, rng.randint(high + 1, UINT32_MAX), UINT32_MAX))


def _valid(rng: random.Random) -> agent_pb2.RunRequest:
    minimum = rng.randint(1, 5)
    request = agent_pb2.RunRequest(
        run_id=rng.choice(("", f"fuzz-{rng.getrandbits(32):08x}", text(rng))),
        workload="gemm",
        phase=rng.choice((agent_pb2.PHASE_TRAIN, agent_pb2.PHASE_INFER)),
        batch_size=rng.randint(1, 4),
        dtype=rng.choice(
            (agent_pb2.DTYPE_UNSPECIFIED, agent_pb2.DTYPE_FLOAT32, agent_pb2.DTYPE_FLOAT64)
        ),
        threads=rng.choice((0, 1, 2, 4, 1024)),  # 1024: the most the protocol allows
        min_iterations=minimum,
        max_iterations=rng.randint(minimum, minimum + 20),
        seed=rng.choice((0, rng.getrandbits(64), UINT64_MAX)),
        mode=rng.choice(("", "eager")),
    )
    request.warmup_iterations = rng.randint(0, 2)
    request.min_seconds = rng.choice((0.0, 1e-300, 0.001))
    for name in ("m", "n", "k"):  # each of them: the catalogue's default is 2048
        request.params[name] = rng.randint(1, 48)
    return request


def _break_one(rng: random.Random, request: agent_pb2.RunRequest) -> None:
    """Pushes one field out of its range, or makes up a value the agent cannot know."""
    field = rng.choice(
        (
            "workload",
            "phase",
            "dtype",
            "batch_size",
            "params",
            "threads",
            "warmup",
            "min_iterations",
            "max_iterations",
            "min_seconds",
            "mode",
        )
    )
    if field == "workload":
        request.workload = rng.choice((*WORKLOADS[1:], text(rng), "GEMM", " gemm", "gemm\x00"))
    elif field in ("phase", "dtype"):
        setattr(request, field, rng.choice((rng.randint(3, 2**31 - 1), 5, -1, -(2**31))))
    elif field == "batch_size":
        request.batch_size = _uint32_out_of(rng, 1, 1024)
    elif field == "params":
        name = rng.choice(("m", "n", "k", "image_size", "", text(rng, 8)))
        request.params[name] = rng.choice((0, -1, 32769, INT64_MAX, -INT64_MAX - 1))
    elif field == "threads":
        request.threads = _uint32_out_of(rng, 0, 1024)
    elif field == "warmup":
        request.warmup_iterations = _uint32_out_of(rng, 0, 10_000)
    elif field == "min_iterations":
        request.min_iterations = _uint32_out_of(rng, 1, 1_000_000)
    elif field == "max_iterations":  # above the cap, or below the minimum
        request.max_iterations = rng.choice((_uint32_out_of(rng, 1, 10_000_000), 0))
        if request.max_iterations == 0:
            request.min_iterations, request.max_iterations = 50, 3
    elif field == "min_seconds":
        request.min_seconds = rng.choice(
            (-1e-9, -1.0, math.nan, math.inf, -math.inf, 3600.5, 1e308)
        )
    else:
        request.mode = rng.choice((text(rng), "compile", "EAGER", "eager ", "jit"))


def run_request(rng: random.Random) -> agent_pb2.RunRequest:
    """A cheap valid request (about a third of them), else one with 1 to 3 fields broken."""
    request = _valid(rng)
    if rng.random() < 0.35:
        return request
    for _ in range(rng.choice((1, 1, 1, 2, 3))):
        _break_one(rng, request)
    return request


def garbage(rng: random.Random) -> tuple[str, bytes]:
    """A method path and bytes that are not a well-formed request for it: random bytes, a real
    request cut short or with bits flipped, or a method that does not exist."""
    method = SERVICE + rng.choice(("Run", "Describe", "Cancel"))
    kind = rng.random()
    if kind < 0.4:
        payload = rng.randbytes(rng.randint(0, 200))
    elif kind < 0.7:
        whole = run_request(rng).SerializeToString()
        payload = whole[: rng.randint(0, max(0, len(whole) - 1))]
    elif kind < 0.9:
        flipped = bytearray(run_request(rng).SerializeToString() or b"\x00")
        for _ in range(rng.randint(1, 4)):
            flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
        payload = bytes(flipped)
    else:
        method = rng.choice((SERVICE + text(rng, 12), "/" + text(rng, 20), SERVICE + "run"))
        payload = rng.randbytes(rng.randint(0, 20))
    return method, payload


def cancel_request(rng: random.Random) -> agent_pb2.CancelRequest:
    """A random id, now and then empty (which cancels whatever runs: other workers' runs then
    end CANCELLED, which the protocol allows)."""
    return agent_pb2.CancelRequest(run_id="" if rng.random() < 0.1 else text(rng))
