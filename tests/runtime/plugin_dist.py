"""Makes test plugins loadable as `fwbench.plugins` entry points without installing anything:
a throwaway .dist-info folder, which importlib.metadata finds once its parent is on sys.path
(or PYTHONPATH, for a subprocess)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path


def write_entry_points(folder: Path, plugins: Mapping[str, str]) -> Path:
    """Registers `plugins` (entry-point name -> "module:attribute"); returns `folder`."""
    dist = folder / "fwbench_test_plugins-0.0.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: fwbench-test-plugins\n")
    lines = "".join(f"{name} = {target}\n" for name, target in plugins.items())
    (dist / "entry_points.txt").write_text(f"[fwbench.plugins]\n{lines}")
    return folder
