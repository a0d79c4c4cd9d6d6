"""describe(): identity, devices, threads, and capabilities that name only what the catalogue
has, in values the protocol knows (docs/plugins.md, "describe")."""

from __future__ import annotations

import re

from fwbench.runtime.plugin import (
    OPTIONAL_CAPABILITIES,
    Capability,
    DeviceInfo,
    PluginDescription,
)
from fwbench.spec.catalogue import DTYPES, PHASES

NAME = re.compile(r"[a-z0-9][a-z0-9._-]*")  # the protocol's rule for names (AgentIdentity)


def test_describe_names_framework_and_versions(plugin):
    description = plugin.describe()
    assert isinstance(description, PluginDescription)
    for text in (description.framework, description.framework_version, description.plugin_version):
        assert isinstance(text, str) and text.strip()


def test_describe_reports_string_maps_devices_and_threads(plugin):
    description = plugin.describe()
    for mapping in (description.libraries, description.environment):
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in mapping.items())
    assert description.devices and all(isinstance(d, DeviceInfo) for d in description.devices)
    assert {d.kind for d in description.devices} <= {"cpu", "gpu"}
    assert any(d.kind == "cpu" for d in description.devices)
    assert description.intra_op_threads >= 1 and description.inter_op_threads >= 1


def test_capabilities_name_only_runnable_catalogue_workloads(plugin, catalogue):
    capabilities = plugin.describe().capabilities
    assert capabilities, "a plugin offers at least one workload"
    runnable = {
        n for n, w in catalogue.workloads.items() if w.kind in ("op", "model", "generation")
    }
    # Accuracy workloads are the runtime's to offer, for plugins declaring "accuracy".
    assert set(capabilities) <= runnable, set(capabilities) - runnable


def test_each_capability_lists_valid_phases_dtypes_and_modes(plugin, catalogue, workload):
    capability = plugin.describe().capabilities[workload]
    assert isinstance(capability, Capability)
    for values in (capability.phases, capability.dtypes, capability.modes):
        assert isinstance(values, tuple) and values and len(set(values)) == len(values)
    assert set(capability.phases) <= set(catalogue.get(workload).phases)
    assert set(capability.dtypes) <= set(DTYPES)
    assert all(isinstance(m, str) and m.strip() for m in capability.modes)


def test_optional_capabilities_are_declared_from_the_known_ones(plugin):
    assert isinstance(plugin.optional_capabilities, frozenset)
    assert plugin.optional_capabilities <= set(OPTIONAL_CAPABILITIES)


def test_family_is_a_name_with_its_version_or_empty(plugin):
    description = plugin.describe()
    assert isinstance(description.family, str) and isinstance(description.family_version, str)
    if description.family:
        assert NAME.fullmatch(description.family), description.family
        assert description.family != description.framework, "empty when it is its own family"
    else:
        assert not description.family_version, "a family_version needs a family"


def test_unsupported_reasons_name_what_is_not_offered(plugin, catalogue):
    """Keys: a workload it does not offer, WORKLOAD/PHASE for a phase it does not offer of one
    it does, */PHASE for a phase it never runs; each reason one non-empty line."""
    description = plugin.describe()
    for key, reason in description.unsupported_reasons.items():
        assert isinstance(reason, str) and reason.strip() and "\n" not in reason, key
        workload, _, phase = key.partition("/")
        if workload == "*":
            assert phase in PHASES, key
            assert all(phase not in c.phases for c in description.capabilities.values()), key
            continue
        assert workload in catalogue.workloads, key
        offered = description.capabilities.get(workload)
        if phase:
            assert phase in catalogue.get(workload).phases, key
            assert offered is not None and phase not in offered.phases, key
        else:
            assert offered is None, f"{key} is offered, yet has a reason not to be"
