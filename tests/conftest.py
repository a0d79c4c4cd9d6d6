"""Every `collector run` a test starts (in this process or a child) finds this host calibrated
at the quick effort (tiny sizes: a second, not a ceiling) in a folder of this test session,
measured once here before the first test: no run prints "calibrating", and the user's cache
is left alone. Tests of the calibration itself set their own effort and folder."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

os.environ.setdefault("FWBENCH_CALIBRATION", "quick")


@pytest.fixture(scope="session", autouse=True)
def quick_host_calibration(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    try:  # the plugin tests run this file in agent environments, which lack the collector
        from fwbench.collector.calibration.cache import DIR_VARIABLE, host_calibration
    except ImportError:
        yield
        return
    if DIR_VARIABLE not in os.environ:
        os.environ[DIR_VARIABLE] = str(tmp_path_factory.mktemp("calibration"))
        host_calibration([], effort=os.environ["FWBENCH_CALIBRATION"])
    yield
