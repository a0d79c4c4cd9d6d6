"""Transformers in PyTorch: the attention op, BERT (Hugging Face's BertForMaskedLM layout) and
GPT-2 (its GPT2LMHeadModel layout), and greedy generation with a KV cache on GPT-2.

Written with ``torch.nn`` only, submodule names as Hugging Face's so that ``state_dict`` keys are
its checkpoint names (fwbench.runtime.architectures, "Transformers"), shapes from the cell's
parameters. Attention is ``F.scaled_dot_product_attention`` (the fused kernel PyTorch picks:
`sdpa_backend` names it) except in the attention op's "plain" mode, which runs the textbook
matmul-softmax-matmul. Dropout is off.

Generation keeps the keys and values of every layer in a cache preallocated for the prompt and
the new tokens. In eager mode a decode step attends over the filled part of it (a slice that
grows by one each step); compiled, it attends over the whole cache with the unfilled part
masked, so that every step has the same shapes and compiles once (Hugging Face's static
cache does the same) at the price of reading the whole cache each step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as F  # noqa: N812 (PyTorch's own convention)
from torch import nn

from fwbench.runtime.architectures import (
    BERT_TOKEN_TYPES,
    IGNORED_LABEL,
    TransformerConfig,
    mlm_positions,
    transformer_config,
)
from fwbench.runtime.plugin import GenerationSteps
from fwbench.runtime.torch_profile import kv_cache_scope

# The attention op's modes: the fused kernel eager and compiled, and the plain products.
ATTENTION_MODES = ("eager", "compile", "plain")
PLAIN_KERNEL = "plain: matmul, softmax, matmul"
Wrap = Callable[[Callable[..., torch.Tensor]], Callable[..., torch.Tensor]]


def sdpa_backend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> str:
    """The kernel scaled_dot_product_attention dispatches these inputs to ("flash_attention",
    "efficient_attention", "cudnn_attention", "math"), as PyTorch's own chooser says."""
    choose = getattr(torch, "_fused_sdp_choice", None)
    if choose is None:
        return "sdpa (backend not reported by this torch)"
    from torch.nn.attention import SDPBackend

    names = {getattr(SDPBackend, n).value: n.lower() for n in dir(SDPBackend) if n.isupper()}
    return "sdpa:" + names.get(int(choose(q, k, v, None, 0.0, causal)), "unknown")


def plain_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False
) -> torch.Tensor:
    """softmax(Q K^T / sqrt(d)) V as three operations; causal rows see the keys up to their
    own position (queries are the last positions of the keys)."""
    scores = torch.matmul(q, k.transpose(-2, -1)) * (q.shape[-1] ** -0.5)
    if causal:
        queries, keys = q.shape[-2], k.shape[-2]
        mask = torch.ones(queries, keys, dtype=torch.bool, device=q.device).tril(keys - queries)
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.matmul(scores.softmax(dim=-1), v)


def build_attention(
    batch: int,
    params: Mapping[str, int],
    dtype: torch.dtype,
    device: torch.device,
    generator: torch.Generator,
    train: bool,
    mode: str,
    wrap: Wrap,
) -> tuple[Callable[[], object], str]:
    """The attention op's step (forward; training: forward and backward to Q, K and V) and
    the name of the kernel it runs."""
    shape = (batch, params["heads"], params["seq_len"], params["head_dim"])
    causal = bool(params["causal"])
    q, k, v = (
        torch.randn(shape, dtype=dtype, device=device, generator=generator, requires_grad=train)
        for _ in range(3)
    )
    if mode == "plain":
        attend = wrap(lambda q, k, v: plain_attention(q, k, v, causal))
        kernel = PLAIN_KERNEL
    else:
        attend = wrap(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=causal))
        kernel = sdpa_backend(q, k, v, causal)
    if not train:
        return lambda: attend(q, k, v), kernel
    grad = torch.ones(shape, dtype=dtype, device=device)

    def step() -> object:
        for leaf in (q, k, v):
            leaf.grad = None
        out = attend(q, k, v)
        out.backward(grad)
        return out

    return step, kernel


# ------------------------------------------------------------------------------------ layers


def _split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    """(batch, seq, hidden) -> (batch, heads, seq, head_dim)."""
    batch, seq, hidden = x.shape
    return x.view(batch, seq, heads, hidden // heads).transpose(1, 2)


def _merge_heads(x: torch.Tensor) -> torch.Tensor:
    batch, heads, seq, head_dim = x.shape
    return x.transpose(1, 2).reshape(batch, seq, heads * head_dim)


def _gelu(config: TransformerConfig) -> Callable[[torch.Tensor], torch.Tensor]:
    approximate = "tanh" if config.gelu_tanh else "none"
    return lambda x: F.gelu(x, approximate=approximate)


# --------------------------------------------------------------------------------------- BERT


class BertEmbeddings(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.word_embeddings = nn.Embedding(config.vocab, config.hidden)
        self.position_embeddings = nn.Embedding(config.positions, config.hidden)
        self.token_type_embeddings = nn.Embedding(BERT_TOKEN_TYPES, config.hidden)
        self.LayerNorm = nn.LayerNorm(config.hidden, eps=config.layer_norm_eps)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.word_embeddings(tokens) + self.position_embeddings(positions)
        # Every token is of type 0: the first row of the type table.
        x = x + self.token_type_embeddings.weight[0]
        return self.LayerNorm(x)


class BertSelfAttention(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.heads = config.heads
        self.query = nn.Linear(config.hidden, config.hidden)
        self.key = nn.Linear(config.hidden, config.hidden)
        self.value = nn.Linear(config.hidden, config.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = (
            _split_heads(layer(x), self.heads) for layer in (self.query, self.key, self.value)
        )
        return _merge_heads(F.scaled_dot_product_attention(q, k, v))


class _DenseNorm(nn.Module):
    """Dense, then LayerNorm of the residual sum (BERT's post-LayerNorm)."""

    def __init__(self, inputs: int, config: TransformerConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(inputs, config.hidden)
        self.LayerNorm = nn.LayerNorm(config.hidden, eps=config.layer_norm_eps)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.dense(x) + residual)


class BertAttention(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.self = BertSelfAttention(config)
        self.output = _DenseNorm(config.hidden, config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.output(self.self(x), x)


class BertIntermediate(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden, config.intermediate)
        self.activation = _gelu(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(x))


class BertLayer(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.attention = BertAttention(config)
        self.intermediate = BertIntermediate(config)
        self.output = _DenseNorm(config.intermediate, config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.attention(x)
        return self.output(self.intermediate(x), x)


class BertEncoder(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.layer = nn.ModuleList(BertLayer(config) for _ in range(config.layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layer:
            x = layer(x)
        return x


class BertModel(nn.Module):
    """The encoder without its pooler, as BertForMaskedLM builds it."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.embeddings = BertEmbeddings(config)
        self.encoder = BertEncoder(config)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.encoder(self.embeddings(tokens))


class BertPredictionHeadTransform(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.dense = nn.Linear(config.hidden, config.hidden)
        self.activation = _gelu(config)
        self.LayerNorm = nn.LayerNorm(config.hidden, eps=config.layer_norm_eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.LayerNorm(self.activation(self.dense(x)))


class BertLMPredictionHead(nn.Module):
    """Transform, then the decoder: the word embeddings (tied) and a bias of its own."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.transform = BertPredictionHeadTransform(config)
        self.bias = nn.Parameter(torch.zeros(config.vocab))

    def forward(self, x: torch.Tensor, decoder: torch.Tensor) -> torch.Tensor:
        return F.linear(self.transform(x), decoder, self.bias)


class BertOnlyMLMHead(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.predictions = BertLMPredictionHead(config)


class BertForMaskedLM(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = config
        self.bert = BertModel(config)
        self.cls = BertOnlyMLMHead(config)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """(batch, seq) token ids -> (batch, seq, vocab) logits."""
        decoder = self.bert.embeddings.word_embeddings.weight
        return self.cls.predictions(self.bert(tokens), decoder)


# -------------------------------------------------------------------------------------- GPT-2


@dataclass
class KVCache:
    """Keys and values of every layer, (batch, heads, length, head_dim) each, preallocated."""

    keys: list[torch.Tensor]
    values: list[torch.Tensor]

    @classmethod
    def empty(
        cls,
        config: TransformerConfig,
        batch: int,
        length: int,
        dtype: torch.dtype,
        device: torch.device,
    ) -> KVCache:
        shape = (batch, config.heads, length, config.head_dim)

        def zeros() -> list[torch.Tensor]:
            return [torch.zeros(shape, dtype=dtype, device=device) for _ in range(config.layers)]

        return cls(zeros(), zeros())

    def bytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in (*self.keys, *self.values))


class GPT2Attention(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.heads = config.heads
        self.c_attn = nn.Linear(config.hidden, 3 * config.hidden)
        self.c_proj = nn.Linear(config.hidden, config.hidden)

    def _qkv(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        q, k, v = self.c_attn(x).split(x.shape[-1], dim=-1)
        return _split_heads(q, self.heads), _split_heads(k, self.heads), _split_heads(v, self.heads)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self._qkv(x)
        return self.c_proj(_merge_heads(F.scaled_dot_product_attention(q, k, v, is_causal=True)))

    def prefill(self, x: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
        """Causal attention over the prompt, whose keys and values fill the cache's start."""
        q, k, v = self._qkv(x)
        length = x.shape[1]
        with kv_cache_scope():
            keys[:, :, :length] = k
            values[:, :, :length] = v
        return self.c_proj(_merge_heads(F.scaled_dot_product_attention(q, k, v, is_causal=True)))

    def decode(
        self,
        x: torch.Tensor,
        position: torch.Tensor,
        keys: torch.Tensor,
        values: torch.Tensor,
        filled: int | None,
    ) -> torch.Tensor:
        """One new token (x: (batch, 1, hidden)) at `position` (a 0-d tensor): its key and
        value join the cache, and it attends to every cached position up to its own: the first
        `filled` (eager), or all of them with the rest masked (`filled` None, static shapes)."""
        q, k, v = self._qkv(x)
        if filled is not None:  # eager: a slice at a Python int (1% faster than index_copy_)
            with kv_cache_scope():
                keys[:, :, filled - 1 : filled] = k
                values[:, :, filled - 1 : filled] = v
            out = F.scaled_dot_product_attention(q, keys[:, :, :filled], values[:, :, :filled])
        else:  # compiled: the position is a tensor, the shapes never change
            keys.index_copy_(2, position.view(1), k)
            values.index_copy_(2, position.view(1), v)
            seen = (torch.arange(keys.shape[2], device=keys.device) <= position).view(1, -1)
            out = F.scaled_dot_product_attention(q, keys, values, attn_mask=seen)
        return self.c_proj(_merge_heads(out))


class GPT2MLP(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.hidden, config.intermediate)
        self.c_proj = nn.Linear(config.intermediate, config.hidden)
        self.activation = _gelu(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.activation(self.c_fc(x)))


class GPT2Block(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.hidden, eps=config.layer_norm_eps)
        self.attn = GPT2Attention(config)
        self.ln_2 = nn.LayerNorm(config.hidden, eps=config.layer_norm_eps)
        self.mlp = GPT2MLP(config)

    def forward(
        self, x: torch.Tensor, attend: Callable[[torch.Tensor], torch.Tensor]
    ) -> torch.Tensor:
        x = x + attend(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.wte = nn.Embedding(config.vocab, config.hidden)
        self.wpe = nn.Embedding(config.positions, config.hidden)
        self.h = nn.ModuleList(GPT2Block(config) for _ in range(config.layers))
        self.ln_f = nn.LayerNorm(config.hidden, eps=config.layer_norm_eps)


class GPT2LMHeadModel(nn.Module):
    """GPT-2 with its LM head tied to the token embeddings. `forward` runs whole sequences
    (training, inference); `prefill` and `decode` run a generation on a KVCache and return
    the logits of each sequence's last position only."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = config
        self.transformer = GPT2Model(config)

    def _logits(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(self.transformer.ln_f(x), self.transformer.wte.weight)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """(batch, seq) token ids -> (batch, seq, vocab) logits."""
        t = self.transformer
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = t.wte(tokens) + t.wpe(positions)
        for block in t.h:
            x = block(x, block.attn)
        return self._logits(x)

    def prefill(self, tokens: torch.Tensor, cache: KVCache) -> torch.Tensor:
        t = self.transformer
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = t.wte(tokens) + t.wpe(positions)
        for block, keys, values in zip(t.h, cache.keys, cache.values, strict=True):
            x = block(x, lambda y, b=block, k=keys, v=values: b.attn.prefill(y, k, v))
        return self._logits(x[:, -1])

    def decode(
        self, token: torch.Tensor, position: torch.Tensor, cache: KVCache, filled: int | None
    ) -> torch.Tensor:
        """token: (batch,) ids at `position` (0-d tensor) -> (batch, vocab) logits."""
        t = self.transformer
        x = t.wte(token.unsqueeze(1)) + t.wpe(position.view(1))
        for block, keys, values in zip(t.h, cache.keys, cache.values, strict=True):
            x = block(
                x, lambda y, b=block, k=keys, v=values: b.attn.decode(y, position, k, v, filled)
            )
        return self._logits(x[:, -1])


# ------------------------------------------------------------------------------- public API


def build_transformer(config: TransformerConfig) -> nn.Module:
    """A freshly initialised model (deterministic under torch.manual_seed): PyTorch's default
    initialisation of each layer; the benchmarks never train it to anything."""
    return BertForMaskedLM(config) if config.model == "bert" else GPT2LMHeadModel(config)


def config_for(workload: str, params: Mapping[str, int]) -> TransformerConfig:
    """The model of a transformer workload: bert's, or GPT-2's for gpt and generate."""
    return transformer_config("bert" if workload == "bert" else "gpt", params)


def example_batch(
    config: TransformerConfig,
    batch: int,
    seq_len: int,
    device: torch.device | str = "cpu",
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Synthetic (tokens, labels), each (batch, seq_len) int64: BERT's labels are random
    tokens at the masked-LM positions and IGNORED_LABEL elsewhere; GPT-2's a random next
    token at every position."""
    tokens = torch.randint(0, config.vocab, (batch, seq_len), device=device, generator=generator)
    labels = torch.randint(0, config.vocab, (batch, seq_len), device=device, generator=generator)
    if config.model == "bert":
        keep = torch.zeros(seq_len, dtype=torch.bool, device=device)
        keep[list(mlm_positions(seq_len))] = True
        labels = labels.masked_fill(~keep, IGNORED_LABEL)
    return tokens, labels


def language_model_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean softmax cross-entropy over the labelled positions, in float32."""
    return F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(),
        labels.reshape(-1),
        ignore_index=IGNORED_LABEL,
    )


def kernel_of(model: nn.Module, dtype: torch.dtype, device: torch.device, seq_len: int) -> str:
    """The SDPA kernel the model's attention dispatches to at this shape."""
    config: TransformerConfig = model.config  # type: ignore[assignment]
    shape = (1, config.heads, seq_len, config.head_dim)
    q = torch.zeros(shape, dtype=dtype, device=device)
    return sdpa_backend(q, q, q, config.causal)


@dataclass
class Generator:
    """Greedy generation on a GPT2LMHeadModel with a KVCache (the module's docstring says how
    eager and compiled steps attend). `prefill()` starts over with the prompt and makes the
    first token; `decode()` makes each next one. `tokens` keeps the generation's tokens and
    `gaps` each step's top-1 minus top-2 logit (a tie makes greedy decoding ill-defined)."""

    model: GPT2LMHeadModel
    prompt: torch.Tensor  # (batch, prompt_len) int64
    cache: KVCache
    static: bool  # attend over the whole cache, masked (compiled steps)
    prefill_fn: Callable[..., torch.Tensor]
    decode_fn: Callable[..., torch.Tensor]
    keep_gaps: bool = False

    def __post_init__(self) -> None:
        self.position = self.prompt.shape[1]
        self.token = self.prompt[:, -1]
        self.tokens: list[torch.Tensor] = []
        self.gaps: list[torch.Tensor] = []

    def _next(self, logits: torch.Tensor) -> torch.Tensor:
        if self.keep_gaps:
            top = logits.float().topk(2, dim=-1).values
            self.gaps.append(top[:, 0] - top[:, 1])
            self.tokens.append(logits.argmax(dim=-1))
        self.token = logits.argmax(dim=-1)
        return self.token

    def prefill(self) -> torch.Tensor:
        self.position = self.prompt.shape[1]
        self.tokens, self.gaps = [], []
        with torch.inference_mode():
            return self._next(self.prefill_fn(self.prompt, self.cache))

    def decode(self) -> torch.Tensor:
        position = torch.tensor(self.position, device=self.prompt.device)
        filled = None if self.static else self.position + 1
        with torch.inference_mode():
            token = self._next(self.decode_fn(self.token, position, self.cache, filled))
        self.position += 1
        return token


def build_generation(
    params: Mapping[str, int],
    batch: int,
    dtype: torch.dtype,
    device: torch.device,
    generator: torch.Generator,
    mode: str,
    wrap: Wrap,
    model: GPT2LMHeadModel | None = None,
    prompt: torch.Tensor | None = None,
    keep_gaps: bool = False,
    cache_dtype: torch.dtype | None = None,
) -> tuple[GenerationSteps, Generator]:
    """The generate workload's parts on a fresh GPT-2 of `dtype` (or `model`), a random
    prompt (or `prompt`) and a cache preallocated for prompt_len + new_tokens positions, in
    `cache_dtype` (default `dtype`: under autocast, float32 weights and a half-precision cache)."""
    config = transformer_config("gpt", params)
    if model is None:
        model = GPT2LMHeadModel(config).to(device=device, dtype=dtype)
    model.eval()
    if prompt is None:
        prompt = torch.randint(
            0, config.vocab, (batch, params["prompt_len"]), device=device, generator=generator
        )
    length = params["prompt_len"] + params["new_tokens"]
    cache = KVCache.empty(config, prompt.shape[0], length, cache_dtype or dtype, device)
    static = mode == "compile"
    run = Generator(
        model, prompt, cache, static, wrap(model.prefill), wrap(model.decode), keep_gaps
    )
    steps = GenerationSteps(run.prefill, run.decode, params["new_tokens"] - 1)
    return steps, run


def kv_cache_settings(run: Generator) -> dict[str, str]:
    length = run.cache.keys[0].shape[2]
    how = (
        "each step attends over the whole cache, the unfilled part masked (static shapes)"
        if run.static
        else "each step attends over the filled part"
    )
    return {
        "kv_cache": f"preallocated for {length} positions; {how}",
        "kv_cache_allocated_bytes": str(run.cache.bytes()),
        "attention_kernel": sdpa_backend(
            run.cache.keys[0][:, :, :1], run.cache.keys[0], run.cache.keys[0], False
        ),
    }


def parameter_count(model: nn.Module) -> int:
    return sum(math.prod(p.shape) for p in model.parameters())
