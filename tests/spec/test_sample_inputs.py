"""The user's sample inputs (fwbench/spec/sample_inputs.py): an .npz read without pickles, its
arrays put in the signature's order by name or as np.savez numbers them, checked against the
signature, and a cell fed the first rows of the run's copy; each refusal one line naming the
file and the array."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fwbench.spec import sample_inputs
from fwbench.spec.model_files import ModelFileError, TensorInfo

SIGNATURE = (
    TensorInfo("ids", (None, None), "int64"),
    TensorInfo("image", (None, 3, 4), "float32"),
)


def _npz(path: Path, **arrays: np.ndarray) -> Path:
    np.savez(path, **arrays)  # type: ignore[arg-type]
    return path


def _arrays(rows: int = 5) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "ids": rng.integers(0, 9, (rows, 7)),
        "image": rng.standard_normal((rows, 3, 4)).astype(np.float32),
    }


def test_arrays_by_name_or_number_in_the_signatures_order(tmp_path: Path) -> None:
    arrays = _arrays()
    named = sample_inputs.load(
        _npz(tmp_path / "named.npz", image=arrays["image"], ids=arrays["ids"])
    )
    assert sample_inputs.rows(named, tmp_path / "named.npz") == 5
    ordered = sample_inputs.ordered(named, SIGNATURE, tmp_path / "named.npz")
    assert [a.dtype.name for a in ordered] == ["int64", "float32"]
    path = tmp_path / "numbered.npz"
    np.savez(path, arrays["ids"], arrays["image"])  # arr_0, arr_1
    numbered = sample_inputs.ordered(sample_inputs.load(path), SIGNATURE, path)
    assert all(np.array_equal(a, b) for a, b in zip(ordered, numbered, strict=True))


def test_a_cell_feeds_the_first_rows_of_the_runs_copy(tmp_path: Path) -> None:
    arrays = _arrays()
    copy = _npz(tmp_path / "inputs.npz", input_0=arrays["ids"], input_1=arrays["image"])
    cell = (TensorInfo("ids", (2, 7), "int64"), TensorInfo("image", (2, 3, 4), "float32"))
    fed = sample_inputs.feed(copy, cell)
    assert np.array_equal(fed["ids"], arrays["ids"][:2])
    assert np.array_equal(fed["image"], arrays["image"][:2])
    # An export names its inputs otherwise: the order, not the names, picks the arrays.
    renamed = (TensorInfo("input_a", (2, 7), "int64"), TensorInfo("input_b", (2, 3, 4), "float32"))
    assert np.array_equal(sample_inputs.feed(copy, renamed)["input_b"], arrays["image"][:2])
    with pytest.raises(ModelFileError, match="cannot give input ids int64"):
        sample_inputs.feed(copy, (TensorInfo("ids", (9, 7), "int64"), cell[1]))  # 5 rows only


@pytest.mark.parametrize(
    ("case", "said"),
    [
        ("not_npz", "not a NumPy .npz of arrays"),
        ("npy", "not a NumPy .npz of arrays"),
        ("pickle", "not a NumPy .npz of arrays"),
        ("rows", "every array needs the same number of rows"),
        ("missing", "no array 'image' (it holds ids; name them after the inputs: ids, image)"),
        ("dtype", "array 'image' is float64[5x3x4], which cannot be the model's input image"),
        ("shape", "array 'image' is float32[5x4x3], which cannot be the model's input image"),
    ],
)
def test_a_file_that_cannot_be_the_inputs_is_refused_in_one_line(
    tmp_path: Path, case: str, said: str
) -> None:
    arrays = _arrays()
    path = tmp_path / "sample.npz"
    if case == "not_npz":
        path.write_text("ids,image\n1,2\n")
    elif case == "npy":
        np.save(tmp_path / "sample.npy", arrays["ids"])
        path = tmp_path / "sample.npy"
    elif case == "pickle":
        np.savez(path, ids=np.array([{"a": 1}], dtype=object))
    elif case == "rows":
        _npz(path, ids=arrays["ids"], image=arrays["image"][:3])
    elif case == "missing":
        _npz(path, ids=arrays["ids"])
    elif case == "dtype":
        _npz(path, ids=arrays["ids"], image=arrays["image"].astype(np.float64))
    elif case == "shape":
        _npz(path, ids=arrays["ids"], image=arrays["image"].reshape(5, 4, 3))
    with pytest.raises(ModelFileError) as caught:
        loaded = sample_inputs.load(path)
        sample_inputs.rows(loaded, path)
        sample_inputs.ordered(loaded, SIGNATURE, path)
    assert said in str(caught.value) and "\n" not in str(caught.value)
