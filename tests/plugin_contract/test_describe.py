"""describe(): identity, devices, threads, and capabilities that name only what the catalogue
has, in values the protocol knows (docs/plugins.md, "describe")."""

from __future__ import annotations

from fwbench.runtime.plugin import (
    OPTIONAL_CAPABILITIES,
    Capability,
    DeviceInfo,
    PluginDescription,
)
from fwbench.spec.catalogue import DTYPES


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
