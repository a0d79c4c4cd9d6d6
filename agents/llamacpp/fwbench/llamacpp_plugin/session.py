"""llama.cpp through llama-cpp-python's low-level bindings (the ctypes mirror of llama.h): a
model loaded from a GGUF file, a context sized for the cell, and llama_batch buffers filled
once and reused.

The high-level `llama_cpp.Llama` runs one sequence and samples text; a cell needs several
sequences in one llama_batch (the batch of the cell), every position's logits, and control of
the KV cache (emptied at each prefill), so the plugin speaks llama.h's API: llama_decode on a
llama_batch, llama_get_logits, llama_memory_clear.

The model is read into memory (no mmap) and its file deleted at once: the weights then live
where every other framework's do, in anonymous memory, not in the page cache."""

from __future__ import annotations

import ctypes
import sys
import tempfile
import threading
import weakref
from dataclasses import dataclass
from pathlib import Path

import llama_cpp as llama
import numpy as np

from fwbench.llamacpp_plugin.gguf_model import GgufFile, write_gguf
from fwbench.runtime.architectures import TransformerConfig

# llama_decode's return codes (llama.h) that are not errors of the request itself.
_DECODE_ERRORS = {
    1: "no KV cache slot for the batch",
    2: "aborted",
    -1: "invalid batch",
}
_ERROR_LEVEL = 4  # GGML_LOG_LEVEL_ERROR (ggml.h: NONE 0, DEBUG 1, INFO 2, WARN 3, ERROR 4)
_KV_TYPES = {"float32": llama.GGML_TYPE_F32, "float16": llama.GGML_TYPE_F16}
_KV_BYTES = {"float32": 4, "float16": 2}
_started = threading.Lock()
_backend_ready = False


def _errors_only(level: int, text: bytes, user_data: ctypes.c_void_p) -> None:
    """llama.cpp logs every load and context at INFO on stderr; an agent keeps its errors."""
    if level == _ERROR_LEVEL:
        print(text.decode("utf-8", "replace"), end="", file=sys.stderr, flush=True)


# The C callback object lives as long as the module: llama.cpp keeps only its pointer.
_LOG_CALLBACK = llama.llama_log_callback(_errors_only)


def start_backend() -> None:
    """llama_backend_init once per process, with llama.cpp's log cut to its errors."""
    global _backend_ready
    with _started:
        if not _backend_ready:
            llama.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))
            llama.llama_backend_init()
            _backend_ready = True


@dataclass(frozen=True)
class ContextOptions:
    """What a llama_context is made with (the cell's settings say each)."""

    sequences: int  # n_seq_max: the cell's batch, one KV stream each (kv_unified off)
    positions: int  # per sequence: the cache's cells each stream needs
    batch_tokens: int  # n_batch = n_ubatch: the largest llama_batch, decoded in one graph
    threads: int  # n_threads (one-token decode) and n_threads_batch (prompt), both
    kv_dtype: str  # "float32" or "float16": type_k and type_v
    flash_attention: bool  # flash_attn_type enabled, else disabled (never "auto")


class Session:
    """A model and a context over it; freed with the object (weakref.finalize), so a cell's
    llama.cpp memory goes when the runtime drops the cell."""

    def __init__(
        self,
        config: TransformerConfig,
        weights: dict[str, np.ndarray],
        weight_type: str,
        options: ContextOptions,
    ) -> None:
        start_backend()
        self.config, self.options = config, options
        with tempfile.TemporaryDirectory(prefix="fwbench-gguf-") as folder:
            self.file: GgufFile = write_gguf(
                Path(folder) / "gpt.gguf", config, weights, weight_type
            )
            model_params = llama.llama_model_default_params()
            model_params.load_mode = 0  # LLAMA_LOAD_MODE_NONE: read into memory, no mmap
            model_params.n_gpu_layers = 0
            self.model = llama.llama_model_load_from_file(
                str(self.file.path).encode(), model_params
            )
        if not self.model:
            raise RuntimeError(f"llama.cpp could not load the GGUF file of {config}")
        self.context = llama.llama_init_from_model(self.model, self._context_params())
        if not self.context:
            llama.llama_model_free(self.model)
            raise RuntimeError(f"llama.cpp could not make a context for {options}")
        weakref.finalize(self, _free, self.model, self.context)
        self.memory = llama.llama_get_memory(self.context)
        self.vocab = llama.llama_vocab_n_tokens(llama.llama_model_get_vocab(self.model))
        if self.vocab != config.vocab:
            raise RuntimeError(f"llama.cpp made {self.vocab} tokens, not {config.vocab}")

    def _context_params(self) -> llama.llama_context_params:
        o = self.options
        params = llama.llama_context_default_params()
        params.n_seq_max = o.sequences
        params.n_ctx = o.sequences * o.positions  # llama.cpp pads each stream to 256 cells
        params.n_batch = params.n_ubatch = o.batch_tokens
        params.n_threads = params.n_threads_batch = o.threads
        params.type_k = params.type_v = _KV_TYPES[o.kv_dtype]
        params.flash_attn_type = (
            llama.LLAMA_FLASH_ATTN_TYPE_ENABLED
            if o.flash_attention
            else llama.LLAMA_FLASH_ATTN_TYPE_DISABLED
        )
        params.kv_unified = False
        params.embeddings = False
        params.no_perf = False  # llama_perf_context: the anchor benchmark reads it
        return params

    def kv_cells(self) -> int:
        """Cells of the whole KV cache (every stream, after llama.cpp's padding)."""
        return int(llama.llama_n_ctx(self.context))

    def kv_bytes(self) -> int:
        """Bytes of the keys and values llama.cpp allocated, every layer and stream."""
        c = self.config
        return self.kv_cells() * c.layers * 2 * c.hidden * _KV_BYTES[self.options.kv_dtype]

    def clear(self) -> None:
        """Empties the KV cache of every sequence (a new prompt starts from position 0)."""
        llama.llama_memory_clear(self.memory, True)

    def decode(self, batch: Batch) -> None:
        code = llama.llama_decode(self.context, batch.batch)
        if code:
            reason = _DECODE_ERRORS.get(code, "allocation or compute failure")
            raise RuntimeError(f"llama_decode returned {code}: {reason}")

    def logits(self, rows: int) -> np.ndarray:
        """The last decode's logits, one row per output of its batch, in batch order: a view
        of llama.cpp's buffer (overwritten by the next decode)."""
        pointer = llama.llama_get_logits(self.context)
        return np.ctypeslib.as_array(pointer, shape=(rows, self.vocab))

    def synchronize(self) -> None:
        llama.llama_synchronize(self.context)


def _free(model: llama.llama_model_p, context: llama.llama_context_p) -> None:
    llama.llama_free(context)
    llama.llama_model_free(model)


class Batch:
    """A llama_batch of token ids, one sequence id per token, as NumPy views of its arrays:
    filled once where it does not change, and only `tokens`/`positions` between decodes."""

    def __init__(self, capacity: int) -> None:
        self.batch = llama.llama_batch_init(capacity, 0, 1)
        weakref.finalize(self, llama.llama_batch_free, self.batch)
        self.capacity = capacity
        self.tokens = np.ctypeslib.as_array(self.batch.token, shape=(capacity,))
        self.positions = np.ctypeslib.as_array(self.batch.pos, shape=(capacity,))
        self.outputs = np.ctypeslib.as_array(self.batch.logits, shape=(capacity,))
        np.ctypeslib.as_array(self.batch.n_seq_id, shape=(capacity,))[:] = 1

    def fill(
        self, tokens: np.ndarray, positions: np.ndarray, sequences: np.ndarray, outputs: np.ndarray
    ) -> None:
        """One entry per token: its id, position, sequence and whether its logits are kept."""
        n = len(tokens)
        if n > self.capacity:
            raise ValueError(f"{n} tokens in a batch of capacity {self.capacity}")
        self.batch.n_tokens = n
        self.tokens[:n], self.positions[:n], self.outputs[:n] = tokens, positions, outputs
        for i, sequence in enumerate(sequences.tolist()):
            self.batch.seq_id[i][0] = sequence


def sequences_batch(tokens: np.ndarray, outputs: str) -> Batch:
    """`tokens` (sequences, length) as one llama_batch: sequence s at positions 0..length-1;
    logits kept at every position (`outputs` "all") or at each sequence's last ("last")."""
    sequences, length = tokens.shape
    batch = Batch(sequences * length)
    keep = np.ones(length, np.int8) if outputs == "all" else np.eye(1, length, length - 1)[0]
    batch.fill(
        tokens.reshape(-1),
        np.tile(np.arange(length), sequences),
        np.repeat(np.arange(sequences), length),
        np.tile(keep.astype(np.int8), sequences),
    )
    return batch
