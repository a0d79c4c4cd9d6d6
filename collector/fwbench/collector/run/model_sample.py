"""--inputs SAMPLE.npz: the user's own inputs for their model, checked against its signature
before anything is timed and written as the run's own copy (models/inputs.npz beside the
exports), whose arrays input_0, input_1, ... every agent feeds in the signature's order,
each cell the first rows of each (fwbench/spec/sample_inputs.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from fwbench.collector.run.model_file import ModelAsked, ModelRefused, free_path
from fwbench.spec import model_files, sample_inputs
from fwbench.spec.model_files import ModelFileError, TensorInfo


def sample_copy(
    asked: ModelAsked, inputs: Sequence[TensorInfo], batch_sizes: Sequence[int], folder: Path
) -> tuple[Path, str, dict[str, tuple[int, ...]]]:
    """The run's copy of --inputs (its path and digest) and each input's dimensions past the
    first; ModelRefused (one line) for arrays that cannot be the model's inputs, or too few
    rows for a batch size."""
    import numpy as np

    assert asked.sample is not None
    name = asked.sample.name
    try:
        arrays = sample_inputs.ordered(sample_inputs.load(asked.sample), inputs, asked.sample)
    except ModelFileError as error:
        raise ModelRefused(str(error)) from None
    both = sorted(set(asked.shapes) & {t.name for t in inputs})
    if both:
        raise ModelRefused(f"--input {both[0]} and --inputs {name} both give its shape: give one")
    more = [b for b in batch_sizes if b > asked.sample_rows]
    if more:
        raise ModelRefused(
            f"--inputs {name} holds {asked.sample_rows} rows: batch size {more[0]} needs more "
            f"(give --batch-sizes of at most {asked.sample_rows})"
        )
    folder.mkdir(parents=True, exist_ok=True)
    dest = free_path(folder, "inputs", ".npz")
    named = {sample_inputs.CANONICAL.format(i): a for i, a in enumerate(arrays)}
    np.savez(dest, **named)  # type: ignore[arg-type]
    tails = {
        t.name: tuple(int(d) for d in a.shape[1:]) for t, a in zip(inputs, arrays, strict=True)
    }
    return dest, model_files.digest(dest), tails


def with_batch(
    shapes: Mapping[str, tuple[int, ...]], tails: Mapping[str, tuple[int, ...]], batch: int
) -> dict[str, tuple[int, ...]]:
    """--input's shapes and, for each input the sample gives, its rows at `batch`."""
    return {**shapes, **{name: (batch, *tail) for name, tail in tails.items()}}
