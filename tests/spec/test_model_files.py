"""fwbench/spec/model_files.py: what collector and agents must do alike with a user's model
file: the format told, the digest of a file and of a folder, each input's shape for a cell, the
inputs every agent makes from the seed, the outputs sent and compared."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

from fwbench.spec import model_files
from fwbench.spec.model_files import ModelFileError, TensorInfo


def test_the_format_is_told_from_what_the_path_is(tmp_path: Path) -> None:
    (tmp_path / "a.onnx").write_bytes(b"\x08\x07")
    with zipfile.ZipFile(tmp_path / "b.keras", "w") as archive:
        archive.writestr("config.json", "{}")
    saved = tmp_path / "saved"
    saved.mkdir()
    (saved / "saved_model.pb").write_bytes(b"")
    assert model_files.detect_format(tmp_path / "a.onnx") == "onnx"
    assert model_files.detect_format(tmp_path / "b.keras") == "keras"
    assert model_files.detect_format(saved) == "savedmodel"
    (tmp_path / "c.KERAS").write_text("not a zip")
    with pytest.raises(ModelFileError, match=r"a \.keras file is a zip archive"):
        model_files.detect_format(tmp_path / "c.KERAS")
    with pytest.raises(ModelFileError, match=r"without saved_model\.pb"):
        model_files.detect_format(tmp_path)
    (tmp_path / "d.bin").write_bytes(b"")
    with pytest.raises(ModelFileError, match=r"cannot tell its format from '\.bin'"):
        model_files.detect_format(tmp_path / "d.bin")


def test_a_folders_digest_covers_its_files_names_and_contents(tmp_path: Path) -> None:
    (tmp_path / "variables").mkdir()
    (tmp_path / "saved_model.pb").write_bytes(b"graph")
    (tmp_path / "variables" / "v.data").write_bytes(b"weights")
    first = model_files.digest(tmp_path)
    (tmp_path / "variables" / "v.data").write_bytes(b"weightz")
    assert model_files.digest(tmp_path) != first
    (tmp_path / "variables" / "v.data").write_bytes(b"weights")
    assert model_files.digest(tmp_path) == first
    (tmp_path / "variables" / "v.data").rename(tmp_path / "variables" / "w.data")
    assert model_files.digest(tmp_path) != first


def test_a_workload_name_is_lower_case_and_names_the_content(tmp_path: Path) -> None:
    name = model_files.workload_name(tmp_path / "My Net v2.onnx", "ab" * 32)
    assert name == "model:my-net-v2@abababab"
    model_files.check_workload_name(name)
    assert model_files.is_model_workload(name) and not model_files.is_model_workload("resnet18")


SIGNATURE = (TensorInfo("ids", (None, None), "int64"), TensorInfo("mask", (None, 16), "bool"))


def test_shapes_take_the_batch_and_the_given_axes() -> None:
    with pytest.raises(ModelFileError, match="give it with --input ids=8xN"):
        model_files.resolve_shapes(SIGNATURE, 8, {})
    shapes = model_files.resolve_shapes(SIGNATURE, 8, {"ids": (8, 16)})
    assert [t.shape for t in shapes] == [(8, 16), (8, 16)]
    with pytest.raises(ModelFileError, match="does not fit the model's mask bool"):
        model_files.resolve_shapes(SIGNATURE, 8, {"ids": (8, 16), "mask": (8, 15)})
    with pytest.raises(ModelFileError, match="has no such input"):
        model_files.resolve_shapes(SIGNATURE, 8, {"labels": (8,)})
    assert model_files.batch_fixed_at((TensorInfo("x", (2, 3), "float32"),)) == 2
    assert model_files.batch_fixed_at(SIGNATURE) is None


def test_the_inputs_are_one_pcg64_stream_of_uniform_doubles() -> None:
    shapes = (TensorInfo("x", (2, 3), "float32"), TensorInfo("ids", (2, 4), "int64"))
    made = model_files.make_inputs(shapes, 11)
    stream = np.random.Generator(np.random.PCG64(11)).random(6 + 8)
    np.testing.assert_array_equal(made["x"], (stream[:6] * 2 - 1).astype(np.float32).reshape(2, 3))
    np.testing.assert_array_equal(made["ids"], (stream[6:] < 0.5).astype(np.int64).reshape(2, 4))
    assert made["x"].dtype == np.float32 and made["ids"].dtype == np.int64
    again = model_files.make_inputs(shapes, 11)
    assert all(np.array_equal(made[k], again[k]) for k in made)


def test_outputs_travel_whole_or_as_their_first_elements() -> None:
    big = np.arange(2_000_000, dtype=np.float32).reshape(1000, 2000)
    small = np.array([[1, 2]], dtype=np.int64)
    messages = model_files.output_messages({"big": big, "small": small})
    assert sum(len(m.data) for m in messages) <= model_files.OUTPUT_BYTES
    assert list(messages[0].shape) == [1000, 2000] and messages[0].elements < big.size
    back = model_files.output_arrays(messages)
    np.testing.assert_array_equal(back["big"], big.reshape(-1)[: messages[0].elements])
    np.testing.assert_array_equal(back["small"], small.reshape(-1))
    messages[1].data = messages[1].data[:-1]
    with pytest.raises(ModelFileError, match="bytes for 2 int64 elements"):
        model_files.output_arrays(messages)


def test_outputs_are_compared_within_their_dtypes_tolerance() -> None:
    reference = {"y": np.array([1.0, -2.0, 1000.0], np.float32)}
    within = model_files.compare_outputs({"y": reference["y"] * np.float32(1 + 5e-4)}, reference)
    assert within.within and within.max_abs == pytest.approx(0.5, rel=1e-3)
    beyond = model_files.compare_outputs({"y": reference["y"] + np.float32(0.01)}, reference)
    assert not beyond.within and "first at 0" in beyond.why
    ints = {"k": np.array([1, 2], np.int64)}
    assert not model_files.compare_outputs({"k": np.array([1, 3], np.int64)}, ints).within
    missing = model_files.compare_outputs({}, reference)
    assert not missing.within and "no output 'y'" in missing.why
    nan = model_files.compare_outputs({"y": np.array([np.nan, -2, 1000], np.float32)}, reference)
    assert not nan.within and "not finite alike" in nan.why
