"""Finds framework plugins through the `fwbench.plugins` entry-point group, so that adding
a framework means installing a package, never editing the runtime. A plugin is checked once,
here, when it loads: the methods of the contract, and those of every optional capability it
declares (docs/plugins.md)."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points
from typing import cast

from fwbench.runtime.plugin import (
    AUTOCAST_VARIABLE,
    MODEL_EXPORT,
    MODEL_FILES,
    OPTIONAL_CAPABILITIES,
    Capability,
    FrameworkPlugin,
    InvalidContext,
    PluginContext,
)
from fwbench.spec.model_files import FORMATS

ENTRY_POINT_GROUP = "fwbench.plugins"
REQUIRED_METHODS = ("describe", "build", "synchronize")


class PluginNotFound(LookupError):
    """No installed plugin has the requested name."""


class PluginInvalid(TypeError):
    """The entry point loaded, but what it built does not keep the plugin contract."""


def available_plugins() -> list[str]:
    return sorted(ep.name for ep in entry_points(group=ENTRY_POINT_GROUP))


def _entry_point(name: str) -> EntryPoint:
    matches = [ep for ep in entry_points(group=ENTRY_POINT_GROUP) if ep.name == name]
    if not matches:
        installed = ", ".join(available_plugins()) or "none"
        raise PluginNotFound(f"no fwbench plugin named {name!r}; installed: {installed}")
    return matches[0]


def _check_factory(label: str, factory: Callable[..., object]) -> None:
    # Checked before the call, so that a TypeError raised inside a constructor keeps its
    # own traceback instead of passing for a wrong signature.
    try:
        inspect.signature(factory).bind(PluginContext())
    except (TypeError, ValueError):
        raise PluginInvalid(f"{label} must be callable with one PluginContext") from None


def _lacking(plugin: object, methods: tuple[str, ...]) -> list[str]:
    return [method for method in methods if not callable(getattr(plugin, method, None))]


def check_plugin(label: str, plugin: object) -> FrameworkPlugin:
    """`plugin` if it keeps the contract; raises PluginInvalid naming what is missing."""
    lacking = _lacking(plugin, REQUIRED_METHODS)
    if lacking:
        raise PluginInvalid(f"{label} lacks {', '.join(lacking)}")
    declared = getattr(plugin, "optional_capabilities", None)
    if not isinstance(declared, frozenset) or not all(isinstance(c, str) for c in declared):
        raise PluginInvalid(f"{label} must declare optional_capabilities, a frozenset of names")
    for capability in sorted(declared):
        _check_capability(label, plugin, capability)
    return cast(FrameworkPlugin, plugin)  # what the checks above established


def _check_capability(label: str, plugin: object, capability: str) -> None:
    if capability not in OPTIONAL_CAPABILITIES:
        known = ", ".join(OPTIONAL_CAPABILITIES)
        raise PluginInvalid(f"{label} declares unknown capability {capability!r}; known: {known}")
    lacking = _lacking(plugin, OPTIONAL_CAPABILITIES[capability])
    if lacking:
        raise PluginInvalid(
            f"{label} declares capability {capability!r} but lacks {', '.join(lacking)}"
        )
    if capability == MODEL_FILES:
        formats = getattr(plugin, "model_formats", None)
        if not isinstance(formats, tuple) or not formats or not set(formats) <= set(FORMATS):
            raise PluginInvalid(
                f"{label} declares capability {capability!r}: model_formats must be a "
                f"non-empty tuple of {', '.join(FORMATS)}"
            )
        if not isinstance(getattr(plugin, "model_capability", None), Capability):
            raise PluginInvalid(
                f"{label} declares capability {capability!r} without model_capability (a "
                "Capability: the phases, dtypes and modes it runs model files in)"
            )

    if capability == MODEL_EXPORT:
        formats = getattr(plugin, "export_formats", None)
        declared = getattr(plugin, "optional_capabilities", ())
        if MODEL_FILES not in declared:
            raise PluginInvalid(
                f"{label} declares capability {capability!r} without {MODEL_FILES!r}: it exports "
                "the files it reads"
            )
        if not isinstance(formats, tuple) or not formats or not set(formats) <= set(FORMATS):
            raise PluginInvalid(
                f"{label} declares capability {capability!r}: export_formats must be a "
                f"non-empty tuple of {', '.join(FORMATS)}"
            )


def load_plugin(name: str, context: PluginContext) -> FrameworkPlugin:
    """Imports the named plugin and constructs it with `context`; the framework loads here."""
    entry = _entry_point(name)
    label = f"plugin {name!r} ({entry.value})"
    factory = entry.load()
    _check_factory(label, factory)
    if context.autocast and not getattr(factory, "supports_autocast", False):
        raise InvalidContext(
            f"{AUTOCAST_VARIABLE}=on: {label} has no autocast (its half-precision cells are "
            "pure casts); unset it for this agent"
        )
    return check_plugin(label, factory(context))
