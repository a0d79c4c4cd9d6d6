"""BERT (Hugging Face's BertForMaskedLM layout) and GPT-2 (its GPT2LMHeadModel layout) in
Paddle's own layers (paddle.nn.Linear, LayerNorm, Embedding; attention through
paddle.nn.functional.scaled_dot_product_attention, attention.py), layer for layer as the
PyTorch plugin's (agents/torch/fwbench/torch_plugin/transformers.py).

Sublayers carry Hugging Face's checkpoint names and are registered in its state_dict order,
so weights.py maps them as it maps the CNNs: a Linear's (in, out) weight is the transpose of
the canonical (out, in), LayerNorm and Embedding weights are as they are. Each tied weight is
held once: BERT's MLM decoder and GPT-2's LM head are products with the word embeddings
(BERT's decoder adds a bias of its own, `cls.predictions.bias`). Shapes come from the cell's
parameters (fwbench.runtime.architectures, "Transformers"); dropout is off.

Heads stay in Paddle's attention layout, (batch, seq, heads, head_dim): a reshape of a dense
layer's output, no transpose. GPT-2 also generates on a KVCache (generation.py drives it):
`prefill` fills the cache's start with the prompt's keys and values, `decode` writes one
position in place and attends over the filled part."""

# Paddle types Layer.__call__ as returning Any.
# mypy: disable-error-code="no-any-return"

from __future__ import annotations

from collections.abc import Callable, Mapping

import paddle
from paddle import nn
from paddle.nn import functional

from fwbench.paddle_plugin.attention import sdpa
from fwbench.paddle_plugin.profiling import kv_cache_scope
from fwbench.runtime.architectures import BERT_TOKEN_TYPES, TransformerConfig, transformer_config
from fwbench.spec import load_catalogue

Attention = Callable[[paddle.Tensor, paddle.Tensor, paddle.Tensor], paddle.Tensor]
MODEL_WORKLOADS = ("bert", "gpt", "generate")  # the workloads that run these models
# How the models hold and compute each dtype (Settings.extra["dtype_policy"]).
DTYPE_POLICY = {
    "float32": "float32",
    "float64": "float64; language-model loss in float32 (as PyTorch's .float() logits)",
}


class Named(nn.Layer):
    """A container whose sublayers are its keyword arguments, in order: the Hugging Face
    modules that only hold others (``bert.embeddings``, ``attention.output``, ``attn``)."""

    def __init__(self, /, **sublayers: nn.Layer) -> None:
        super().__init__()
        for name, layer in sublayers.items():
            self.add_sublayer(name, layer)


def _heads(x: paddle.Tensor, heads: int) -> paddle.Tensor:
    """(batch, seq, hidden) -> (batch, seq, heads, head_dim)."""
    return paddle.reshape(x, [0, 0, heads, int(x.shape[-1]) // heads])


def _merged(x: paddle.Tensor) -> paddle.Tensor:
    return paddle.reshape(x, [0, 0, int(x.shape[-2]) * int(x.shape[-1])])


def _tied(x: paddle.Tensor, embedding: paddle.Tensor) -> paddle.Tensor:
    """x @ embedding^T: the LM head tied to the word embeddings."""
    return paddle.matmul(x, embedding, transpose_y=True)


# --------------------------------------------------------------------------------------- BERT


class BertLayer(nn.Layer):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        h, eps = config.hidden, config.layer_norm_eps
        self.heads = config.heads
        projections = {part: nn.Linear(h, h) for part in ("query", "key", "value")}
        self.attention = Named(
            self=Named(**projections),
            output=Named(dense=nn.Linear(h, h), LayerNorm=nn.LayerNorm(h, epsilon=eps)),
        )
        self.intermediate = Named(dense=nn.Linear(h, config.intermediate))
        self.output = Named(
            dense=nn.Linear(config.intermediate, h), LayerNorm=nn.LayerNorm(h, epsilon=eps)
        )

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        """Post-LayerNorm: each sublayer's output is added to its input, then normalised."""
        own, out = self.attention.self, self.attention.output
        q = _heads(own.query(x), self.heads)
        k = _heads(own.key(x), self.heads)
        v = _heads(own.value(x), self.heads)
        x = out.LayerNorm(out.dense(_merged(sdpa(q, k, v))) + x)
        inner = functional.gelu(self.intermediate.dense(x))  # erf GELU
        return self.output.LayerNorm(self.output.dense(inner) + x)


class MaskedLMPredictions(nn.Layer):
    """``cls.predictions``: the transform (dense, erf GELU, LayerNorm) and the decoder's own
    bias; the decoder's weight is the word embeddings'."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        h = config.hidden
        self.bias = self.create_parameter([config.vocab], is_bias=True)
        eps = config.layer_norm_eps
        self.transform = Named(dense=nn.Linear(h, h), LayerNorm=nn.LayerNorm(h, epsilon=eps))

    def forward(self, x: paddle.Tensor, embedding: paddle.Tensor) -> paddle.Tensor:
        x = self.transform.LayerNorm(functional.gelu(self.transform.dense(x)))
        return _tied(x, embedding) + self.bias


class BertForMaskedLM(nn.Layer):
    """The encoder without its pooler and the MLM head. Every token is of type 0."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        h, eps = config.hidden, config.layer_norm_eps
        embeddings = Named(
            word_embeddings=nn.Embedding(config.vocab, h),
            position_embeddings=nn.Embedding(config.positions, h),
            token_type_embeddings=nn.Embedding(BERT_TOKEN_TYPES, h),
            LayerNorm=nn.LayerNorm(h, epsilon=eps),
        )
        layers = nn.LayerList([BertLayer(config) for _ in range(config.layers)])
        self.bert = Named(embeddings=embeddings, encoder=Named(layer=layers))
        self.cls = Named(predictions=MaskedLMPredictions(config))

    def forward(self, tokens: paddle.Tensor) -> paddle.Tensor:
        """(batch, seq) int64 token ids -> (batch, seq, vocab) logits."""
        e = self.bert.embeddings
        seq = int(tokens.shape[1])
        # Positions 0..seq-1 are the table's first rows: a slice, whose gradient is dense.
        x = e.word_embeddings(tokens) + e.position_embeddings.weight[:seq]
        x = e.LayerNorm(x + e.token_type_embeddings.weight[0])
        for layer in self.bert.encoder.layer:
            x = layer(x)
        return self.cls.predictions(x, e.word_embeddings.weight)


# -------------------------------------------------------------------------------------- GPT-2


class KVCache(nn.Layer):
    """Keys and values of every layer, (batch, length, heads, head_dim) each (the attention
    layout), preallocated as the Layer's buffers and written in place by slice assignment
    (Paddle's set_value kernel, in a static program too: buffers are the program's own)."""

    def __init__(self, config: TransformerConfig, batch: int, length: int, dtype: str) -> None:
        super().__init__()
        shape = [batch, length, config.heads, config.head_dim]
        for i in range(config.layers):
            self.register_buffer(f"keys_{i}", paddle.zeros(shape, dtype), persistable=False)
            self.register_buffer(f"values_{i}", paddle.zeros(shape, dtype), persistable=False)
        self.length = length

    def bytes(self) -> int:
        return sum(int(t.numel()) * t.element_size() for t in self.buffers())

    def keys(self, layer: int) -> paddle.Tensor:
        return getattr(self, f"keys_{layer}")

    def values(self, layer: int) -> paddle.Tensor:
        return getattr(self, f"values_{layer}")

    def write(self, layer: int, k: paddle.Tensor, v: paddle.Tensor, start: int) -> None:
        """Keys and values (batch, n, heads, head_dim) into positions start..start+n-1."""
        end = start + int(k.shape[1])
        with kv_cache_scope():  # a profiler range while a profile is on, else nothing
            self.keys(layer)[:, start:end] = k
            self.values(layer)[:, start:end] = v

    def write_at(
        self, layer: int, k: paddle.Tensor, v: paddle.Tensor, position: paddle.Tensor
    ) -> None:
        """One token's key and value (batch, 1, heads, head_dim) at `position` (0-d int64
        tensor: one static program serves every position)."""
        self.keys(layer)[:, position] = k[:, 0]
        self.values(layer)[:, position] = v[:, 0]


def _causal(q: paddle.Tensor, k: paddle.Tensor, v: paddle.Tensor) -> paddle.Tensor:
    return sdpa(q, k, v, causal=True)


class GPT2Block(nn.Layer):
    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        h, eps, inner = config.hidden, config.layer_norm_eps, config.intermediate
        self.heads = config.heads
        self.ln_1 = nn.LayerNorm(h, epsilon=eps)
        # c_attn: q, k, v along the output.
        self.attn = Named(c_attn=nn.Linear(h, 3 * h), c_proj=nn.Linear(h, h))
        self.ln_2 = nn.LayerNorm(h, epsilon=eps)
        self.mlp = Named(c_fc=nn.Linear(h, inner), c_proj=nn.Linear(inner, h))

    def forward(self, x: paddle.Tensor) -> paddle.Tensor:
        return self.attending(x, _causal)

    def attending(self, x: paddle.Tensor, attention: Attention) -> paddle.Tensor:
        """Pre-LayerNorm; `attention` maps this block's (q, k, v) heads to its output heads
        (causal over the sequence, or over a KV cache)."""
        q, k, v = paddle.split(self.attn.c_attn(self.ln_1(x)), 3, axis=-1)
        heads = attention(_heads(q, self.heads), _heads(k, self.heads), _heads(v, self.heads))
        x = x + self.attn.c_proj(_merged(heads))
        inner = functional.gelu(self.mlp.c_fc(self.ln_2(x)), approximate=True)
        return x + self.mlp.c_proj(inner)


class GPT2LMHeadModel(nn.Layer):
    """GPT-2 with its LM head tied to the token embeddings (no bias). `forward` runs whole
    sequences (training, inference); `prefill` and `decode` run a generation on a KVCache and
    return the logits of each sequence's last position only."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        h = config.hidden
        self.transformer = Named(
            wte=nn.Embedding(config.vocab, h),
            wpe=nn.Embedding(config.positions, h),
            h=nn.LayerList([GPT2Block(config) for _ in range(config.layers)]),
            ln_f=nn.LayerNorm(h, epsilon=config.layer_norm_eps),
        )

    def _embed(self, tokens: paddle.Tensor, start: int = 0) -> paddle.Tensor:
        t = self.transformer
        return t.wte(tokens) + t.wpe.weight[start : start + int(tokens.shape[1])]

    def _logits(self, x: paddle.Tensor) -> paddle.Tensor:
        return _tied(self.transformer.ln_f(x), self.transformer.wte.weight)

    def forward(self, tokens: paddle.Tensor) -> paddle.Tensor:
        """(batch, seq) int64 token ids -> (batch, seq, vocab) logits."""
        x = self._embed(tokens)
        for block in self.transformer.h:
            x = block(x)
        return self._logits(x)

    def prefill(self, tokens: paddle.Tensor, cache: KVCache) -> paddle.Tensor:
        """Causal attention over the prompt, whose keys and values fill the cache's start."""
        x = self._embed(tokens)
        for i, block in enumerate(self.transformer.h):

            def prompt(
                q: paddle.Tensor, k: paddle.Tensor, v: paddle.Tensor, i: int = i
            ) -> paddle.Tensor:
                cache.write(i, k, v, 0)
                return _causal(q, k, v)

            x = block.attending(x, prompt)
        return self._logits(x[:, -1])

    def decode(self, token: paddle.Tensor, position: int, cache: KVCache) -> paddle.Tensor:
        """token: (batch,) ids at `position` -> (batch, vocab) logits. Its key and value join
        the cache; it attends to the positions up to its own (dygraph: the filled part)."""
        x = self._embed(token[:, None], position)
        for i, block in enumerate(self.transformer.h):

            def cached(
                q: paddle.Tensor, k: paddle.Tensor, v: paddle.Tensor, i: int = i
            ) -> paddle.Tensor:
                cache.write(i, k, v, position)
                end = position + 1
                return sdpa(q, cache.keys(i)[:, :end], cache.values(i)[:, :end])

            x = block.attending(x, cached)
        return self._logits(x[:, -1])

    def decode_static(
        self, token: paddle.Tensor, position: paddle.Tensor, cache: KVCache
    ) -> paddle.Tensor:
        """As decode at a 0-d int64 `position` tensor, attending over the whole cache with the
        positions after its own masked: static shapes, one program for every position."""
        t = self.transformer
        x = t.wte(token[:, None]) + paddle.gather(t.wpe.weight, paddle.reshape(position, [1]))
        seen = paddle.arange(cache.length, dtype="int64") <= position
        zero = paddle.zeros([cache.length], x.dtype)
        mask = paddle.reshape(paddle.where(seen, zero, zero - float("inf")), [1, 1, 1, -1])
        for i, block in enumerate(t.h):

            def cached(
                q: paddle.Tensor, k: paddle.Tensor, v: paddle.Tensor, i: int = i
            ) -> paddle.Tensor:
                cache.write_at(i, k, v, position)
                return sdpa(q, cache.keys(i), cache.values(i), mask=mask)

            x = block.attending(x, cached)
        return self._logits(x[:, -1])


# ------------------------------------------------------------------------------- public API

Transformer = BertForMaskedLM | GPT2LMHeadModel


def config_for(workload: str, params: Mapping[str, int] | None = None) -> TransformerConfig:
    """The model of a transformer workload (bert's, or GPT-2's for gpt and generate); missing
    parameters take the catalogue's defaults."""
    model = "bert" if workload == "bert" else "gpt"
    defaults = {name: spec.default for name, spec in load_catalogue().get(model).params.items()}
    return transformer_config(model, {**defaults, **(params or {})})


def build_transformer(
    config: TransformerConfig, seed: int | None = None, dtype: str = "float32"
) -> Transformer:
    """A freshly initialised model (Paddle's initialisers, seeded when `seed` is given), in
    training mode, its parameters in `dtype`."""
    if seed is not None:
        paddle.seed(seed)
    previous = paddle.get_default_dtype()
    paddle.set_default_dtype(dtype)  # type: ignore[arg-type]  # its stub lists literals
    try:
        model = (BertForMaskedLM if config.model == "bert" else GPT2LMHeadModel)(config)
    finally:
        paddle.set_default_dtype(previous)
    model.train()
    return model
