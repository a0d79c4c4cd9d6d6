"""XLA flags for the JAX plugin tests, set before any test creates a jax backend.

Compiling the big training steps (resnet152, efficientnet_b0) dominates this suite, and most
of that time is LLVM's optimisation of the generated CPU code. These tests check semantics,
not speed, so LLVM's expensive passes are skipped: compilation is about twice as fast and the
results are the same. Benchmarks never see this flag (it lives only in the test process and
the subprocesses it starts).
"""

from __future__ import annotations

import os

_FAST_COMPILE = "--xla_llvm_disable_expensive_passes=true"

if _FAST_COMPILE.split("=")[0] not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_FAST_COMPILE}".strip()
