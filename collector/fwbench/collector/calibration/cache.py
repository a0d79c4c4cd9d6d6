"""One calibration per host, cached: a JSON file per host fingerprint (hostname, CPU model,
logical CPUs, memory) under ~/.cache/fwbench/calibration (or $FWBENCH_CALIBRATION_DIR),
measured on first use and again on demand (`collector calibrate --force`). A host whose
fingerprint changed (another CPU count, more memory) is measured afresh. The ceilings that rows
of this host raised (ceiling.observe) are kept in the cached file, across `--force` too: a
later run starts from them."""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import platform
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from fwbench.collector import places
from fwbench.collector.calibration.ceiling import merge_observed
from fwbench.collector.calibration.measure import EFFORTS, measure
from fwbench.spec import settings

DIR_VARIABLE = settings.CALIBRATION_DIR
# `quick` measures tiny sizes (tests); `off`: runs record no calibration. Default `full`.
EFFORT_VARIABLE = settings.CALIBRATION
# 2: read_bandwidth (a read-only pass) beside triad; a cached 1 is measured again.
FORMAT_VERSION = 2


def cache_dir() -> Path:
    return Path(os.environ.get(DIR_VARIABLE, places.cache_path("calibration")))


def effort_name() -> str:
    name = os.environ.get(EFFORT_VARIABLE, "full") or "full"
    if name not in (*EFFORTS, "off"):
        raise ValueError(f"{EFFORT_VARIABLE}={name!r}: give full, quick or off")
    return name


def cpu_model() -> str:
    """As the agents report it (fwbench.runtime.hostinfo), so rows and calibrations match."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def host_fingerprint() -> dict[str, Any]:
    return {
        "hostname": socket.gethostname(),
        "cpu_model": cpu_model(),
        "logical_cpus": os.cpu_count(),
        "memory_bytes": psutil.virtual_memory().total,
    }


def fingerprint_id(fingerprint: dict[str, Any]) -> str:
    blob = json.dumps(fingerprint, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


def cache_path(fingerprint: dict[str, Any], effort: str) -> Path:
    suffix = "" if effort == "full" else f"-{effort}"
    return cache_dir() / f"{fingerprint['hostname']}-{fingerprint_id(fingerprint)}{suffix}.json"


def load_cached(effort: str) -> dict[str, Any] | None:
    """This host's cached calibration at that effort, or None (none, unreadable, or made for
    another fingerprint or format)."""
    fingerprint = host_fingerprint()
    try:
        cached: dict[str, Any] = json.loads(cache_path(fingerprint, effort).read_text())
    except (OSError, ValueError):
        return None
    if cached.get("format") != FORMAT_VERSION or cached.get("fingerprint") != fingerprint:
        return None
    return cached


def _write(calibration: dict[str, Any]) -> None:
    """Caches it, written whole, then renamed."""
    path = cache_path(calibration["fingerprint"], calibration["effort"])
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps(calibration, indent=1) + "\n")
    partial.replace(path)


def remember_observed(calibration: dict[str, Any]) -> bool:
    """Adds the ceilings rows raised in `calibration` to this host's cached calibration at its
    effort, so later runs start from them; whether the cache changed. Nothing for another
    host's calibration, or when none is cached."""
    cached = load_cached(str(calibration.get("effort")))
    if cached is None or calibration.get("fingerprint") != cached["fingerprint"]:
        return False
    if not merge_observed(cached, calibration.get("observed", {})):
        return False
    _write(cached)
    return True


def calibrate(pythons: list[Path], effort: str) -> dict[str, Any]:
    """Measures now and caches the result, with the observed ceilings of the one it replaces."""
    fingerprint = host_fingerprint()
    before = load_cached(effort) or {}
    measured_at = dt.datetime.now(dt.UTC)
    calibration = {
        "format": FORMAT_VERSION,
        "id": f"{fingerprint_id(fingerprint)}-{measured_at:%Y%m%dT%H%M%SZ}",
        "fingerprint": fingerprint,
        "fingerprint_id": fingerprint_id(fingerprint),
        "measured_at": measured_at.isoformat(),
        **measure(pythons, EFFORTS[effort]),
    }
    merge_observed(calibration, before.get("observed", {}))
    _write(calibration)
    return calibration


def host_calibration(
    pythons: list[Path],
    force: bool = False,
    effort: str | None = None,
    say: Callable[[str], None] = lambda _: None,
) -> dict[str, Any] | None:
    """The cached calibration, or a fresh one when there is none or `force`; None when the
    effort is `off`."""
    effort = effort or effort_name()
    if effort == "off":
        return None
    cached = None if force else load_cached(effort)
    if cached is not None:
        return cached
    say(f"calibrating this host ({effort}: peak GEMM FLOP/s and triad bandwidth), once")
    return calibrate(pythons, effort)
