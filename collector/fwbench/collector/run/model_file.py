"""`collector run --model PATH`: the user's model file as a workload (protocol 1.7).

Before any agent starts, the file is found, its format told and its digest taken
(`asked_model`); its workload ("model:STEM@DIGEST8") joins the run's catalogue. Once the agents
have described themselves, model_prepare.py reads its signature, makes the reference outputs
and (--export) the other formats; model_prepared.py is what the cells then run."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fwbench.collector.run.shapes import SelectionError
from fwbench.spec import Catalogue, model_files, sample_inputs
from fwbench.spec.model_files import ModelFileError


class ModelRefused(SelectionError):
    """The model cannot be measured as asked: one line, exit 2, before any cell is timed."""


@dataclass(frozen=True)
class ModelAsked:
    """--model, --input, --export and --inputs, checked: the file's absolute path, format,
    digest and workload; the sample inputs' path, digest and rows."""

    path: Path
    format: str
    sha256: str
    workload: str
    shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)
    export: bool = False  # --export: other formats made by the agents' own exporters
    sample: Path | None = None  # --inputs FILE.npz: the user's own inputs
    sample_sha256: str = ""
    sample_rows: int = 0

    def record(self) -> dict[str, Any]:
        """For run.json (options.model)."""
        return {
            "path": str(self.path),
            "format": self.format,
            "sha256": self.sha256,
            "workload": self.workload,
            "inputs": {name: list(shape) for name, shape in self.shapes.items()},
            "export": self.export,
            **(
                {"sample": str(self.sample), "sample_sha256": self.sample_sha256}
                if self.sample
                else {}
            ),
        }


def parse_input(text: str) -> tuple[str, tuple[int, ...]]:
    """--input NAME=SHAPE, SHAPE as 1x3x224x224 (or with commas): every dimension >= 1."""
    name, sep, shape = text.partition("=")
    dims = shape.replace(",", "x").split("x") if shape else []
    if not sep or not name or not dims or not all(d.isdigit() and int(d) >= 1 for d in dims):
        raise ModelRefused(
            f"--input {text!r}: give NAME=SHAPE with every dimension a positive integer, e.g. "
            "input_ids=8x128"
        )
    return name, tuple(int(d) for d in dims)


def asked_model(
    path: Path, inputs: Sequence[str], export: bool = False, sample: Path | None = None
) -> ModelAsked:
    """The checked --model, --input, --export and --inputs; ModelRefused (one line) when the
    file cannot be one, or the sample inputs are no .npz of rows."""
    shapes = dict(parse_input(text) for text in inputs)
    try:
        fmt = model_files.detect_format(path)
        digest = model_files.digest(path)
    except (ModelFileError, OSError) as error:
        raise ModelRefused(f"--model {error}") from None
    absolute = path.resolve()
    workload = model_files.workload_name(absolute, digest)
    if sample is None:
        return ModelAsked(absolute, fmt, digest, workload, shapes, export)
    try:
        found = sample_inputs.rows(sample_inputs.load(sample), sample)
        sample_digest = model_files.digest(sample)
    except (ModelFileError, OSError) as error:
        raise ModelRefused(f"--inputs {error}") from None
    return ModelAsked(
        absolute, fmt, digest, workload, shapes, export, sample.resolve(), sample_digest, found
    )


def with_model(catalogue: Catalogue, asked: ModelAsked | None) -> Catalogue:
    """The catalogue with the model's workload in it (no FLOPs known: flops_forward "0")."""
    if asked is None:
        return catalogue
    workload = model_files.workload_def(asked.workload, f"{asked.path.name} ({asked.format})")
    return dataclasses.replace(
        catalogue, workloads={**catalogue.workloads, asked.workload: workload}
    )


def free_path(folder: Path, stem: str, suffix: str) -> Path:
    """FOLDER/STEM+SUFFIX, or STEM-2, -3, ... where that is taken: a file the run writes into
    its models/ never replaces one (a resumed run writes its exports and inputs beside)."""
    dest, count = folder / f"{stem}{suffix}", 1
    while dest.exists() or dest.is_symlink():
        count += 1
        dest = folder / f"{stem}-{count}{suffix}"
    return dest
