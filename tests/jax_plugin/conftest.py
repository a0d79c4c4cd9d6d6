"""XLA flags for the JAX plugin tests, set before any test creates a jax backend: compiling
the big training steps dominates this suite, and XLA skips LLVM's expensive passes here
(tests/stepped_models.py says why that is safe)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))  # stepped_models

from stepped_models import fast_xla_compile, jax_compilation_cache

fast_xla_compile()
jax_compilation_cache()
