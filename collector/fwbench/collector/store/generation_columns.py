"""The results table's columns for generation rows (workloads of kind "generation": a prompt's
forward pass, then one token at a time; docs/transformers.md); empty on every other row.

Times come from the agent's GenerationResult (each part timed alone); bytes from the
catalogue's decode model for the row's parameters, batch and dtype, never from the agent."""

from __future__ import annotations

from fwbench.collector.store.columns_base import Column

GENERATION_COLUMNS: tuple[Column, ...] = (
    Column("prompt_tokens", "Int64", "Generation: tokens of each sequence's prompt (prefill)"),
    Column(
        "decode_steps",
        "Int64",
        "Generation: decode steps of one generation, each one new token for every sequence "
        "(the first new token comes from the prefill)",
    ),
    Column(
        "time_to_first_token_seconds",
        "Float64",
        "Generation: median over the samples of the prefill, the prompt's forward pass up to "
        "and including the first new token",
    ),
    Column(
        "inter_token_latency_seconds",
        "Float64",
        "Generation: median time of one decode step over every decode step of every sample",
    ),
    Column(
        "inter_token_latency_p99_seconds",
        "Float64",
        "Generation: 99th percentile of the decode steps' times",
    ),
    Column(
        "prefill_tokens_per_second",
        "Float64",
        "Generation: batch_size x prompt_tokens / time_to_first_token_seconds",
    ),
    Column(
        "decode_tokens_per_second",
        "Float64",
        "Generation: median over the samples of batch_size x decode_steps / the sample's "
        "decode time (its decode steps together)",
    ),
    Column(
        "kv_cache_bytes",
        "Float64",
        "Generation: bytes of the KV cache of the whole batch at the end of a generation "
        "(catalogue model: keys and values of every layer for prompt and new tokens, the "
        "row's dtype); the agent's own allocation is in settings (kv_cache_allocated_bytes)",
    ),
    Column(
        "decode_bytes_per_step",
        "Float64",
        "Generation: bytes one decode step moves in the catalogue's minimum-traffic model "
        "(every weight once, each sequence's KV cache so far), the mean over a generation; the "
        "weights at the row's dtype, or at settings.weight_bytes_per_parameter where the agent "
        "holds them quantised",
    ),
    Column(
        "decode_bandwidth_bytes_per_second",
        "Float64",
        "Generation: decode_bytes_per_step x decode_steps / the median sample's decode time: "
        "the memory bandwidth decoding achieved",
    ),
    Column(
        "decode_bandwidth_fraction",
        "Float64",
        "Generation: decode_bandwidth_bytes_per_second / read_bandwidth_bytes_per_second, how "
        "close decoding ran to this host's calibrated memory bandwidth (empty where the row has "
        "no calibrated bandwidth: GPU rows, other hosts; above 1 where the weights and cache fit "
        "in the CPU's caches)",
    ),
    Column(
        "prefill_samples_ns",
        "string",
        "Generation: JSON list of each sample's prefill time in nanoseconds, as the agent sent",
    ),
    Column(
        "decode_step_samples_ns",
        "string",
        "Generation: JSON list of every decode step's time in nanoseconds, decode_steps per "
        "sample, sample after sample, as the agent sent",
    ),
)
