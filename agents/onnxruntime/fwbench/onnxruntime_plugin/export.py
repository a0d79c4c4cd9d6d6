"""`fwbench-onnx-export`: writes the graph the onnxruntime plugin benchmarks to a file, to look
at (Netron) or to run elsewhere:

    fwbench-onnx-export resnet50 --out resnet50.onnx --params image_size=224
    fwbench-onnx-export lstm --out lstm.onnx --params seq_len=64 --weights canonical.npz
    fwbench-onnx-export gpt --out gpt.onnx --params layers=2,hidden=128,heads=4,seq_len=64

The graph is the plugin's own (models.py): NCHW float32 images or int64 token ids under
"input", a symbolic batch axis, "logits" out; the producer is recorded as "fwbench <plugin
version>" with the opset. Without --weights the weights are PyTorch's default initialisers
drawn with --seed; --weights takes canonical weights (PyTorch state_dict names, an .npz, keys
optionally prefixed "weights/" as in fwbench-reference's case files), checked against the
graph. bert and gpt take int64 token ids (batch, seq_len) and give logits (batch, seq_len,
vocab), weights under Hugging Face's names. Operators (gemm, conv2d, attention) export with
--batch as their leading size."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from fwbench.onnxruntime_plugin import models
from fwbench.onnxruntime_plugin import transformer_graphs as tg
from fwbench.onnxruntime_plugin.graphs import WeightsError
from fwbench.runtime.architectures import TRANSFORMER_NAMES
from fwbench.spec import load_catalogue
from fwbench.spec.catalogue import CatalogueError

_WEIGHT_PREFIX = "weights/"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="fwbench-onnx-export",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("model", choices=(*models.MODELS, *models.OPS, "attention", *TRANSFORMER_NAMES))
    p.add_argument("--out", type=Path, required=True, help="the .onnx file to write")
    p.add_argument(
        "--params",
        action="append",
        default=[],
        help="NAME=VALUE[,NAME=VALUE] shape parameters over the catalogue's defaults",
    )
    p.add_argument("--weights", type=Path, help="canonical weights (.npz)")
    p.add_argument("--seed", type=int, default=0, help="seed of the drawn weights")
    p.add_argument("--batch", type=int, default=1, help="operators only: the batch size")
    return p


def parse_params(items: list[str]) -> dict[str, int]:
    params: dict[str, int] = {}
    for item in (part for given in items for part in given.split(",") if part.strip()):
        name, sep, value = item.partition("=")
        if not sep or not value.strip().lstrip("-").isdigit():
            raise ValueError(f"--params {item!r}: expected NAME=INTEGER")
        params[name.strip()] = int(value)
    return params


def read_weights(path: Path) -> dict[str, np.ndarray]:
    with np.load(path) as data:
        return {key.removeprefix(_WEIGHT_PREFIX): data[key] for key in data.files}


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        params = load_catalogue().get(args.model).resolve_params(parse_params(args.params))
        if args.model in models.OPS:
            graph = models.build_op(args.model, params, args.batch)
        elif args.model == "attention":
            graph = tg.build_attention(params, args.batch)
        elif args.model in TRANSFORMER_NAMES:
            weights = read_weights(args.weights) if args.weights else None
            graph = tg.build_transformer(args.model, params, weights, args.seed)
        else:
            weights = read_weights(args.weights) if args.weights else None
            graph = models.build_model(args.model, params, weights, args.seed)
    except (ValueError, CatalogueError, WeightsError, OSError) as error:
        print(f"fwbench-onnx-export: {error}", file=sys.stderr)
        return 2
    args.out.write_bytes(graph.serialized)
    print(f"{args.out}: {args.model} {params}, {len(graph.serialized)} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
