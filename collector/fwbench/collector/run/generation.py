"""A generation row's own columns (store/generation_columns.py): time to first token,
inter-token latency, tokens per second from the agent's timed parts (validated beforehand:
validate.py), and what decoding moved from the catalogue's decode model."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from fwbench.agent.v1 import agent_pb2
from fwbench.spec import Catalogue


def generation_columns(
    result: agent_pb2.RunResult,
    catalogue: Catalogue,
    workload: str,
    params: Mapping[str, int],
    batch_size: int,
    dtype: str,
) -> dict[str, Any]:
    """The generation columns of a row whose result carries a GenerationResult; {} for any
    other row."""
    if not result.HasField("generation"):
        return {}
    parts = result.generation
    definition = catalogue.get(workload)
    steps = int(parts.decode_steps_per_sample)
    prompt = definition.prompt_tokens(params)
    prefill = np.asarray(parts.prefill_nanoseconds, dtype=np.float64) / 1e9
    decode = np.asarray(parts.decode_step_nanoseconds, dtype=np.float64) / 1e9
    columns: dict[str, Any] = {
        "prompt_tokens": prompt,
        "decode_steps": steps,
        "kv_cache_bytes": definition.kv_cache_bytes(params, batch_size, dtype),
        "prefill_samples_ns": json.dumps(list(parts.prefill_nanoseconds)),
        "decode_step_samples_ns": json.dumps(list(parts.decode_step_nanoseconds)),
    }
    if prefill.size:
        ttft = float(np.median(prefill))
        columns["time_to_first_token_seconds"] = ttft
        columns["prefill_tokens_per_second"] = batch_size * prompt / ttft
    if steps and decode.size:
        per_sample = decode.reshape(-1, steps).sum(axis=1)
        decode_time = float(np.median(per_sample))
        columns["inter_token_latency_seconds"] = float(np.median(decode))
        columns["inter_token_latency_p99_seconds"] = float(np.percentile(decode, 99))
        columns["decode_tokens_per_second"] = float(np.median(batch_size * steps / per_sample))
        weight_bytes = weight_bytes_per_parameter(result.settings.extra)
        moved = definition.decode_bytes(params, batch_size, dtype, weight_bytes)
        if moved is not None:
            columns["decode_bytes_per_step"] = moved / steps
            columns["decode_bandwidth_bytes_per_second"] = moved / decode_time
    return columns


# The settings key where an agent holding its weights in another format than the row's dtype
# (quantised) says what a weight takes on average (docs/plugins.md); validate.py holds it to
# WEIGHT_BYTES_RANGE before a row is made.
WEIGHT_BYTES_KEY = "weight_bytes_per_parameter"
WEIGHT_BYTES_RANGE = (0.0, 16.0)  # exclusive, inclusive: float64 at most, with room


def weight_bytes_per_parameter(extra: Mapping[str, str]) -> float | None:
    """The agent's bytes per weight, or None where it holds its weights in the row's dtype.
    Raises ValueError for a value that is not a number in WEIGHT_BYTES_RANGE."""
    text = extra.get(WEIGHT_BYTES_KEY)
    if text is None:
        return None
    value = float(text)  # ValueError for what is not a number
    low, high = WEIGHT_BYTES_RANGE
    if not (math.isfinite(value) and low < value <= high):
        raise ValueError(f"{text!r} is not a number of bytes in ({low:g}, {high:g}]")
    return value


def bandwidth_fraction(row: Mapping[str, Any]) -> float | None:
    """decode_bandwidth_bytes_per_second over the row's calibrated read-only bandwidth (a
    decode step reads every weight and its cache, and writes one entry), or None."""
    achieved = row.get("decode_bandwidth_bytes_per_second")
    ceiling = row.get("read_bandwidth_bytes_per_second")
    if not isinstance(achieved, float) or not isinstance(ceiling, float):
        return None
    if not (math.isfinite(achieved) and ceiling > 0):
        return None
    return achieved / ceiling
