"""Start-up of a Keras agent, before Keras or its backend runs anything: which backend the
agent asked for, sizing the backend's thread pools, and the check that Keras really runs on
that backend.

Keras reads KERAS_BACKEND once, when it is first imported (default: tensorflow), so the switch
belongs to the agent's environment (its manifest's [env]), and an agent whose variable is
missing, names another backend, or whose Keras was imported before it was set would measure
the wrong framework under its name: it refuses to start with one line instead. XLA (jax) and
TensorFlow size their thread pools once, when their runtime starts, so the pools are sized
here, before Keras is imported; torch's pool can be resized at any time.

This module imports neither Keras nor a backend at module level: the plugin module that loads
it must not decide Keras' backend by importing it."""

from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import ModuleType

from fwbench.runtime.plugin import THREADS_VARIABLE, InvalidContext, PluginContext

BACKEND_VARIABLE = "KERAS_BACKEND"
# Keras' backend name -> the framework module it runs on (the native plugins' framework names).
BACKENDS: Mapping[str, str] = {"torch": "torch", "jax": "jax", "tensorflow": "tensorflow"}
# Variables that change what Keras or its backend does; reported in describe() when set.
_COMMON = ("KERAS_BACKEND", "KERAS_HOME")
REPORTED_VARIABLES: Mapping[str, tuple[str, ...]] = {
    "torch": (*_COMMON, "KERAS_TORCH_DEVICE", "OMP_NUM_THREADS", "ATEN_CPU_CAPABILITY"),
    "jax": (
        *_COMMON,
        "XLA_FLAGS",
        "JAX_PLATFORMS",
        "JAX_DEFAULT_MATMUL_PRECISION",
        "JAX_ENABLE_X64",
        "XLA_PYTHON_CLIENT_PREALLOCATE",
        "XLA_PYTHON_CLIENT_MEM_FRACTION",
        "TF_CPP_MIN_LOG_LEVEL",
    ),
    "tensorflow": (
        *_COMMON,
        "TF_ENABLE_ONEDNN_OPTS",
        "TF_NUM_INTRAOP_THREADS",
        "TF_NUM_INTEROP_THREADS",
        "TF_XLA_FLAGS",
        "XLA_FLAGS",
        "TF_CPP_MIN_LOG_LEVEL",
        "TF_GPU_ALLOCATOR",
        "TF_FORCE_GPU_ALLOW_GROWTH",
    ),
}


@dataclass(frozen=True)
class Threads:
    intra_op: int
    inter_op: int
    fixed_at_startup: bool


def requested_backend(environ: Mapping[str, str] = os.environ) -> str:
    """The backend KERAS_BACKEND names; InvalidContext (one line) when unset or unknown."""
    raw = environ.get(BACKEND_VARIABLE, "").strip()
    choices = ", ".join(BACKENDS)
    if not raw:
        raise InvalidContext(
            f"{BACKEND_VARIABLE} is unset: a Keras agent names its backend ({choices}) in its "
            "manifest's [env]"
        )
    if raw not in BACKENDS:
        raise InvalidContext(f"{BACKEND_VARIABLE}={raw!r}: expected one of {choices}")
    return raw


def import_framework(backend: str) -> ModuleType:
    """The backend's framework module; InvalidContext when this environment lacks it."""
    try:
        return importlib.import_module(BACKENDS[backend])
    except ImportError as error:
        raise InvalidContext(
            f"{BACKEND_VARIABLE}={backend} but {BACKENDS[backend]} cannot be imported here "
            f"({type(error).__name__}: {error})"
        ) from None


def check_keras_backend(requested: str, running: str) -> None:
    """InvalidContext when Keras runs another backend than the one asked for."""
    if running != requested:
        raise InvalidContext(
            f"{BACKEND_VARIABLE}={requested} but Keras runs on {running} (was keras imported "
            f"before {BACKEND_VARIABLE} was set, or does ~/.keras/keras.json override it?)"
        )


def start(context: PluginContext, environ: Mapping[str, str] = os.environ) -> tuple[str, Threads]:
    """Checks the backend, sizes its thread pools, imports Keras and checks that it runs on
    that backend; returns the backend's name and the effective pool sizes."""
    backend = requested_backend(environ)
    if backend == "jax":
        threads = _jax_threads(context)  # before jax exists: XLA sizes its pool once
        import_framework(backend)
    else:
        import_framework(backend)
        threads = _torch_threads(context) if backend == "torch" else _tf_threads(context)
    import keras

    check_keras_backend(backend, keras.backend.backend())
    return backend, threads


# ------------------------------------------------------------------------------- threads


def _torch_threads(context: PluginContext) -> Threads:
    import torch

    if context.threads:
        torch.set_num_threads(context.threads)
    if context.interop_threads and torch.get_num_interop_threads() != context.interop_threads:
        torch.set_num_interop_threads(context.interop_threads)  # once, before parallel work
    return Threads(torch.get_num_threads(), torch.get_num_interop_threads(), False)


def _set_process_affinity(cpus: set[int]) -> None:
    # sched_setaffinity(0, ...) changes only the calling thread: every thread of the process
    # gets the new mask, so none that already exists can later create XLA's pool on all CPUs.
    for task in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(task), cpus)
        except ProcessLookupError:  # the thread ended meanwhile
            continue


def _jax_threads(context: PluginContext) -> Threads:
    """XLA's CPU client sizes its pool from the CPUs the process may run on when the backend
    is created, with no switch for a count: the affinity mask is restricted to N CPUs first
    (as the jax plugin does, agents/jax/fwbench/jax_plugin/threads.py)."""
    import sys

    if context.threads and "jax" in sys.modules:
        from jax._src import xla_bridge

        if xla_bridge.backends_are_initialized():
            raise RuntimeError(
                f"{THREADS_VARIABLE}={context.threads} cannot apply: jax already created "
                "its backend"
            )
    available = sorted(os.sched_getaffinity(0))
    if context.threads > len(available):
        raise RuntimeError(
            f"{THREADS_VARIABLE}={context.threads} but this process may run on "
            f"{len(available)} CPUs only"
        )
    if context.threads:
        _set_process_affinity(set(available[: context.threads]))
    count = context.threads or len(available)
    # XLA runs independent operations of a program on the same pool: no inter-op pool.
    return Threads(count, 1, True)


def _tf_threads(context: PluginContext) -> Threads:
    import tensorflow as tf

    threading = tf.config.threading
    # Unchanged values are not set again: a second plugin in one process (tests) would trip
    # TensorFlow's "cannot be modified after initialization".
    if context.threads and threading.get_intra_op_parallelism_threads() != context.threads:
        threading.set_intra_op_parallelism_threads(context.threads)
    inter = context.interop_threads
    if inter and threading.get_inter_op_parallelism_threads() != inter:
        threading.set_inter_op_parallelism_threads(inter)
    cores = len(os.sched_getaffinity(0))
    intra = threading.get_intra_op_parallelism_threads() or _env_count("TF_NUM_INTRAOP_THREADS")
    inter = threading.get_inter_op_parallelism_threads() or _env_count("TF_NUM_INTEROP_THREADS")
    return Threads(intra or cores, inter or cores, True)


def _env_count(name: str) -> int:
    raw = os.environ.get(name, "").strip()
    return int(raw) if raw.isdigit() else 0
