"""Runs in an agent environment the collector made (`python -I plugin_check.py PLUGIN`, never
in the collector's): does that environment hold the agent runtime and the plugin its manifest
names? Before an environment is marked ready, it imports `fwbench.runtime` and loads the
plugin's `fwbench.plugins` entry point (its module, which may import the framework); with
`--locate` it only finds them, importing no framework (seconds for every listed environment,
not minutes). Standard library only. Exit 0, or 1 with one line on stdout saying what is
missing."""

import importlib
import importlib.util
import sys
from importlib.metadata import entry_points


def check(plugin: str, locate: bool) -> None:
    if locate:
        if importlib.util.find_spec("fwbench.runtime") is None:
            raise ModuleNotFoundError("No module named 'fwbench.runtime'")
    else:
        importlib.import_module("fwbench.runtime")
    found = [point for point in entry_points(group="fwbench.plugins") if point.name == plugin]
    if not found:
        raise LookupError(f"no fwbench.plugins entry point named {plugin!r}")
    if not locate:
        found[0].load()
    elif importlib.util.find_spec(found[0].module) is None:
        raise ModuleNotFoundError(f"No module named {found[0].module!r}")


def main() -> None:
    try:
        check(sys.argv[1], "--locate" in sys.argv[2:])
    except Exception as error:  # noqa: BLE001 - reported, whatever it is
        print(" ".join(f"{type(error).__name__}: {error}".split())[:500])
        sys.exit(1)


if __name__ == "__main__":
    main()
