"""The suite's helpers (numpy_gpt: GPT-2 in NumPy) import from this folder: pytest's
importlib mode puts no test folder on sys.path."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
