"""The results table's columns for rows of the user's model file (`collector run --model`;
docs/your-model.md); empty for the catalogue's workloads."""

from __future__ import annotations

from fwbench.collector.store.columns_base import Column

MODEL_COLUMNS: tuple[Column, ...] = (
    Column(
        "model_format",
        "string",
        "Model file: the format of the file the agent ran (onnx, keras, savedmodel, "
        "torch_export, jax_export, torchscript); the workload is model:STEM@DIGEST8 of the "
        "user's file",
    ),
    Column(
        "model_sha256",
        "string",
        "Model file: the SHA-256 of the file the agent ran (of a folder's files)",
    ),
    Column(
        "model_parameters",
        "Int64",
        "Model file: elements of its weights, as the agent that read its signature counts them "
        "(empty where the format does not say: a .jax program's weights are constants)",
    ),
    Column("model_bytes", "Int64", "Model file: bytes of the file the agent ran (of a folder's)"),
    Column(
        "model_export",
        "string",
        "Model file (--export): the agent and the exporter, with its version, that made the "
        "file this row ran from the user's file; empty for the user's own file",
    ),
    Column(
        "outputs_reference",
        "string",
        "Model file: the agent whose outputs the row's are compared with (the run's first "
        "agent that reads the user's file's format, one untimed step per batch size before "
        "any timing)",
    ),
    Column(
        "outputs_match",
        "boolean",
        "Model file, inference: every output element within its dtype's tolerance of the "
        "reference's (docs/your-model.md); False keeps the row out of verdicts; empty where "
        "not compared (training changes the weights)",
    ),
    Column(
        "output_max_abs_diff",
        "Float64",
        "Model file, inference: the largest |output - reference| over the elements compared",
    ),
    Column(
        "output_max_rel_diff",
        "Float64",
        "Model file, inference: the largest |output - reference| / |reference|",
    ),
    Column(
        "outputs_note",
        "string",
        "Model file: where the outputs differ (the first element beyond tolerance), or why they "
        "were not compared",
    ),
)
