"""Paddle is imported here first, with its import-time warning that no ccache was found (for
its C++-extension builder, which nothing here uses) silenced: the test suite turns warnings
into errors, and the test modules import paddle before the plugin package that filters it.
The tests' shared module of which catalogue models this run builds (tests/stepped_models.py)
is importable from here."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))  # stepped_models

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="No ccache found", category=UserWarning)
    import paddle  # noqa: F401
