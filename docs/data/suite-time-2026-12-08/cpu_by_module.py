"""Each test module's CPU and wall time in one pytest run of a `make test` run's folder, from
the cpu-*.jsonl lines tests/conftest.py writes (the test's own CPU and its waited children's):

    python3 cpu_by_module.py test-runs/latest main-workers
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def by_module(folder: Path, run: str) -> dict[str, list[float]]:
    """Module -> [CPU seconds, wall seconds, tests] over the tests of pytest run `run`."""
    modules: dict[str, list[float]] = {}
    for path in folder.glob("cpu-*.jsonl"):
        for line in path.read_text().splitlines():
            test = json.loads(line)
            if not test["run"].startswith(run):
                continue
            totals = modules.setdefault(test["nodeid"].split("::")[0], [0.0, 0.0, 0])
            totals[0] += test["cpu"]
            totals[1] += test["wall"]
            totals[2] += 1
    return modules


def main() -> None:
    modules = by_module(Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "main")
    total = sum(cpu for cpu, _, _ in modules.values())
    tests = sum(int(n) for _, _, n in modules.values())
    print(f"total CPU {total / 60:.1f} min over {tests} tests")
    for module, (cpu, wall, n) in sorted(modules.items(), key=lambda item: -item[1][0])[:45]:
        print(f"{cpu:8.1f} CPU-s {wall:8.1f} wall-s {int(n):4d}  {module}")


if __name__ == "__main__":
    main()
