"""The equivalence tests step the models tests/stepped_models.py names."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parents[1]))  # stepped_models
