"""What collector and agents share besides the generated protocol: its version and the
workload catalogue. Framework-free and dependency-light on purpose: both sides import it."""

from fwbench.spec.catalogue import (
    Catalogue,
    CatalogueError,
    ParamSpec,
    WorkloadDef,
    load_catalogue,
)
from fwbench.spec.version import (
    HEARTBEAT_SECONDS,
    SPEC_VERSION,
    spec_major,
    versions_compatible,
)

__all__ = [
    "HEARTBEAT_SECONDS",
    "SPEC_VERSION",
    "Catalogue",
    "CatalogueError",
    "ParamSpec",
    "WorkloadDef",
    "load_catalogue",
    "spec_major",
    "versions_compatible",
]
