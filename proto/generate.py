"""Regenerate the Python bindings of the protocol: `python proto/generate.py [OUT_DIR]`.

Output goes next to the .proto files unless OUT_DIR is given (the staleness test writes to a
temporary folder and compares). Needs the dev extra's pinned grpcio-tools: its protoc emits
code for protobuf 6.31, the oldest runtime an agent image carries (TensorFlow 2.21 pins
protobuf>=6.31.1).
"""

from __future__ import annotations

import sys
from pathlib import Path

from grpc_tools import protoc

PROTO_ROOT = Path(__file__).resolve().parent
PROTO_FILES = sorted(str(p.relative_to(PROTO_ROOT)) for p in PROTO_ROOT.glob("fwbench/**/*.proto"))


def generate(out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        *PROTO_FILES,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")


if __name__ == "__main__":
    generate(Path(sys.argv[1]) if len(sys.argv) > 1 else PROTO_ROOT)
