"""The results table's columns, in order, with their types and meanings (schema.py holds
the version, and turns rows into a frame of these columns)."""

from __future__ import annotations

from fwbench.collector.store.columns_base import Column
from fwbench.collector.store.generation_columns import GENERATION_COLUMNS
from fwbench.collector.store.interference_columns import INTERFERENCE_COLUMNS
from fwbench.collector.store.model_columns import MODEL_COLUMNS
from fwbench.collector.store.profile_columns import PROFILE_COLUMNS
from fwbench.collector.store.throughput_columns import THROUGHPUT_COLUMNS
from fwbench.collector.store.world_columns import WORLD_COLUMNS

__all__ = ["COLUMNS", "Column"]

COLUMNS: tuple[Column, ...] = (
    Column("schema_version", "Int64", "Version of this table's schema"),
    Column("run_id", "string", "Run identifier (also the run's folder name)"),
    Column("cell", "Int64", "Index of the cell within the run, in execution order"),
    Column(
        "repetition",
        "Int64",
        "Which run of this agent's cell this row is, from 0 (`--repeat N`: 0..N-1, agents "
        "alternating); empty in runs before schema 3",
    ),
    Column("launcher", "string", "How the agent was started: local, docker or attached"),
    Column(
        "agent",
        "string",
        "Agent name (manifest name); further instances of one agent in a run (A/A) are "
        "NAME#2, NAME#3",
    ),
    Column("address", "string", "gRPC address the collector used"),
    Column(
        "node",
        "string",
        "The node a scheduler ran the agent on (Slurm: the job's node; a world: its "
        "ranks' nodes, comma-separated, in rank order); empty otherwise",
    ),
    Column(
        "scheduler_job",
        "string",
        "The scheduler's job that ran the agent (slurm:JOBID); empty when no scheduler did",
    ),
    Column(
        "agent_pid",
        "Int64",
        "Process id of the agent that measured the row, as the collector's host sees it (in "
        "a container, the agent under the container's init; an attached agent's own pid); "
        "with `--repeat` each "
        "repetition is a fresh process unless --same-process; empty in runs before schema 4",
    ),
    Column(
        "image",
        "string",
        "Docker launcher: the agent's image tag (e.g. fwbench/torch-cpu:latest), or for an "
        "image that declares its agent the reference given (an id: the image's first tag); "
        "empty otherwise",
    ),
    Column(
        "image_id",
        "string",
        "Docker launcher: the image's content id (sha256:...), which names the exact bits "
        "that ran; empty otherwise",
    ),
    Column(
        "image_digest",
        "string",
        "Docker launcher: the image's registry digest (NAME@sha256:...); empty for an image "
        "built locally and never pushed or pulled",
    ),
    Column(
        "environment_source",
        "string",
        "Where the agent's environment came from: built (a virtual environment the collector "
        "made from the manifest), existing (an interpreter given with --python, which the "
        "collector did not make), image (Docker launcher) or attached (someone else's "
        "process); empty in runs before schema 6",
    ),
    Column(
        "agent_python",
        "string",
        "Local launcher: the Python interpreter the agent ran with; empty otherwise",
    ),
    Column("framework", "string", "Framework the agent runs (torch, tensorflow, jax)"),
    Column("framework_version", "string", "Framework version as the agent reports it"),
    Column(
        "family",
        "string",
        "The native framework the agent's results stand beside: Keras' backend (torch, jax, "
        "tensorflow), ONNX Runtime's exporter (torch); the framework itself when it is its own "
        "(schema 11; empty before)",
    ),
    Column(
        "family_version",
        "string",
        "That framework's version as the agent runs it (Keras: its backend's); empty where the "
        "agent does not load it",
    ),
    Column("variant", "string", "Build variant (cpu, cu12, mkl, eigen, ...)"),
    Column("plugin_version", "string", "Version of the agent's framework plugin"),
    Column("libraries", "string", "JSON object of library versions (BLAS, oneDNN, CUDA, cuDNN)"),
    Column("environment", "string", "JSON object of environment switches in effect"),
    Column("device", "string", "Device the step ran on, e.g. cpu or cuda:0"),
    Column("device_name", "string", "Device model (CPU model or GPU name)"),
    Column("host", "string", "Hostname of the agent"),
    Column("cpu_model", "string", "CPU model of the agent's host"),
    Column("usable_cores", "Int64", "CPU cores in the agent's affinity mask"),
    Column("in_container", "boolean", "Whether the agent ran inside a container"),
    Column("workload", "string", "Catalogue workload name"),
    Column("kind", "string", "op, model, accuracy, collective or generation"),
    Column("phase", "string", "train (forward, backward, optimizer step) or infer"),
    Column("batch_size", "Int64", "Items per step"),
    Column("dtype", "string", "Data type actually used"),
    Column(
        "mode",
        "string",
        "Execution mode actually used (torch eager/compile, tensorflow function/xla/eager, "
        "jax jit); on rows that did not run, the mode asked for (empty = agent default)",
    ),
    Column("layout", "string", "Data layout (NCHW, NHWC) where it applies"),
    Column("intra_op_threads", "Int64", "Intra-op threads in effect"),
    Column("inter_op_threads", "Int64", "Inter-op threads in effect"),
    Column("threads_requested", "Int64", "Intra-op threads requested, 0 = agent default"),
    Column("params", "string", "JSON object of the workload's shape parameters"),
    Column(
        "settings",
        "string",
        "JSON object of framework facts that decide fairness, as the agent reports them "
        "(oneDNN on/off, TF32, autocast or dtype policy, compiler backend, XLA)",
    ),
    Column(
        "settings_mismatch",
        "string",
        "What the agent ran otherwise than asked, e.g. 'threads: asked 2, ran 4' (threads, "
        "dtype, mode); empty when it ran as asked or on rows that did not run",
    ),
    Column("seed", "Int64", "Seed of synthetic inputs and weights"),
    Column("n", "Int64", "Number of timed samples"),
    Column("median_seconds", "Float64", "Median step time (the 50th percentile)"),
    Column(
        "median_ci_low_seconds",
        "Float64",
        "Lower end of the median's 95% confidence interval (seeded percentile bootstrap, "
        "2000 resamples)",
    ),
    Column("median_ci_high_seconds", "Float64", "Upper end of the median's 95% interval"),
    Column("mean_seconds", "Float64", "Mean step time"),
    Column("stdev_seconds", "Float64", "Sample standard deviation of step time"),
    Column("min_seconds", "Float64", "Fastest step"),
    Column("max_seconds", "Float64", "Slowest step"),
    Column("p5_seconds", "Float64", "5th percentile of step time"),
    Column("p95_seconds", "Float64", "95th percentile of step time"),
    Column("p99_seconds", "Float64", "99th percentile of step time"),
    Column("cv", "Float64", "Coefficient of variation (stdev / mean)"),
    Column(
        "outliers",
        "Int64",
        "Samples outside Tukey's fences (below Q1 - 1.5 IQR or above Q3 + 1.5 IQR); counted, "
        "kept in every statistic",
    ),
    Column(
        "noisy",
        "boolean",
        "Too noisy to trust alone: CV above 10% or fewer than 10 samples (docs/report.md)",
    ),
    Column(
        "items_per_sample",
        "Int64",
        "Items one sample covers: batch_size for a step; a whole epoch for accuracy workloads",
    ),
    *THROUGHPUT_COLUMNS,
    Column("first_iteration_seconds", "Float64", "First step, timed alone (set-up, compile)"),
    Column("build_seconds", "Float64", "Building model, inputs and optimizer (untimed)"),
    Column("warmup_iterations", "Int64", "Discarded iterations after the first"),
    Column("measure_started_at", "datetime64[ns, UTC]", "Wall-clock start of the timed loop"),
    Column("measure_ended_at", "datetime64[ns, UTC]", "Wall-clock end of the timed loop"),
    Column("target_accuracy", "Float64", "Accuracy workloads: target validation accuracy"),
    Column("reached_target", "boolean", "Accuracy workloads: whether the target was reached"),
    Column(
        "time_to_target_seconds",
        "Float64",
        "Accuracy workloads: training time (evaluation excluded, epoch 1 included) to target",
    ),
    Column("epochs_to_target", "Int64", "Accuracy workloads: epoch that reached the target"),
    Column("epochs", "Int64", "Accuracy workloads: epochs run"),
    Column("final_accuracy", "Float64", "Accuracy workloads: validation accuracy at the end"),
    Column(
        "accuracy_history",
        "string",
        "Accuracy workloads: JSON list of {epoch, train_seconds, eval_seconds, "
        "validation_accuracy}",
    ),
    *GENERATION_COLUMNS,
    *MODEL_COLUMNS,
    *PROFILE_COLUMNS,
    Column(
        "cpu_user_percent",
        "Float64",
        "Telemetry: agent process CPU time in user mode over the timed phase, percent of one "
        "core (200 = two cores busy)",
    ),
    Column(
        "cpu_system_percent",
        "Float64",
        "Telemetry: agent process CPU time in kernel mode over the timed phase, percent of one "
        "core",
    ),
    Column(
        "host_cpu_busy_percent",
        "Float64",
        "Telemetry: host CPU time not idle nor iowait over the timed phase, percent of all "
        "host CPUs (the agent and anything else running)",
    ),
    Column(
        "host_iowait_percent",
        "Float64",
        "Telemetry: host CPU time waiting for I/O over the timed phase, percent of all host CPUs",
    ),
    *INTERFERENCE_COLUMNS,
    Column(
        "rss_mean_bytes",
        "Float64",
        "Telemetry: mean resident memory of the agent process over the scrapes of the timed phase",
    ),
    Column(
        "rss_peak_bytes",
        "Float64",
        "Telemetry: peak resident memory of the agent process during the cell (kernel "
        "high-water mark reset at the cell's start, so build and warm-up count)",
    ),
    Column(
        "gpu_utilization_mean_percent",
        "Float64",
        "Telemetry: mean NVML utilisation of the cell's GPU over the timed phase",
    ),
    Column(
        "gpu_utilization_peak_percent",
        "Float64",
        "Telemetry: highest NVML utilisation of the cell's GPU over the timed phase",
    ),
    Column(
        "gpu_memory_peak_bytes",
        "Float64",
        "Telemetry: highest GPU memory in use (all processes, NVML) over the timed phase",
    ),
    Column(
        "gpu_power_mean_watts",
        "Float64",
        "Telemetry: mean GPU board power over the timed phase",
    ),
    Column(
        "gpu_energy_joules",
        "Float64",
        "Telemetry: GPU energy over the timed phase, from NVML's energy counter (or mean "
        "power x duration where the device has no counter)",
    ),
    Column(
        "telemetry_scrapes",
        "Int64",
        "Telemetry: /metrics scrapes that fell inside the timed phase (0 = edges interpolated)",
    ),
    Column("telemetry_error", "string", "Telemetry: why figures are missing, when they are"),
    *WORLD_COLUMNS,
    Column("status", "string", "ok, failed, unsupported or cancelled"),
    Column("error_code", "string", "gRPC status code name when not ok"),
    Column("error", "string", "One-line reason when not ok"),
)
