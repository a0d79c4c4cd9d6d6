"""Runs inside the tf-mkl (or tf-eigen) agent environment. TensorFlow reads its environment at
import and fixes its thread pools at the first op, so the variables are set here, before any
test module imports it; FWBENCH_THREADS stays unset (tests check the default sizing)."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ["FWBENCH_DEVICE"] = "cpu"
os.environ.pop("FWBENCH_THREADS", None)
os.environ.pop("FWBENCH_INTEROP_THREADS", None)
