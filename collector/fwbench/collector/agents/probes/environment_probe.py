"""Runs in an agent's existing Python environment (never in the collector's), with the
agent's own packages on PYTHONPATH: says what that interpreter offers an agent, as one JSON
object on stdout. It reads a JSON request from argv[1]: the distribution names to look up and
the plugin to construct. Standard library only, and the agent runtime imported by name: this
file must run under any Python the user points at (it reports an old one instead of failing).

Output: {"python", "version", "prefix", "distributions": {name: version or null}, "plugin":
{"framework", "framework_version", "libraries"} or null, "plugin_error": text or null}."""

import importlib
import json
import sys
import traceback
from importlib.metadata import PackageNotFoundError, version


def _version(name: str) -> "str | None":
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def main() -> None:
    request = json.loads(sys.argv[1])
    found = {name: _version(name) for name in request["distributions"]}
    answer: dict[str, object] = {
        "python": sys.executable,
        "version": ".".join(str(part) for part in sys.version_info[:3]),
        "prefix": sys.prefix,
        "distributions": found,
        "plugin": None,
        "plugin_error": None,
    }
    if sys.version_info >= (3, 11) and all(found.values()):
        try:
            plugin_module = importlib.import_module("fwbench.runtime.plugin")
            registry = importlib.import_module("fwbench.runtime.registry")
            context = plugin_module.context_from_environment()
            described = registry.load_plugin(request["plugin"], context).describe()
            answer["plugin"] = {
                "framework": described.framework,
                "framework_version": described.framework_version,
                "libraries": dict(described.libraries),
            }
        except Exception as error:  # noqa: BLE001 - reported, whatever it is
            last = traceback.extract_tb(error.__traceback__)[-1:]
            where = f" ({last[0].filename}:{last[0].lineno})" if last else ""
            answer["plugin_error"] = f"{type(error).__name__}: {error}{where}"
    print(json.dumps(answer))


if __name__ == "__main__":
    main()
