"""LlamaCppPlugin: the catalogue's GPT-2 in llama.cpp (llama-cpp-python's build of it, on the
CPU): the gpt workload's inference (every position's logits) and the generate workload, from a
GGUF file of llama.cpp's "gpt2" architecture that each cell writes (gguf_model.py).

What llama.cpp cannot run is refused with its reason: the attention workload (llama.cpp has
no standalone attention op, only its models' graphs), bert (its BERT architecture is an
embedding model, no masked-LM head) and training (llama.cpp has no backward pass for models).

Variants (the agent's FWBENCH_LLAMACPP_WEIGHTS, from its manifest): unset, the GGUF's 2-D
weights are in the cell's dtype (F32 or F16); "q8_0" (agent llamacpp-q8), they are quantized
to Q8_0 and the cell computes in float32 otherwise. Its rows say so (settings.weights) and its
outputs are another computation: the equivalence tests only report how far they are.

Threads: llama.cpp's own per-context n_threads (a one-token decode) and n_threads_batch (a
prompt) are both the cell's threads (default: the agent's FWBENCH_THREADS, else every usable
core); they are the row's intra-op threads and settings. Modes: "flash_attn"
(ggml_flash_attn_ext; llama.cpp's own default, flash_attn_type auto, turns it on for the CPU)
and "plain" (flash attention disabled: K^T Q mul_mat, masked soft_max, V mul_mat: the
equivalence tests' path, nearer PyTorch's float32 logits)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from importlib.metadata import version

import llama_cpp as llama
import numpy as np
import psutil

from fwbench.llamacpp_plugin import generation, reference
from fwbench.llamacpp_plugin.gguf_model import fresh_weights
from fwbench.llamacpp_plugin.session import ContextOptions, Session
from fwbench.runtime.architectures import transformer_config
from fwbench.runtime.hostinfo import cpu_model
from fwbench.runtime.plugin import (
    EQUIVALENCE,
    BuiltStep,
    Capability,
    DeviceInfo,
    InvalidContext,
    PluginContext,
    PluginDescription,
    Settings,
    UnsupportedWorkload,
    WorkloadSpec,
)
from fwbench.runtime.reference import EquivalenceCase, EquivalenceResult

PLUGIN_VERSION = "0.1.0"
WEIGHTS_VARIABLE = "FWBENCH_LLAMACPP_WEIGHTS"
MODES = ("flash_attn", "plain")
WORKLOADS = ("gpt", "generate")
MAX_SEQUENCES = 256  # LLAMA_MAX_SEQ (llama-cparams.h): a context's sequences at most
_WEIGHT_TYPES = {"float32": "F32", "float16": "F16"}
_KERNELS = {
    "plain": "ggml mul_mat (K^T Q), soft_max_ext (causal mask, scale), mul_mat (V)",
    "flash_attn": "ggml_flash_attn_ext (the CPU backend's)",
}
# ggml-cpu's vec.h defines GGML_GELU_FP16 unconditionally (no build option): GELU of a float32
# tensor rounds its input to float16 and reads a float16 table (tests/llamacpp_plugin).
GELU = "ggml_gelu: input rounded to float16, a float16 table (GGML_GELU_FP16, compiled in)"
UNSUPPORTED_REASONS: Mapping[str, str] = {
    "*/train": "llama.cpp runs models for inference only: it has no training step",
    "attention": "llama.cpp has no standalone attention op: attention exists only inside its "
    "models' graphs",
    "bert": "llama.cpp's BERT architecture is an embedding model: it has no masked-LM head, "
    "so the catalogue's BertForMaskedLM cannot be written for it",
}


def _usable_cores() -> int:
    return len(os.sched_getaffinity(0))


def _weights_variant(environ: Mapping[str, str]) -> str:
    raw = environ.get(WEIGHTS_VARIABLE, "").strip().lower()
    if raw not in ("", "q8_0"):
        raise InvalidContext(f"{WEIGHTS_VARIABLE}={raw!r}: expected q8_0 or unset")
    return "Q8_0" if raw else ""


class LlamaCppPlugin:
    optional_capabilities = frozenset({EQUIVALENCE})
    equivalence_models = frozenset({"gpt"})
    equivalence_trains = False

    def __init__(self, context: PluginContext) -> None:
        if context.world is not None:
            raise InvalidContext("the llamacpp plugin runs alone: it has no distributed mode")
        if context.device == "cuda":
            raise InvalidContext("FWBENCH_DEVICE=cuda: this llama.cpp build runs on the CPU")
        self.quantized = _weights_variant(os.environ)
        self.dtypes = ("float32",) if self.quantized else ("float32", "float16")
        self.threads = context.threads or _usable_cores()

    # ----------------------------------------------------------------------- FrameworkPlugin

    def describe(self) -> PluginDescription:
        capability = Capability(phases=("infer",), dtypes=self.dtypes, modes=MODES)
        return PluginDescription(
            framework="llama.cpp",
            framework_version=llama.__version__,
            plugin_version=PLUGIN_VERSION,
            libraries={
                "llama_cpp_python": llama.__version__,
                "gguf": version("gguf"),
                "numpy": np.__version__,
                "system_info": llama.llama_print_system_info().decode().strip(),
                "weights": self.quantized or "the cell's dtype",
            },
            environment={k: os.environ[k] for k in (WEIGHTS_VARIABLE,) if k in os.environ},
            devices=(DeviceInfo("cpu", 0, cpu_model(), psutil.virtual_memory().total),),
            intra_op_threads=self.threads,
            inter_op_threads=1,  # one graph at a time: no inter-op pool
            capabilities=dict.fromkeys(WORKLOADS, capability),
            unsupported_reasons=UNSUPPORTED_REASONS,
        )

    def _check(self, spec: WorkloadSpec) -> None:
        name = spec.workload.name
        if spec.model is not None or name not in WORKLOADS:
            reason = UNSUPPORTED_REASONS.get(name, "not offered: the plugin runs GPT-2 only")
            raise UnsupportedWorkload(f"{name}: {reason}")
        if spec.phase != "infer":
            raise UnsupportedWorkload(f"phase {spec.phase}: {UNSUPPORTED_REASONS['*/train']}")
        if spec.dtype not in self.dtypes:
            offered = ", ".join(self.dtypes)
            raise UnsupportedWorkload(f"llamacpp plugin: no {spec.dtype}; offered: {offered}")
        if spec.mode not in MODES:
            raise UnsupportedWorkload(f"mode {spec.mode!r}; valid: {', '.join(MODES)}")
        if spec.mode == "plain" and spec.params["hidden"] == spec.params["heads"]:
            raise UnsupportedWorkload(
                "mode plain with head_dim 1: llama.cpp's non-flash attention takes a V cache "
                "of one value a head for a transposed one (build_attn_mha's v_trans, from its "
                "strides) and aborts (ggml_can_mul_mat); mode flash_attn runs it"
            )
        if spec.batch_size > MAX_SEQUENCES:
            raise UnsupportedWorkload(
                f"batch {spec.batch_size}: a llama.cpp context holds at most {MAX_SEQUENCES} "
                "sequences (LLAMA_MAX_SEQ)"
            )

    def build(self, spec: WorkloadSpec) -> BuiltStep:
        self._check(spec)
        name, params, batch = spec.workload.name, spec.params, spec.batch_size
        config = transformer_config("gpt", params)
        rng = np.random.default_rng(spec.seed)
        threads = spec.threads or self.threads
        weights = fresh_weights(config, spec.seed)
        if name == "gpt":
            length, tokens_at_once = params["seq_len"], batch * params["seq_len"]
        else:
            length = params["prompt_len"] + params["new_tokens"]
            tokens_at_once = batch * params["prompt_len"]
        options = ContextOptions(
            batch, length, tokens_at_once, threads, spec.dtype, spec.mode == "flash_attn"
        )
        weight_type = self.quantized or _WEIGHT_TYPES[spec.dtype]
        session = Session(config, weights, weight_type, options)
        if name == "gpt":
            tokens = rng.integers(0, config.vocab, (batch, params["seq_len"]))
            run = generation.FullSequences(session, tokens)
            return BuiltStep(run.step, self._settings(spec, session))
        prompts = rng.integers(0, config.vocab, (batch, params["prompt_len"]))
        generator = generation.Generator(session, prompts, params["new_tokens"])
        settings = self._settings(spec, session, _kv_cache_settings(session))
        return BuiltStep.for_generation(generation.generation_steps(generator, params), settings)

    def _settings(
        self, spec: WorkloadSpec, session: Session, more: Mapping[str, str] | None = None
    ) -> Settings:
        o, file = session.options, session.file
        extra = {
            "weights": file.weight_type,
            "gguf": f"llama.cpp architecture gpt2, {file.nbytes} bytes of tensors, 1-D tensors F32",
            # what a weight takes here, which the collector's decode model counts (plugins.md)
            "weight_bytes_per_parameter": f"{file.nbytes / file.parameters:.6g}",
            "kv_cache_dtype": "F32" if o.kv_dtype == "float32" else "F16",
            "flash_attention": "on" if o.flash_attention else "off",
            "attention_kernel": _KERNELS[spec.mode],
            "n_threads": str(o.threads),
            "n_threads_batch": str(o.threads),
            "n_ubatch": str(o.batch_tokens),
            "gelu": GELU,
            "dtype_policy": _dtype_policy(file.weight_type),
            **(more or {}),
        }
        if file.kept_float32:
            extra["weights_kept_f32"] = ",".join(file.kept_float32)
        return Settings(
            dtype=spec.dtype,
            intra_op_threads=o.threads,
            inter_op_threads=1,
            mode=spec.mode,
            layout="",
            device="cpu",
            extra=extra,
        )

    def synchronize(self, output: object) -> None:
        """llama_decode returns with the CPU backend's graph computed; llama_synchronize also
        waits for anything scheduled."""
        if isinstance(output, Session):
            output.synchronize()

    # ----------------------------------------------------------------- EquivalencePlugin

    def canonical_weights(
        self, model: str, seed: int, params: Mapping[str, int] | None = None
    ) -> dict[str, np.ndarray]:
        return reference.canonical_weights(model, seed, params)

    def equivalence(self, case: EquivalenceCase) -> EquivalenceResult:
        """Float32 activations and KV cache, flash attention off; weights F32, or Q8_0 in the
        q8_0 variant (whose results are reported, never held equal)."""
        return reference.equivalence(case, self.quantized or "F32", self.threads)


def _dtype_policy(weight_type: str) -> str:
    if weight_type == "F32":
        return "float32 (GELU through a float16 table: settings.gelu)"
    matmul = "float16" if weight_type == "F16" else "Q8_0 (ggml quantizes the activations)"
    return (
        f"2-D weights {weight_type}, 1-D (LayerNorm, biases) F32; activations float32 between "
        f"ops, each matmul's activations converted to {matmul}"
    )


def _kv_cache_settings(session: Session) -> dict[str, str]:
    o = session.options
    return {
        "kv_cache": f"llama.cpp's KV cache: one stream per sequence ({o.sequences}), each of "
        f"{session.kv_cells() // o.sequences} cells ({o.positions} asked, padded to 256), "
        "emptied at each prefill; a step attends over the cells used so far, padded to a "
        "multiple of 256, the rest masked",
        "kv_cache_allocated_bytes": str(session.kv_bytes()),
    }
