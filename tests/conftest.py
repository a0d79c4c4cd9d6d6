"""Every test that starts `collector run` (in this process or a child) calibrates the host at
the quick effort (tiny sizes, cached apart from a real calibration): seconds, not a ceiling.
Tests of the calibration itself set their own effort and cache folder."""

from __future__ import annotations

import os

os.environ.setdefault("FWBENCH_CALIBRATION", "quick")
