"""The tests' shared module of which catalogue models this run builds and steps
(tests/stepped_models.py), importable when this folder's tests run alone in the agent's
environment."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))  # stepped_models
