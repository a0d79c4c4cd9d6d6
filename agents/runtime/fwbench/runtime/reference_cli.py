"""`fwbench-reference`: runs a plugin's reference models inside its own environment, for the
cross-framework equivalence tests. Arrays travel as .npz files, so no two frameworks ever
share a process:

    fwbench-reference --plugin torch export --models lenet,resnet18 --seed 0 --out-dir W
    fwbench-reference --plugin jax shapes --models lenet,resnet18 --out shapes.json
    fwbench-reference --plugin jax check CASE.npz [CASE.npz ...] --out-dir R
    fwbench-reference --plugin tensorflow shapes --models gpt --param layers=2 --out S
    fwbench-reference --plugin onnxruntime covers
    fwbench-reference --plugin keras all CASE.npz [CASE.npz ...] --shapes-models vgg16 --out-dir R

covers prints {"models": [...], "trains": bool}: the models the plugin's equivalence builds
and whether it runs the training step (reference.equivalence_models / equivalence_trains).

all does, in one process, what the tests would otherwise ask of four: R/covers.json
({"equivalence": bool, and where true "models" and "trains" as covers prints them}), the
shapes of the --shapes-models it covers (R/shapes.json, as shapes writes), and the cases whose
model it covers (R/<case file name>, as check writes); each model is built once. A plugin
without the capability gets covers.json alone, and the command succeeds.

export writes W/<model>.npz; check writes R/<case file name>; shapes writes
{model: {canonical name: shape}} of freshly initialised models. --param NAME=VALUE (repeated)
shapes the transformers, over their catalogue defaults.

A case file holds ``model`` (string), ``inputs``, ``labels``, ``learning_rate``, ``momentum``,
``new_tokens``, one ``params/<name>`` integer per shape parameter and one
``weights/<canonical name>`` array per weight. A result file holds ``param_count``,
``eval_logits``, ``loss_before``, ``loss_after`` (NaN where the plugin does not train) and,
for a generation, ``generated`` and
``generated_gaps``.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import cast

import numpy as np

from fwbench.runtime.architectures import TRANSFORMER_NAMES
from fwbench.runtime.plugin import EQUIVALENCE, FrameworkPlugin, context_from_environment
from fwbench.runtime.reference import (
    EquivalenceCase,
    EquivalencePlugin,
    EquivalenceResult,
    OptimizerSpec,
    equivalence_models,
    equivalence_trains,
)
from fwbench.runtime.registry import load_plugin
from fwbench.spec import load_catalogue

WEIGHT_PREFIX = "weights/"
PARAM_PREFIX = "params/"


def save_arrays(path: Path, arrays: Mapping[str, np.ndarray]) -> None:
    np.savez(path, **arrays)  # type: ignore[arg-type]  # numpy's stub types **kwds too narrowly


def write_case(path: Path, case: EquivalenceCase) -> None:
    arrays = {
        "model": np.array(case.model),
        "inputs": np.asarray(case.inputs),
        "labels": np.asarray(case.labels),
        "learning_rate": np.array(case.optimizer.learning_rate),
        "momentum": np.array(case.optimizer.momentum),
        "new_tokens": np.array(case.new_tokens),
    }
    arrays.update({PARAM_PREFIX + name: np.array(value) for name, value in case.params.items()})
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
            params={
                key[len(PARAM_PREFIX) :]: int(data[key])
                for key in data.files
                if key.startswith(PARAM_PREFIX)
            },
            new_tokens=int(data["new_tokens"]) if "new_tokens" in data.files else 0,
        )


def write_result(path: Path, result: EquivalenceResult) -> None:
    arrays = {
        "param_count": np.array(result.param_count),
        "eval_logits": np.asarray(result.eval_logits, dtype=np.float32),
        "loss_before": np.array(np.nan if result.loss_before is None else result.loss_before),
        "loss_after": np.array(np.nan if result.loss_after is None else result.loss_after),
    }
    if result.generated is not None and result.generated_gaps is not None:
        arrays["generated"] = np.asarray(result.generated, dtype=np.int64)
        arrays["generated_gaps"] = np.asarray(result.generated_gaps, dtype=np.float32)
    save_arrays(path, arrays)


def read_result(path: Path) -> EquivalenceResult:
    with np.load(path) as data:
        generated = "generated" in data.files
        return EquivalenceResult(
            param_count=int(data["param_count"]),
            eval_logits=data["eval_logits"],
            loss_before=_loss(data["loss_before"]),
            loss_after=_loss(data["loss_after"]),
            generated=data["generated"] if generated else None,
            generated_gaps=data["generated_gaps"] if generated else None,
        )


def _loss(value: np.ndarray) -> float | None:
    loss = float(value)
    return None if np.isnan(loss) else loss


def parse_params(items: list[str]) -> dict[str, int]:
    """NAME=VALUE pairs (--param), as integers."""
    params = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"fwbench-reference: --param {item!r}: expected NAME=INTEGER")
        params[name.strip()] = int(value)
    return params


def model_params(model: str, given: Mapping[str, int]) -> dict[str, int]:
    """A transformer's shape: its workload's catalogue parameters, `given` over the defaults
    (those it does not have left out); {} for the other models."""
    if model not in TRANSFORMER_NAMES:
        return {}
    workload = load_catalogue().get(model)
    return workload.resolve_params({k: v for k, v in given.items() if k in workload.params})


def fresh_weights(
    plugin: EquivalencePlugin, model: str, given: Mapping[str, int], seed: int
) -> dict[str, np.ndarray]:
    """A freshly initialised model's canonical weights (a transformer shaped by `given`)."""
    params = model_params(model, given)
    if params:
        return plugin.canonical_weights(model, seed, params)
    return plugin.canonical_weights(model, seed)


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
    sub.add_parser("covers", help="print the models equivalence covers and whether it trains")
    every = sub.add_parser("all", help="covers, shapes and cases, in one process")
    every.add_argument("cases", type=Path, nargs="*")
    every.add_argument("--shapes-models", default="", help="comma-separated model names")
    every.add_argument("--out-dir", type=Path, required=True)
    for command in (export, shapes, every):  # a transformer's shape (shapes of fresh models)
        command.add_argument("--param", action="append", default=[], help="NAME=VALUE")
    return p


def run_all(
    loaded: FrameworkPlugin,
    shapes_models: list[str],
    cases: list[Path],
    out: Path,
    given: Mapping[str, int] | None = None,
) -> None:
    """`all`: covers.json (written last: the run completed), shapes.json (fresh models, a
    transformer shaped by `given`) and the results of the cases its models cover."""
    out.mkdir(parents=True, exist_ok=True)
    covers: dict[str, object] = {"equivalence": EQUIVALENCE in loaded.optional_capabilities}
    if covers["equivalence"]:
        plugin = cast(EquivalencePlugin, loaded)  # the registry checked the declaration
        covered = equivalence_models(plugin)
        covers |= {"models": sorted(covered), "trains": equivalence_trains(plugin)}
        shapes = {
            model: {
                k: list(v.shape) for k, v in fresh_weights(plugin, model, given or {}, 0).items()
            }
            for model in shapes_models
            if model in covered
        }
        (out / "shapes.json").write_text(json.dumps(shapes))
        for path in cases:
            case = read_case(path)
            if case.model in covered:
                write_result(out / path.name, plugin.equivalence(case))
    (out / "covers.json").write_text(json.dumps(covers))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    loaded = load_plugin(args.plugin, context_from_environment())
    if args.command == "all":
        shapes_models = [m for m in args.shapes_models.split(",") if m]
        run_all(loaded, shapes_models, args.cases, args.out_dir, parse_params(args.param))
        return 0
    if EQUIVALENCE not in loaded.optional_capabilities:
        print(f"fwbench-reference: plugin {args.plugin!r} lacks {EQUIVALENCE!r}", file=sys.stderr)
        return 2
    plugin = cast(EquivalencePlugin, loaded)  # the registry checked the declaration
    given = parse_params(getattr(args, "param", []))
    covered = equivalence_models(plugin)
    if args.command == "covers":
        trains = equivalence_trains(plugin)
        print(json.dumps({"models": sorted(covered), "trains": trains}))
        return 0
    asked = args.models.split(",") if args.command != "check" else []
    asked += [read_case(case).model for case in getattr(args, "cases", [])]
    if uncovered := [model for model in asked if model not in covered]:
        names = ", ".join(uncovered)
        print(f"fwbench-reference: plugin {args.plugin!r} covers no {names}", file=sys.stderr)
        return 2

    if args.command == "shapes":
        shapes = {
            model: {k: list(v.shape) for k, v in fresh_weights(plugin, model, given, 0).items()}
            for model in args.models.split(",")
        }
        args.out.write_text(json.dumps(shapes))
        return 0
    args.out_dir.mkdir(parents=True, exist_ok=True)
    if args.command == "export":
        for model in args.models.split(","):
            weights = fresh_weights(plugin, model, given, args.seed)
            save_arrays(args.out_dir / f"{model}.npz", weights)
    else:
        for case in args.cases:
            write_result(args.out_dir / case.name, plugin.equivalence(read_case(case)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
