"""Process-wide TensorFlow set-up, done once at plugin construction before any op runs:
thread pools, visible devices, and the check that oneDNN really is on or off as requested.

TensorFlow sizes its thread pools and fixes its visible devices when its context initialises
(at the first op), and reads TF_ENABLE_ONEDNN_OPTS once, at import. None of this can change
in a running process, so the agent's start-up settings (the runtime's PluginContext, and
TensorFlow's own variables) decide it."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import tensorflow as tf
from tensorflow.python.eager import context
from tensorflow.python.util import _pywrap_util_port

# Variables that change what TensorFlow does; reported in describe() when set.
TF_VARIABLES = (
    "TF_ENABLE_ONEDNN_OPTS",
    "TF_NUM_INTRAOP_THREADS",
    "TF_NUM_INTEROP_THREADS",
    "TF_XLA_FLAGS",
    "XLA_FLAGS",
    "TF_CPP_MIN_LOG_LEVEL",
    "TF_GPU_ALLOCATOR",
    "TF_FORCE_GPU_ALLOW_GROWTH",
    "TF_ENABLE_AUTO_MIXED_PRECISION",
    "ONEDNN_VERBOSE",
    "ONEDNN_MAX_CPU_ISA",
    "KERAS_BACKEND",
)


def _env_int(name: str) -> int:
    """One of TensorFlow's own thread variables (TF_NUM_*), as TensorFlow would read it."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return 0
    try:
        value = int(raw)
    except ValueError:
        raise RuntimeError(f"{name}={raw!r}: expected a non-negative integer") from None
    if value < 0:
        raise RuntimeError(f"{name}={raw!r}: expected a non-negative integer")
    return value


@dataclass(frozen=True)
class Threads:
    intra_op: int
    inter_op: int


def configure_threads(intra: int, inter: int) -> Threads:
    """Sizes the intra-op and inter-op pools; 0 keeps TensorFlow's default. Returns the
    effective sizes."""
    threading = tf.config.threading
    # Setting an unchanged value is skipped so that a second plugin in the same process (tests)
    # does not trip TensorFlow's "cannot be modified after initialization".
    if intra and threading.get_intra_op_parallelism_threads() != intra:
        threading.set_intra_op_parallelism_threads(intra)
    if inter and threading.get_inter_op_parallelism_threads() != inter:
        threading.set_inter_op_parallelism_threads(inter)
    return Threads(effective_intra_op_threads(), effective_inter_op_threads())


def _usable_cores() -> int:
    return len(os.sched_getaffinity(0))


def effective_intra_op_threads() -> int:
    """tf.config reports 0 for "default"; TensorFlow then uses TF_NUM_INTRAOP_THREADS or the
    CPUs this process may run on (port::MaxParallelism, which honours the affinity mask)."""
    configured = tf.config.threading.get_intra_op_parallelism_threads()
    return configured or _env_int("TF_NUM_INTRAOP_THREADS") or _usable_cores()


def effective_inter_op_threads() -> int:
    """As above, with TF_NUM_INTEROP_THREADS (the official CPU wheels are not built with
    OpenMP, so oneDNN does not shrink the inter-op default)."""
    configured = tf.config.threading.get_inter_op_parallelism_threads()
    return configured or _env_int("TF_NUM_INTEROP_THREADS") or _usable_cores()


def select_device(requested: str) -> str:
    """PluginContext.device: "cpu" (GPUs hidden), "cuda" (a GPU is required) or "auto" (the
    first GPU when there is one). A CUDA agent on a host without a GPU must fail loudly, not
    measure the CPU under a CUDA label. Returns a TensorFlow device string."""
    gpus = tf.config.list_physical_devices("GPU")
    if requested == "cpu":
        if gpus:
            tf.config.set_visible_devices([], "GPU")
        return "/CPU:0"
    if requested == "cuda" and not gpus:
        raise RuntimeError("FWBENCH_DEVICE=cuda but TensorFlow sees no GPU")
    return "/GPU:0" if gpus else "/CPU:0"


def _parse_bool(name: str, raw: str) -> bool:
    # TensorFlow's ReadBoolFromEnvVar accepts exactly these (case-insensitive).
    lowered = raw.strip().lower()
    if lowered in ("1", "true"):
        return True
    if lowered in ("0", "false"):
        return False
    raise RuntimeError(f"{name}={raw!r}: TensorFlow only understands 0/1/true/false")


def onednn_flag() -> bool:
    """What TensorFlow decided from TF_ENABLE_ONEDNN_OPTS (and its platform default)."""
    return bool(_pywrap_util_port.IsMklEnabled())


def _probe_graph(x: tf.Tensor, w: tf.Tensor) -> tf.Tensor:
    y = tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME"))
    return tf.matmul(tf.reshape(y, (8, 32)), tf.ones((32, 8)))


def onednn_ops_in_graph() -> bool:
    """Independent evidence: runs a small conv + matmul tf.function on the CPU and looks for
    oneDNN kernels (_MklNativeConv2D, _MklMatMul, ...) in the graph TensorFlow actually executed,
    after its oneDNN layout pass. With oneDNN off the same graph keeps Conv2D and MatMul."""

    probe = tf.function(_probe_graph, autograph=False)
    context.enable_graph_collection()
    try:
        with tf.device("/CPU:0"):
            probe(tf.ones((1, 8, 8, 4)), tf.ones((3, 3, 4, 4)))
        metadata = context.export_run_metadata()
    finally:
        context.disable_graph_collection()
    op_types = {
        node.op
        for function_graph in metadata.function_graphs
        for graph in function_graph.partition_graphs
        for node in graph.node
    }
    if not op_types:
        raise RuntimeError("the oneDNN probe collected no executed graph")
    return any(op.startswith("_Mkl") for op in op_types)


def verify_onednn() -> bool:
    """The oneDNN state, checked two ways; raises RuntimeError when TensorFlow's flag and the
    executed kernels disagree, or when TF_ENABLE_ONEDNN_OPTS asked for the other state."""
    flag, observed = onednn_flag(), onednn_ops_in_graph()
    if flag != observed:
        raise RuntimeError(
            f"oneDNN flag says {'on' if flag else 'off'} but the executed graph "
            f"{'has' if observed else 'lacks'} oneDNN kernels"
        )
    raw = os.environ.get("TF_ENABLE_ONEDNN_OPTS")
    if raw is not None and _parse_bool("TF_ENABLE_ONEDNN_OPTS", raw) != observed:
        raise RuntimeError(
            f"TF_ENABLE_ONEDNN_OPTS={raw} but oneDNN is {'on' if observed else 'off'}"
            " (was TensorFlow imported before the variable was set?)"
        )
    return observed


class _RetracingNoticeFilter(logging.Filter):
    """Drops TensorFlow's "N out of the last M calls to <fn> triggered tf.function retracing".

    TensorFlow counts traces per Python code object, so building the same step function for
    workload after workload (one trace each, by design) trips it although nothing retraces."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "triggered tf.function retracing" not in record.getMessage()


def quiet_retracing_notice() -> None:
    logger = tf.get_logger()
    if not any(isinstance(f, _RetracingNoticeFilter) for f in logger.filters):
        logger.addFilter(_RetracingNoticeFilter())


def reported_environment() -> dict[str, str]:
    return {name: os.environ[name] for name in TF_VARIABLES if name in os.environ}
