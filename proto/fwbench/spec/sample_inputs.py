"""The user's own sample inputs (`collector run --model FILE --inputs SAMPLE.npz`), as collector
and agents both read them (agent.proto's ModelFile.inputs_path, since 1.8).

The user's file is a NumPy .npz whose arrays are named after the model's inputs (or `arr_0`,
`arr_1`, ... in the signature's order, as `np.savez(path, a, b)` names them), each holding
the same number of rows along its first axis. The collector checks it against the model's
signature and writes the run's own copy, `input_0`, `input_1`, ... in the order of the
signature's inputs (CANONICAL), beside the exports: every agent, whatever its file names
the inputs, takes the i-th input from `input_i`, and a cell of batch size B feeds each
input's first B rows. Pickled objects are never loaded."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from fwbench.spec.model_files import ModelFileError, TensorInfo

if TYPE_CHECKING:
    import numpy as np

CANONICAL = "input_{}"  # the run's copy: input_0, input_1, ... in the signature's order


def load(path: Path) -> dict[str, np.ndarray]:
    """The arrays of an .npz (no pickles); ModelFileError naming the file when it is none."""
    import numpy as np

    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):
            raise ValueError("an .npy array, not an .npz archive of named arrays")
        with data:
            arrays = {name: data[name] for name in data.files}
    except (OSError, ValueError, EOFError) as error:
        text = " ".join(str(error).split())[:200]
        raise ModelFileError(f"{path}: not a NumPy .npz of arrays ({text})") from None
    if not arrays:
        raise ModelFileError(f"{path}: holds no arrays")
    return arrays


def rows(arrays: Mapping[str, np.ndarray], path: Path) -> int:
    """The number of rows every array holds; ModelFileError when they disagree."""
    counts = {name: (a.shape[0] if a.ndim else 0) for name, a in arrays.items()}
    if len(set(counts.values())) != 1 or 0 in counts.values():
        said = ", ".join(f"{n}: {c}" for n, c in counts.items())
        raise ModelFileError(
            f"{path}: every array needs the same number of rows, at least one ({said})"
        )
    return next(iter(counts.values()))


def ordered(
    arrays: Mapping[str, np.ndarray], inputs: Sequence[TensorInfo], path: Path
) -> list[np.ndarray]:
    """The arrays in the order of the signature's inputs: by name, else `arr_0`, ... in order;
    ModelFileError naming the first input that has none, or whose dtype or shape cannot be
    it (its dimensions past the first must fit the signature's)."""
    names = [t.name for t in inputs]
    positional = [f"arr_{i}" for i in range(len(inputs))]
    if set(names) <= set(arrays):
        keys = names
    elif set(positional) == set(arrays):
        keys = positional
    else:
        missing = next(n for n in names if n not in arrays)
        raise ModelFileError(
            f"--inputs {path.name}: no array {missing!r} (it holds "
            f"{', '.join(sorted(arrays))}; name them after the inputs: {', '.join(names)})"
        )
    found = []
    for key, spec in zip(keys, inputs, strict=True):
        array = arrays[key]
        open_tail = spec.shape[1:]
        fits = array.ndim == len(spec.shape) and all(
            d is None or d == a for d, a in zip(open_tail, array.shape[1:], strict=True)
        )
        if array.dtype.name != spec.dtype or not fits:
            shape = "x".join(map(str, array.shape))
            raise ModelFileError(
                f"--inputs {path.name}: array {key!r} is {array.dtype.name}[{shape}], which "
                f"cannot be the model's input {spec.describe()}"
            )
        found.append(array)
    return found


def feed(path: Path, inputs: Sequence[TensorInfo]) -> dict[str, np.ndarray]:
    """A cell's inputs from the run's copy (CANONICAL names, the cell's full shapes in
    `inputs`): the first rows of each; ModelFileError when the file cannot give them."""
    arrays = load(path)
    fed = {}
    for index, spec in enumerate(inputs):
        key = CANONICAL.format(index)
        array = arrays.get(key)
        if array is None:
            raise ModelFileError(f"{path.name}: no array {key!r} for input {spec.name!r}")
        batch = spec.shape[0] if spec.shape else 0
        cut = array[:batch] if array.ndim else array
        if cut.shape != tuple(spec.shape) or cut.dtype.name != spec.dtype:
            shape = "x".join(map(str, array.shape))
            raise ModelFileError(
                f"{path.name}: {key} is {array.dtype.name}[{shape}], which cannot give input "
                f"{spec.describe()}"
            )
        fed[spec.name] = cut
    return fed
