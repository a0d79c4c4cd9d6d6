"""Finds framework plugins through the `fwbench.plugins` entry-point group, so that adding
a framework means installing a package, never editing the runtime."""

from __future__ import annotations

from importlib.metadata import entry_points

from fwbench.runtime.plugin import FrameworkPlugin

ENTRY_POINT_GROUP = "fwbench.plugins"


class PluginNotFound(LookupError):
    """No installed plugin has the requested name."""


class PluginInvalid(TypeError):
    """The entry point loaded, but what it built does not implement FrameworkPlugin."""


def available_plugins() -> list[str]:
    return sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))


def load_plugin(name: str) -> FrameworkPlugin:
    """Imports and constructs the named plugin; the framework is imported here."""
    matches = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not matches:
        installed = ", ".join(available_plugins()) or "none"
        raise PluginNotFound(f"no fwbench plugin named {name!r}; installed: {installed}")
    plugin = matches[0].load()()
    if not isinstance(plugin, FrameworkPlugin):
        raise PluginInvalid(
            f"plugin {name!r} ({matches[0].value}) lacks describe/build/synchronize"
        )
    return plugin
