"""The defaults `collector run`'s options show, in a module that imports nothing: the modules
they belong to (run/options.py, run/liveness.py, run/telemetry.py, run/interference.py,
run/session.py) import the protocol, pandas and the launchers, which `collector --help` must
not (tests/collector/test_startup_imports.py). Each of those re-exports its own."""

from __future__ import annotations

from pathlib import Path

CELL_TIMEOUT_SECONDS = 1800.0  # --cell-timeout (run/options.py)
HANG_SECONDS = 60.0  # 30 heartbeat intervals (--hang-timeout, run/liveness.py)
DEFAULT_INTERVAL_SECONDS = 0.25  # --scrape-interval (run/telemetry.py)
# --interference-threshold (run/interference.py): others above this share of the agent's CPUs
# (or steal above it) make a row interfered. On an idle 2-vCPU machine the collector's own
# scraping and the kernel stay near 1%; a process that takes one core of two reads about 50%.
DEFAULT_THRESHOLD_PERCENT = 10.0
DEFAULT_OUT = Path("fwbench-results")  # the run folder's parent without --out: OUT/RUN_ID
