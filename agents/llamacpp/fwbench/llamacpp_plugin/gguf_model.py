"""The catalogue's GPT-2 as a GGUF file of llama.cpp's "gpt2" architecture, from canonical
weights (Hugging Face's GPT2LMHeadModel names, dense weights (out, in)).

llama.cpp reads the model only from a GGUF file, so every cell writes one: the keys and tensor
names are those its loader asks for (vendor/llama.cpp/src/models/gpt2.cpp,
llama-model.cpp's load_hparams, llama-arch.cpp's names). A ggml tensor's dimensions run
innermost first, so llama.cpp's {n_embd, 3 n_embd} for attn_qkv is NumPy's (3 n_embd, n_embd):
the canonical (out, in) layout as it is, no transpose. The LM head is tied: no "output"
tensor, and llama.cpp then reads token_embd for it (TENSOR_DUPLICATED).

There is no tokenizer: the agent feeds token ids. The smallest vocabulary metadata llama.cpp
accepts is tokenizer.ggml.model = "none" with gpt2.vocab_size: its loader then makes that
many nameless tokens (llama-vocab.cpp), and n_vocab equals the catalogue's vocab.

Weight types: F32, F16 (the float16 cells) or Q8_0 (the q8_0 variant: blocks of 32 int8 with
one float16 scale, quantized by gguf's quants module as ggml's quantize_row_q8_0 does). Only
2-D tensors change type; 1-D ones (LayerNorm, biases) stay F32 as llama.cpp expects. Q8_0
needs rows of a multiple of 32 values: a 2-D tensor whose rows are not stays F32, and
`GgufFile.kept_float32` names it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import gguf
import numpy as np

from fwbench.runtime.architectures import TransformerConfig

ARCHITECTURE = "gpt2"
WEIGHT_TYPES = ("F32", "F16", "Q8_0")
# llama_ftype of a file whose 2-D tensors are of each type (general.file_type).
_FILE_TYPES = {
    "F32": gguf.LlamaFileType.ALL_F32,
    "F16": gguf.LlamaFileType.MOSTLY_F16,
    "Q8_0": gguf.LlamaFileType.MOSTLY_Q8_0,
}
_Q8_BLOCK = gguf.GGML_QUANT_SIZES[gguf.GGMLQuantizationType.Q8_0][0]  # 32 values a block
# Hugging Face's initialiser: N(0, 0.02) for every dense and embedding weight, the residual
# projections (attn.c_proj, mlp.c_proj) scaled by 1/sqrt(2 layers); biases 0, LayerNorm 1, 0.
_INIT_STD = 0.02


def canonical_names(config: TransformerConfig) -> dict[str, tuple[int, ...]]:
    """GPT2LMHeadModel's state_dict names and shapes, each tensor once (lm_head is wte)."""
    h, ff = config.hidden, config.intermediate
    names: dict[str, tuple[int, ...]] = {
        "transformer.wte.weight": (config.vocab, h),
        "transformer.wpe.weight": (config.positions, h),
    }
    for i in range(config.layers):
        block = f"transformer.h.{i}"
        names |= {
            f"{block}.ln_1.weight": (h,),
            f"{block}.ln_1.bias": (h,),
            f"{block}.attn.c_attn.weight": (3 * h, h),
            f"{block}.attn.c_attn.bias": (3 * h,),
            f"{block}.attn.c_proj.weight": (h, h),
            f"{block}.attn.c_proj.bias": (h,),
            f"{block}.ln_2.weight": (h,),
            f"{block}.ln_2.bias": (h,),
            f"{block}.mlp.c_fc.weight": (ff, h),
            f"{block}.mlp.c_fc.bias": (ff,),
            f"{block}.mlp.c_proj.weight": (h, ff),
            f"{block}.mlp.c_proj.bias": (h,),
        }
    return names | {"transformer.ln_f.weight": (h,), "transformer.ln_f.bias": (h,)}


def gguf_names(config: TransformerConfig) -> dict[str, str]:
    """Canonical name -> llama.cpp's tensor name (LLM_TENSOR_* of the gpt2 architecture)."""
    names = {
        "transformer.wte.weight": "token_embd.weight",
        "transformer.wpe.weight": "position_embd.weight",
        "transformer.ln_f.weight": "output_norm.weight",
        "transformer.ln_f.bias": "output_norm.bias",
    }
    parts = {
        "ln_1": "attn_norm",
        "attn.c_attn": "attn_qkv",
        "attn.c_proj": "attn_output",
        "ln_2": "ffn_norm",
        "mlp.c_fc": "ffn_up",
        "mlp.c_proj": "ffn_down",
    }
    for i in range(config.layers):
        for ours, theirs in parts.items():
            for kind in ("weight", "bias"):
                names[f"transformer.h.{i}.{ours}.{kind}"] = f"blk.{i}.{theirs}.{kind}"
    return names


def fresh_weights(config: TransformerConfig, seed: int) -> dict[str, np.ndarray]:
    """A freshly initialised GPT-2 (Hugging Face's initialiser, seeded NumPy draws): llama.cpp
    has no initialisers of its own, it only loads files."""
    rng = np.random.default_rng(seed)
    residual_std = _INIT_STD / np.sqrt(2 * config.layers)
    weights = {}
    for name, shape in canonical_names(config).items():
        if name.endswith("bias"):
            array = np.zeros(shape)
        elif ".ln_" in name:
            array = np.ones(shape)
        else:
            std = residual_std if name.endswith("c_proj.weight") else _INIT_STD
            array = rng.normal(0.0, std, shape)
        weights[name] = array.astype(np.float32)
    return weights


@dataclass(frozen=True)
class GgufFile:
    """A written GGUF file and what is in it."""

    path: Path
    weight_type: str  # of its 2-D tensors: F32, F16 or Q8_0
    kept_float32: tuple[str, ...]  # 2-D tensors left F32 (Q8_0 needs rows of 32k values)
    nbytes: int  # of its tensor data
    parameters: int  # the weights' values, all tensors together


def check_weights(config: TransformerConfig, weights: dict[str, np.ndarray]) -> None:
    """Every canonical weight, of its shape, and nothing else (EquivalenceCase's rule)."""
    expected = canonical_names(config)
    if set(weights) != set(expected):
        missing, extra = sorted(set(expected) - set(weights)), sorted(set(weights) - set(expected))
        raise ValueError(f"gpt weights: missing {missing}, unexpected {extra}")
    for name, shape in expected.items():
        if tuple(weights[name].shape) != shape:
            raise ValueError(f"{name}: shape {weights[name].shape}, expected {shape}")


def _tensor(array: np.ndarray, weight_type: str) -> tuple[np.ndarray, bool]:
    """The tensor as written, and whether a Q8_0 request kept it F32."""
    values = np.ascontiguousarray(array, dtype=np.float32)
    if values.ndim == 1 or weight_type == "F32":
        return values, False
    if weight_type == "F16":
        return values.astype(np.float16), False
    if values.shape[-1] % _Q8_BLOCK:
        return values, True
    return gguf.quants.quantize(values, gguf.GGMLQuantizationType.Q8_0), False


def write_gguf(
    path: Path, config: TransformerConfig, weights: dict[str, np.ndarray], weight_type: str
) -> GgufFile:
    """`weights` (canonical) as a GGUF file of llama.cpp's gpt2 architecture at `path`."""
    if config.model != "gpt":
        raise ValueError(f"llama.cpp's gpt2 architecture holds the gpt model, not {config.model}")
    if weight_type not in WEIGHT_TYPES:
        raise ValueError(f"weight type {weight_type!r}; valid: {', '.join(WEIGHT_TYPES)}")
    check_weights(config, weights)
    writer = gguf.GGUFWriter(path, ARCHITECTURE)
    writer.add_name("fwbench gpt")
    writer.add_file_type(int(_FILE_TYPES[weight_type]))
    writer.add_context_length(config.positions)
    writer.add_embedding_length(config.hidden)
    writer.add_feed_forward_length(config.intermediate)
    writer.add_block_count(config.layers)
    writer.add_head_count(config.heads)
    writer.add_layer_norm_eps(config.layer_norm_eps)
    writer.add_vocab_size(config.vocab)
    writer.add_tokenizer_model("none")
    kept, nbytes = [], 0
    for name, theirs in gguf_names(config).items():
        tensor, kept_f32 = _tensor(weights[name], weight_type)
        if kept_f32:
            kept.append(name)
        quantized = tensor.dtype == np.uint8
        raw = gguf.GGMLQuantizationType.Q8_0 if quantized else None
        writer.add_tensor(theirs, tensor, raw_dtype=raw)
        nbytes += tensor.nbytes
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    parameters = sum(weights[name].size for name in gguf_names(config))
    return GgufFile(path, weight_type, tuple(kept), nbytes, parameters)
