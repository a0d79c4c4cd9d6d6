"""Where fwbench keeps its caches and its store (places.py): the platform's places, which on
Linux follow $XDG_CACHE_HOME and $XDG_DATA_HOME, each overridden by its own variable."""

from __future__ import annotations

from pathlib import Path

import pytest

from fwbench.collector.agents.environments import ENV_DIR_VARIABLE, env_root
from fwbench.collector.calibration.cache import DIR_VARIABLE, cache_dir
from fwbench.collector.images.wheelhouse import WHEELHOUSE_VARIABLE, wheelhouse_root
from fwbench.collector.store.database import STORE_VARIABLE, default_store_path


def test_caches_and_the_store_follow_xdg_and_their_own_variables(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name in (ENV_DIR_VARIABLE, DIR_VARIABLE, WHEELHOUSE_VARIABLE, STORE_VARIABLE):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert env_root() == tmp_path / "cache" / "fwbench" / "envs"
    assert cache_dir() == tmp_path / "cache" / "fwbench" / "calibration"
    assert wheelhouse_root() == tmp_path / "cache" / "fwbench" / "wheelhouse"
    assert default_store_path() == tmp_path / "data" / "fwbench" / "results.sqlite"
    monkeypatch.setenv(STORE_VARIABLE, str(tmp_path / "mine.sqlite"))
    monkeypatch.setenv(ENV_DIR_VARIABLE, str(tmp_path / "envs"))
    assert default_store_path() == tmp_path / "mine.sqlite"
    assert env_root() == tmp_path / "envs"
