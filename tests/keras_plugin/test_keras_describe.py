"""describe(): Keras' identity, the backend as its family, the environment, thread pools as
the backend sizes them, what is offered and, for the rest, why not; modes per backend and the
settings that record them."""

from __future__ import annotations

import dataclasses
import importlib

import keras
import pytest

from fwbench.runtime.plugin import UnsupportedWorkload, WorkloadSpec

# modes[0] is what Keras resolves by default (jit_compile="auto") on a CPU-only host.
MODES = {
    "torch": ("eager", "compile"),
    "jax": ("jit", "eager"),
    "tensorflow": ("function", "xla", "eager"),
}
# (jit_compile, run_eagerly) Keras compiled each backend's mode into.
COMPILED = {
    ("torch", "eager"): ("false", "false"),
    ("torch", "compile"): ("true", "false"),
    ("jax", "jit"): ("true", "false"),
    ("jax", "eager"): ("false", "true"),
    ("tensorflow", "function"): ("false", "false"),
    ("tensorflow", "xla"): ("true", "false"),
    ("tensorflow", "eager"): ("false", "true"),
}


def test_describe_names_keras_and_its_backend_as_family(plugin, backend):
    description = plugin.describe()
    assert (description.framework, description.framework_version) == ("keras", keras.__version__)
    assert description.family == backend
    assert description.family_version == importlib.import_module(backend).__version__
    assert description.libraries["keras"] == keras.__version__
    assert description.environment["KERAS_BACKEND"] == backend


def test_threads_are_fixed_at_startup_where_the_backend_fixes_them(plugin, backend):
    description = plugin.describe()
    assert description.threads_fixed_at_startup == (backend != "torch")
    assert description.intra_op_threads >= 1 and description.inter_op_threads >= 1


def test_every_catalogue_workload_is_offered_in_the_backends_modes(plugin, backend):
    from fwbench.runtime.architectures import MODEL_NAMES

    description = plugin.describe()
    capabilities = description.capabilities
    transformers = ("attention", "bert", "gpt", "generate")
    assert set(capabilities) == {"gemm", "conv2d", *MODEL_NAMES, *transformers}
    assert not description.unsupported_reasons
    for name, capability in capabilities.items():
        if name == "generate":  # inference only
            assert (capability.phases, capability.modes) == (("infer",), MODES[backend])
            continue
        plain = ("plain",) if name == "attention" else ()  # the attention op's own kernel
        assert capability.modes == (*MODES[backend], *plain)
        assert capability.phases == ("train", "infer")
        assert "float32" in capability.dtypes


def _lenet(catalogue, backend: str, **changes: object) -> WorkloadSpec:
    workload = catalogue.get("lenet")
    spec = WorkloadSpec(workload, "infer", 1, "float32", {}, 0, 0, MODES[backend][0])
    return dataclasses.replace(spec, **changes)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("change", "match"),
    [({"dtype": "float64"}, "no dtype 'float64'"), ({"mode": "turbo"}, "no mode 'turbo'")],
)
def test_an_unoffered_dtype_or_mode_is_refused_with_the_choices(
    plugin, catalogue, backend, change, match
):
    with pytest.raises(UnsupportedWorkload, match=match):
        plugin.build(_lenet(catalogue, backend, **change))


def test_each_mode_is_recorded_as_keras_compiled_it(plugin, catalogue, backend):
    for index, mode in enumerate(MODES[backend]):
        for phase in ("infer", "train"):
            spec = _lenet(catalogue, backend, mode=mode, phase=phase, batch_size=2)
            settings = plugin.build(spec).settings  # built, not stepped: compiling is lazy
            extra = settings.extra
            assert (settings.mode, settings.dtype, settings.layout) == (mode, "float32", "NHWC")
            compiled = (extra["jit_compile"], extra["run_eagerly"])
            assert compiled == COMPILED[backend, mode]
            default = extra["jit_compile_requested"] == "auto"  # Keras resolved "auto"
            assert default == (index == 0)
            assert extra["keras_backend"] == backend and extra["dtype_policy"] == "float32"
            api = "train_on_batch" if phase == "train" else "predict_on_batch"
            assert extra[f"{phase}_api"] == api


def test_a_thread_count_is_honoured_or_refused(plugin, catalogue, backend):
    description = plugin.describe()
    if backend == "torch":
        assert plugin.build(_lenet(catalogue, backend, threads=1)).settings.intra_op_threads == 1
        default = plugin.build(_lenet(catalogue, backend)).settings.intra_op_threads
        assert default == description.intra_op_threads
    else:
        with pytest.raises(UnsupportedWorkload, match="thread pool at start-up"):
            plugin.build(_lenet(catalogue, backend, threads=description.intra_op_threads + 1))
