"""`fwbench-reference`: runs a plugin's reference models inside its own environment, for the
cross-framework equivalence tests. Arrays travel as .npz files, so no two frameworks ever
share a process:

    fwbench-reference --plugin torch export --models lenet,resnet18 --seed 0 --out-dir W
    fwbench-reference --plugin jax shapes --models lenet,resnet18 --out shapes.json
    fwbench-reference --plugin jax check CASE.npz [CASE.npz ...] --out-dir R

export writes W/<model>.npz; check writes R/<case file name>; shapes writes
{model: {canonical name: shape}} of freshly initialised models.

A case file holds ``model`` (string), ``inputs``, ``labels``, ``learning_rate``, ``momentum``
and one ``weights/<canonical name>`` array per weight. A result file holds ``param_count``,
``eval_logits``, ``loss_before`` and ``loss_after``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import cast

import numpy as np

from fwbench.runtime.plugin import EQUIVALENCE, context_from_environment
from fwbench.runtime.reference import (
    EquivalenceCase,
    EquivalencePlugin,
    EquivalenceResult,
    OptimizerSpec,
)
from fwbench.runtime.registry import load_plugin

WEIGHT_PREFIX = "weights/"


def save_arrays(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    np.savez(path, **arrays)  # type: ignore[arg-type]  # numpy's stub types **kwds too narrowly


def write_case(path: Path, case: EquivalenceCase) -> None:
    arrays = {
        "model": np.array(case.model),
        "inputs": np.asarray(case.inputs),
        "labels": np.asarray(case.labels),
        "learning_rate": np.array(case.optimizer.learning_rate),
        "momentum": np.array(case.optimizer.momentum),
    }
    arrays.update({WEIGHT_PREFIX + name: array for name, array in case.weights.items()})
    save_arrays(path, arrays)


def read_case(path: Path) -> EquivalenceCase:
    with np.load(path) as data:
        return EquivalenceCase(
            model=str(data["model"]),
            weights={
                key[len(WEIGHT_PREFIX) :]: data[key]
                for key in data.files
                if key.startswith(WEIGHT_PREFIX)
            },
            inputs=data["inputs"],
            labels=data["labels"],
            optimizer=OptimizerSpec(float(data["learning_rate"]), float(data["momentum"])),
        )


def write_result(path: Path, result: EquivalenceResult) -> None:
    np.savez(
        path,
        param_count=np.array(result.param_count),
        eval_logits=np.asarray(result.eval_logits, dtype=np.float32),
        loss_before=np.array(result.loss_before),
        loss_after=np.array(result.loss_after),
    )


def read_result(path: Path) -> EquivalenceResult:
    with np.load(path) as data:
        return EquivalenceResult(
            param_count=int(data["param_count"]),
            eval_logits=data["eval_logits"],
            loss_before=float(data["loss_before"]),
            loss_after=float(data["loss_after"]),
        )


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fwbench-reference", description=__doc__, formatter_class=argparse.RawTextHelpFormatter
    )
    p.add_argument("--plugin", required=True, help="entry-point name, e.g. torch")
    sub = p.add_subparsers(dest="command", required=True)
    export = sub.add_parser("export", help="write freshly initialised models' weights")
    export.add_argument("--models", required=True, help="comma-separated model names")
    export.add_argument("--seed", type=int, default=0)
    export.add_argument("--out-dir", type=Path, required=True)
    shapes = sub.add_parser("shapes", help="write canonical weight shapes as JSON")
    shapes.add_argument("--models", required=True, help="comma-separated model names")
    shapes.add_argument("--out", type=Path, required=True)
    check = sub.add_parser("check", help="run equivalence cases")
    check.add_argument("cases", type=Path, nargs="+")
    check.add_argument("--out-dir", type=Path, required=True)
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    loaded = load_plugin(args.plugin, context_from_environment())
    if EQUIVALENCE not in loaded.optional_capabilities:
        print(f"fwbench-reference: plugin {args.plugin!r} lacks {EQUIVALENCE!r}", file=sys.stderr)
        return 2
    plugin = cast(EquivalencePlugin, loaded)  # the registry checked the declaration
    if args.command == "shapes":
        shapes = {
            model: {k: list(v.shape) for k, v in plugin.canonical_weights(model, 0).items()}
            for model in args.models.split(",")
        }
        args.out.write_text(json.dumps(shapes))
        return 0
    args.out_dir.mkdir(parents=True, exist_ok=True)
    if args.command == "export":
        for model in args.models.split(","):
            save_arrays(args.out_dir / f"{model}.npz", plugin.canonical_weights(model, args.seed))
    else:
        for case in args.cases:
            write_result(args.out_dir / case.name, plugin.equivalence(read_case(case)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
