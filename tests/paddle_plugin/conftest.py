"""Paddle is imported here first, with its import-time warning that no ccache was found (for
its C++-extension builder, which nothing here uses) silenced: the test suite turns warnings
into errors, and the test modules import paddle before the plugin package that filters it."""

from __future__ import annotations

import warnings

with warnings.catch_warnings():
    warnings.filterwarnings("ignore", message="No ccache found", category=UserWarning)
    import paddle  # noqa: F401
