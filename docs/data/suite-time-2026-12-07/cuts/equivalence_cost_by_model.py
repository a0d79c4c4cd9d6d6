"""How equivalence_cost_by_model.txt was measured (a tidied copy of the script; 2026-12-07,
AMD EPYC family 25 model 1, an idle host, from the repository root): for each agent the
equivalence test runs, the CPU seconds of `fwbench-reference check` on one model's case, and of
`shapes` for VGG-16 and ResNet-152, each less those of `covers` (the framework's import), one
process at a time. The cases are the test's own (tests/equivalence/test_equivalence.py:
PyTorch's weights, BatchNorm perturbed)."""

from __future__ import annotations

import json
import resource
import sys
from pathlib import Path

import numpy as np

sys.path[:0] = ["tests", "tests/equivalence"]
import test_equivalence as te  # noqa: E402

from fwbench.runtime.reference import EquivalenceCase  # noqa: E402
from fwbench.runtime.reference_cli import write_case  # noqa: E402

ROOT = Path("equivalence-cases")


def cases() -> None:
    te._reference("torch-cpu", "export", "--models", ",".join(te.MODELS), "--out-dir", str(ROOT))
    rng = np.random.default_rng(2024)
    for model in te.MODELS:
        with np.load(ROOT / f"{model}.npz") as data:
            weights = {k: data[k] for k in data.files}
        te._perturb_batch_norm(weights, rng)
        inputs, labels = te._inputs(model, rng)
        case = EquivalenceCase(model, weights, inputs, labels, te.OPTIMIZER)
        write_case(ROOT / f"case-{model}.npz", case)


def cpu(agent: str, *args: str) -> float:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    te._reference(agent, *args)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def main() -> None:
    cases()
    for agent in te.RUN:
        covers = json.loads(te._reference(agent, "covers").stdout)["models"]
        base = cpu(agent, "covers")
        row = {"covers": round(base, 1)}
        for model in [m for m in te.MODELS if m in covers and m not in ("vgg16", "resnet152")]:
            case = str(ROOT / f"case-{model}.npz")
            row[model] = round(cpu(agent, "check", case, "--out-dir", "out") - base, 1)
        for model in [m for m in ("vgg16", "resnet152") if m in covers]:
            shapes = cpu(agent, "shapes", "--models", model, "--out", "out/shapes.json")
            row[f"{model}-shapes"] = round(shapes - base, 1)
        print(agent, row, flush=True)


if __name__ == "__main__":
    main()
