"""Writes docs/gpu.md from what gpu_host.py left in its output folder: gpu-host.json (the
plan, the host, the bare script's samples), run-*/results.parquet (the collector's rows).

    python tests/benchmarks/gpu_doc.py OUT [--doc docs/gpu.md]

Every figure in the page comes from those files; the page says how each was taken."""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
from pathlib import Path
from typing import Any

import pandas as pd

SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "tf32": "tf32"}
GPU_SETTINGS = (
    "tf32_matmul",
    "tf32_cudnn",
    "float32_matmul_precision",
    "cudnn_benchmark",
    "cudnn_deterministic",
    "cuda_runtime",
    "cudnn_loaded",
    "matmul_precision",
    "dtype_policy",
)


def tensorflow_note(python: str, dry_run: bool) -> list[str]:
    """Whether TensorFlow (the tf-cuda agent) could run with `python`; [] when it could."""
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('tensorflow') is None)"
    done = subprocess.run([python, "-c", probe], capture_output=True, check=False)
    if done.returncode == 0:
        return [] if dry_run else ["TensorFlow is installed here but tf-cuda was not measured"]
    return [f"TensorFlow (tf-cuda) cannot run here: {python} has no tensorflow package"]


def load_rows(out: Path, record: dict[str, Any]) -> pd.DataFrame:
    """Every sweep's rows, with `precision` (fp32, tf32, bf16 ...) and `sweep` added."""
    frames = []
    for sweep in record["sweeps"]:
        path = out / str(sweep["folder"]) / "results.parquet"
        if not sweep["folder"] or not path.exists():
            continue
        frame = pd.read_parquet(path)
        frame["sweep"] = sweep["name"]
        tf32 = sweep["tf32"] == "on"
        frame["precision"] = [
            "tf32" if tf32 and dtype == "float32" else SHORT.get(str(dtype), str(dtype))
            for dtype in frame["dtype"]
        ]
        frames.append(frame)
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def bare_medians(record: dict[str, Any]) -> dict[str, float]:
    """Bare-script median seconds per precision (fp32, tf32, bf16)."""
    found = {}
    for entry in record.get("bare", []):
        if entry.get("samples_ns"):
            found[SHORT[entry["precision"]]] = statistics.median(entry["samples_ns"]) / 1e9
    return found


def bare_timing(record: dict[str, Any]) -> str:
    """How long the bare script timed: a short burst runs at boost clocks that a GPU under a
    sustained load does not keep (it reaches its power limit within a second), so the bare
    figure is only comparable with the harness's when both timed about as long."""
    runs = [e for e in record.get("bare", []) if e.get("samples_ns")]
    if not runs:
        return ""
    seconds = [sum(e["samples_ns"]) / 1e9 for e in runs]
    steps = [len(e["samples_ns"]) for e in runs]

    def span_of(low: str, high: str) -> str:
        return low if low == high else f"{low}-{high}"

    counts = span_of(str(min(steps)), str(max(steps)))
    span = f"{counts} timed steps, {span_of(f'{min(seconds):.2g}', f'{max(seconds):.2g}')} s each"
    if all(e.get("min_seconds") for e in runs):
        return f"The bare runs timed {span} (at least the sweeps' --min-seconds)."
    return (
        f"The bare runs timed {span}, with no minimum time: for a short product that is a "
        "burst at boost clocks, faster than the same product sustained (see below), so "
        "the bf16 peak and harness / bare here compare a burst with a sustained load."
    )


def _number(value: Any, scale: float = 1.0, digits: int = 1) -> str:
    if value is None or pd.isna(value):
        return "-"
    return f"{float(value) * scale:.{digits}f}"


def _sig(value: Any) -> str:
    """Three significant figures (TFLOP/s and fractions span decades: GPU and dry run)."""
    if value is None or pd.isna(value):
        return "-"
    return f"{float(value):.3g}"


def _energy_per_item(row: pd.Series) -> Any:
    items = row.get("n", 0) * row.get("items_per_sample", 0)
    joules = row.get("gpu_energy_joules")
    if joules is None or pd.isna(joules) or not items or pd.isna(items):
        return None
    return float(joules) / float(items)


def _device_ms(row: pd.Series) -> str:
    """The median device time from CUDA events (settings.extra), when the agent measured it."""
    value = json.loads(row.get("settings") or "{}").get("device_time_median_ns")
    return _number(float(value) if value else None, 1e-6, 3)


def _telemetry(row: pd.Series) -> list[str]:
    return [
        _number(row.get("gpu_utilization_mean_percent"), digits=0),
        _number(row.get("gpu_utilization_peak_percent"), digits=0),
        _number(row.get("gpu_memory_peak_bytes"), 1 / 2**30, 2),
        _number(row.get("gpu_power_mean_watts"), digits=0),
        _number(_energy_per_item(row), 1e3, 3),
    ]


TELEMETRY_HEAD = ["GPU util mean %", "peak %", "GPU mem peak GiB", "power W", "energy mJ/item"]


def _table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def gemm_table(rows: pd.DataFrame, bare: dict[str, float], peak: float | None) -> str:
    body = []
    gemm = rows[(rows["workload"] == "gemm") & (rows["status"] == "ok")]
    for _, row in gemm.sort_values(["agent", "precision", "phase"]).iterrows():
        tflops = row["gflops_per_second"] / 1e3
        # The bare script is PyTorch's: it is the overhead reference for torch rows only.
        same = row["phase"] == "infer" and row["framework"] == "torch"
        reference = bare.get(row["precision"]) if same else None
        body.append(
            [
                str(row["agent"]),
                str(row["phase"]),
                str(row["precision"]),
                _number(row["median_seconds"], 1e3, 3),
                _device_ms(row),
                _sig(tflops),
                _sig(tflops / peak * 100 if peak else None),
                _number(reference, 1e3, 3),
                _number(row["median_seconds"] / reference if reference else None, digits=3),
                *_telemetry(row),
            ]
        )
    head = ["agent", "phase", "precision", "median ms", "device ms", "TFLOP/s", "% of bare bf16"]
    head += ["bare median ms", "harness / bare", *TELEMETRY_HEAD]
    return _table(head, body)


def model_table(rows: pd.DataFrame, peak: float | None) -> str:
    body = []
    models = rows[~rows["workload"].isin(("gemm", "generate"))]
    order = ["workload", "agent", "phase", "precision", "batch_size", "mode"]
    for _, row in models.sort_values(order).iterrows():
        ok = row["status"] == "ok"
        tflops = row["gflops_per_second"] / 1e3 if ok else None
        body.append(
            [
                str(row["workload"]),
                str(row["agent"]),
                _mode(row),
                str(row["phase"]),
                str(row["precision"]),
                str(row["batch_size"]),
                _number(row["median_seconds"], 1e3, 3) if ok else "-",
                _device_ms(row) if ok else "-",
                _number(row["items_per_second"], digits=0) if ok else "-",
                _sig(tflops),
                _sig(tflops / peak * 100 if peak and ok else None),
                *_telemetry(row),
                "ok" if ok else f"{row['status']} {row.get('error_code') or ''}".strip(),
            ]
        )
    head = ["workload", "agent", "mode", "phase", "precision", "batch", "median ms", "device ms"]
    head += ["items/s"]
    head += ["TFLOP/s", "% of bare bf16", *TELEMETRY_HEAD, "status"]
    return _table(head, body)


def _mode(row: pd.Series) -> str:
    """The mode, and for a transformer the attention kernel that ran (settings)."""
    mode = "" if pd.isna(row.get("mode")) else str(row["mode"])
    settings = row.get("settings")
    kernel = "" if pd.isna(settings) else json.loads(settings).get("attention_kernel", "")
    return f"{mode} ({kernel})" if kernel else mode


def generation_table(rows: pd.DataFrame) -> str:
    """generate's rows: time to first token, inter-token latency, decode tokens per second and
    the bandwidth decoding reached (the catalogue's bytes over the decode time)."""
    body = []
    found = rows[rows["workload"] == "generate"]
    if found.empty:
        return "No generate cell in this run."
    order = ["agent", "precision", "batch_size", "prompt_tokens", "mode"]
    for _, row in found.sort_values(order).iterrows():
        ok = row["status"] == "ok"
        body.append(
            [
                str(row["agent"]),
                _mode(row),
                str(row["precision"]),
                str(row["batch_size"]),
                str(json.loads(row["params"]).get("prompt_len", "-")),
                _number(row.get("time_to_first_token_seconds"), 1e3, 2) if ok else "-",
                _number(row.get("inter_token_latency_seconds"), 1e3, 3) if ok else "-",
                _number(row.get("decode_tokens_per_second"), digits=0) if ok else "-",
                _number(row.get("decode_bandwidth_bytes_per_second"), 1e-9, 0) if ok else "-",
                _number(row.get("kv_cache_bytes"), 2**-20, 1),
                "ok" if ok else f"{row['status']} {row.get('error_code') or ''}".strip(),
            ]
        )
    head = ["agent", "mode (attention)", "precision", "batch", "prompt", "first token ms"]
    head += ["ms a token", "decode tokens/s", "decode GB/s", "KV cache MiB", "status"]
    return _table(head, body)


def versions(rows: pd.DataFrame) -> str:
    lines = []
    for agent, group in rows.groupby("agent"):
        ran = group[group["status"] == "ok"]
        first = (ran if not ran.empty else group).iloc[0]  # a cell that ran names the device
        where = f"{first['device_name']} ({first['device']})" if not ran.empty else "(no cell ran)"
        libraries = json.loads(first["libraries"] or "{}")
        wanted = {k: v for k, v in libraries.items() if k in ("cuda", "cudnn", "cublas", "jaxlib")}
        settings: dict[str, set[str]] = {}
        for text in group["settings"].dropna():
            for key, value in json.loads(text or "{}").items():
                if key in GPU_SETTINGS:
                    settings.setdefault(key, set()).add(str(value))
        shown = "; ".join(f"{k}={'/'.join(sorted(v))}" for k, v in sorted(settings.items()))
        lines.append(
            f"- `{agent}`: {first['framework']} {first['framework_version']} on "
            f"{where}; libraries {json.dumps(wanted)}; "
            f"settings seen: {shown or 'none reported'}; Python {first.get('agent_python', '')}"
        )
    return "\n".join(lines)


def failures(rows: pd.DataFrame) -> str:
    failed = rows[rows["status"] != "ok"]
    if failed.empty:
        return "None: every cell ran."
    lines = []
    for _, row in failed.iterrows():
        cell = f"{row['agent']} {row['workload']} {row['phase']} {row['precision']}"
        reason = str(row.get("error") or "")[:160]
        lines.append(
            f"- {cell} batch {row['batch_size']}: {row['status']} {row['error_code']}: {reason}"
        )
    return "\n".join(lines)


METHOD = """\
## Method

- Each cell is one `collector run` cell through the existing-environment launcher (`--python
  AGENT=PY`): the agent process runs in the host's interpreter, the collector drives it over
  gRPC on loopback, one agent at a time. Samples are wall-clock step times with the device
  synchronized before every clock read (docs/measurement.md); the median is reported.
  "device ms" is the median device time of the same steps from CUDA events around each step
  (torch only; warm-up included, first call left out: runtime/device_timing.py).
- TF32 and cuDNN autotuning are set per sweep with `FWBENCH_TF32` and
  `FWBENCH_CUDNN_BENCHMARK` (on/off, read by the agent at start-up and recorded on every row):
  gemm fp32 and bf16 with TF32 off, gemm "tf32" = float32 with TF32 on, conv2d and resnet50
  with TF32 off and cuDNN autotuning on. bf16 cells are pure bf16 (weights and inputs cast, no
  autocast).
- TFLOP/s = catalogue FLOPs per item x batch / median step time. "% of bare bf16" is against
  the bare script's bf16 gemm of the same size on the same device (the "bf16 peak": what a
  plain PyTorch call sustains here on random data), not a datasheet figure; a row can pass
  100%, e.g. a training gemm whose backward products multiply a gradient of ones, which draws
  less power and keeps higher clocks.
- "bare" = tests/benchmarks/bare_torch.py: the same product in a plain loop (perf_counter_ns,
  `torch.cuda.synchronize()` before each clock read), same interpreter, after the same
  warm-up, timed as long as the gemm section says (the script now times at least the sweeps'
  `--min-seconds`; a page made before 2026-11-26 timed a 50-step burst); harness / bare > 1
  is the harness's overhead per step (torch rows, infer; the bare script is PyTorch's).
- Telemetry: the collector scrapes each agent's /metrics (NVML) every 0.25 s; utilisation and
  power are the mean (and peak) over the scrapes inside the timed phase, GPU memory the peak
  of the device's used memory, energy the NVML total-energy counter interpolated at the start
  and end of the timed phase (docs/telemetry.md), divided by the items timed. GPU memory is
  what NVML sees in use: PyTorch's caching allocator keeps freed blocks, and JAX preallocates
  75% of the device by default (XLA_PYTHON_CLIENT_PREALLOCATE), so it is a pool, not a need.
"""


def sweep_note(sweep: dict[str, Any]) -> str:
    """What the page says of a sweep that did not simply finish ("" for one that did)."""
    if sweep.get("stopped"):
        where = f" (see run-{sweep['name']}.log)" if sweep["folder"] else ""
        return f"- sweep {sweep['name']}: {sweep['stopped']}{where}"
    if sweep["exit_code"] not in (0, 1):  # 1: some cell failed, listed under the tables
        return (
            f"- sweep {sweep['name']}: the collector exited {sweep['exit_code']} (see "
            f"run-{sweep['name']}.log)"
        )
    return ""


# What a person wrote after looking at a run, in its output folder: rendered after the notes.
FINDINGS = "FINDINGS.md"


def render(out: Path) -> str:
    record = json.loads((out / "gpu-host.json").read_text())
    rows = load_rows(out, record)
    bare = bare_medians(record)
    gemm = record["gemm"]
    flops = 2.0 * gemm[0] * gemm[1] * gemm[2]
    peak = flops / bare["bf16"] / 1e12 if "bf16" in bare else None
    dry = record["mode"] != "gpu"
    parts = ["# GPU results" + (" (CPU DRY RUN: not GPU results)" if dry else "")]
    if dry:
        parts.append(
            "This page was made by `gpu_host.py --cpu-dry-run`: the GPU pipeline on the CPU with "
            "tiny shapes, to check the script. Its figures say nothing about any GPU."
        )
    if not dry:
        parts.append("How this page is made, and how to run it again: [gpu-host.md](gpu-host.md).")
    host = record["host"]
    parts.append(
        f"Generated by `{record['command']}` at {record['started']} (UTC), output folder "
        f"`{out.name}`.\n\n- Device (nvidia-smi: name, driver, memory, power limit, max SM "
        f"clock): {host.get('nvidia_smi', 'no nvidia-smi on this host')}\n"
        f"- CPU: {host.get('cpu_model', '?')}; collector Python {host.get('python')}; agents' "
        f"Python `{host.get('agent_python')}`"
    )
    parts.append(
        "## Versions and settings, as the agents reported them\n\n" + versions(rows)
        if not rows.empty
        else "## No rows\n\nNo sweep produced results."
    )
    peak_text = f"{peak:.4g} TFLOP/s" if peak else "not measured (the bare bf16 run failed)"
    parts.append(
        f"## gemm {gemm[0]}x{gemm[1]}x{gemm[2]}\n\nMeasured bf16 peak (bare script): "
        f"{peak_text}. {bare_timing(record)}\n\n"
        + (gemm_table(rows, bare, peak) if not rows.empty else "")
    )
    if not rows.empty:
        parts.append("## conv2d and models\n\n" + model_table(rows, peak))
        parts.append("## Generation (greedy, KV cache)\n\n" + generation_table(rows))
        parts.append("## Cells that did not run\n\n" + failures(rows))
    bare_errors = [f"- bare {e['precision']}: {e['error']}" for e in record["bare"] if "error" in e]
    stopped = [sweep_note(sweep) for sweep in record["sweeps"]]
    stopped = [note for note in stopped if note]
    notes = [f"- {note}" for note in record["notes"]] + stopped + bare_errors
    parts.append("## Notes\n\n" + ("\n".join(notes) if notes else "None."))
    findings = out / FINDINGS
    if findings.is_file():  # written by a person after the run, kept with its data
        parts.append(findings.read_text("utf-8").strip())
    parts.append(METHOD)
    return "\n\n".join(parts) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--doc", type=Path, default=Path("docs/gpu.md"))
    args = parser.parse_args()
    args.doc.write_text(render(args.out))


if __name__ == "__main__":
    main()
