"""The defaults `collector compare` and `collector run --until-decided` show in --help, in a
module that imports nothing: stats/significance.py and stats/sequential.py, where they belong,
import NumPy and SciPy, which `collector --help` must not (tests/collector/
test_startup_imports.py). Each of those re-exports its own."""

from __future__ import annotations

DEFAULT_NOISE_FLOOR = 0.03  # stats/significance.py
DEFAULT_MARGIN = 0.05  # stats/significance.py
# The widest equivalence margin taken from a host's history without --margin (stats/margins.py;
# stats/sequential.py).
MAX_HISTORY_MARGIN = 0.10
