"""Runs inside the tf-mkl (or tf-eigen) agent environment. TensorFlow reads its environment at
import, so its log level is set here, before any test module imports it, and XLA's flags (the
xla mode compiles without LLVM's expensive passes: tests/stepped_models.py). The plugin under
test gets a CPU PluginContext with the default thread counts (tests check the default sizing);
subprocesses that start agents on their own must not inherit thread settings either."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))  # stepped_models

from stepped_models import fast_xla_compile

fast_xla_compile()

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["FWBENCH_DEVICE"] = "cpu"
os.environ.pop("FWBENCH_THREADS", None)
os.environ.pop("FWBENCH_INTEROP_THREADS", None)
