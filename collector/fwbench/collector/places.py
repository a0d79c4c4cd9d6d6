"""Where fwbench keeps what outlives a run, by the platform's conventions (platformdirs; on
Linux $XDG_CACHE_HOME/fwbench, else ~/.cache/fwbench, for what can be made again: agents'
environments, wheels, image contexts, calibrations; $XDG_DATA_HOME/fwbench, else
~/.local/share/fwbench, for the results store). Each has its own variable too, read where it
is used. Belongs to no layer: anything may import it, and it imports nothing of the
collector's."""

from __future__ import annotations

from pathlib import Path

import platformdirs

APP = "fwbench"


def cache_path(*parts: str) -> Path:
    return platformdirs.user_cache_path(APP, appauthor=False).joinpath(*parts)


def data_path(*parts: str) -> Path:
    return platformdirs.user_data_path(APP, appauthor=False).joinpath(*parts)
