"""The transformer workloads' steps (bert, gpt, generate) and their reference methods.

Inference of bert or gpt gives every position's logits (batch, seq, vocab). A training step is
the language-model loss (softmax cross-entropy in float32, averaged over the labelled
positions: labels != IGNORED_LABEL), its gradients and the catalogue's SGD with momentum, one
jitted program whose parameters and optimizer state are donated to it (updated in place), as
training.TrainLoop does for the other models. Synthetic batches are random tokens; BERT's
labels are random tokens at architectures.mlm_positions and IGNORED_LABEL elsewhere, GPT-2's
random tokens everywhere.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import Array

from fwbench.jax_plugin import attention
from fwbench.jax_plugin.generation import Generator
from fwbench.jax_plugin.models import Variables, data_key
from fwbench.jax_plugin.reference import optimizer_for
from fwbench.jax_plugin.training import compile_fn, example_losses, sgd
from fwbench.jax_plugin.transformers import Transformer
from fwbench.runtime.architectures import (
    IGNORED_LABEL,
    TransformerConfig,
    mlm_positions,
    transformer_config,
)
from fwbench.runtime.plugin import GenerationSteps, WorkloadSpec
from fwbench.runtime.reference import EquivalenceCase, EquivalenceResult

TrainFn = Callable[..., tuple[Variables, optax.OptState, Array]]


def config_for(workload: str, params: Mapping[str, int]) -> TransformerConfig:
    """The model of a transformer workload: bert's, or GPT-2's for gpt and generate."""
    return transformer_config("bert" if workload == "bert" else "gpt", params)


def example_batch(
    config: TransformerConfig, batch: int, seq_len: int, key: Array
) -> tuple[Array, Array]:
    """Synthetic (tokens, labels), each (batch, seq_len) int32 (see the module docstring)."""
    token_key, label_key = jax.random.split(key)
    tokens = jax.random.randint(token_key, (batch, seq_len), 0, config.vocab, jnp.int32)
    labels = jax.random.randint(label_key, (batch, seq_len), 0, config.vocab, jnp.int32)
    if config.model == "bert":
        keep = np.zeros(seq_len, bool)
        keep[list(mlm_positions(seq_len))] = True
        labels = jnp.where(keep, labels, IGNORED_LABEL)
    return tokens, labels


def language_model_loss(logits: Array, labels: Array) -> Array:
    """Mean softmax cross-entropy over the labelled positions, in float32 (PyTorch's
    cross_entropy with ignore_index)."""
    labelled = labels != IGNORED_LABEL
    losses = example_losses(logits, jnp.where(labelled, labels, 0))
    return jnp.sum(jnp.where(labelled, losses, 0.0)) / jnp.sum(labelled)


def make_train_fn(model: Transformer, optimizer: optax.GradientTransformation) -> TrainFn:
    def train(
        params: Variables, opt_state: optax.OptState, tokens: Array, labels: Array
    ) -> tuple[Variables, optax.OptState, Array]:
        def loss_fn(p: Variables) -> Array:
            return language_model_loss(model.logits(p, tokens), labels)

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    return train


class TransformerLoop:
    """Keeps parameters and optimizer state between steps, donated to each (jit)."""

    def __init__(
        self,
        model: Transformer,
        params: Variables,
        optimizer: optax.GradientTransformation,
        mode: str,
    ) -> None:
        self._step = compile_fn(make_train_fn(model, optimizer), mode, donate_argnums=(0, 1))
        self._carry = (params, optimizer.init(params))

    def __call__(self, tokens: Array, labels: Array) -> Array:
        params, opt_state, loss = self._step(*self._carry, tokens, labels)
        self._carry = (params, opt_state)
        return loss


def _heads_struct(
    config: TransformerConfig, batch: int, seq: int, dtype: jnp.dtype
) -> jax.ShapeDtypeStruct:
    return jax.ShapeDtypeStruct((batch, seq, config.heads, config.head_dim), dtype)


def build_step(
    spec: WorkloadSpec, dtype: jnp.dtype, device: jax.Device
) -> tuple[Callable[[], object], str]:
    """bert or gpt: the step (inference or training) and the attention kernel it runs."""
    config = config_for(spec.workload.name, spec.params)
    train, seq_len = spec.phase == "train", spec.params["seq_len"]
    struct = _heads_struct(config, spec.batch_size, seq_len, dtype)
    chosen = attention.choose(device, struct, struct, causal=config.causal, train=train)
    model = Transformer(config, chosen)
    params = model.init(jax.random.PRNGKey(spec.seed), dtype)
    tokens, labels = example_batch(config, spec.batch_size, seq_len, data_key(spec.seed))
    # Everything exists before the first timed call (see plugin._model_step).
    jax.block_until_ready((params, tokens, labels))
    if not train:
        infer = compile_fn(model.logits, spec.mode)
        return lambda: infer(params, tokens), chosen.kernel
    loop = TransformerLoop(model, params, sgd(0.01, 0.9), spec.mode)
    return lambda: loop(tokens, labels), chosen.kernel


def build_generation(
    spec: WorkloadSpec, dtype: jnp.dtype, device: jax.Device
) -> tuple[GenerationSteps, dict[str, str]]:
    """generate: a fresh GPT-2, a random prompt and a cache for prompt_len + new_tokens."""
    params, batch = spec.params, spec.batch_size
    config = config_for("generate", params)
    prompt_len, new_tokens = params["prompt_len"], params["new_tokens"]
    length = prompt_len + new_tokens
    prompt_heads = _heads_struct(config, batch, prompt_len, dtype)
    prefill = attention.choose(device, prompt_heads, prompt_heads, causal=True)
    one, cached = (
        _heads_struct(config, batch, 1, dtype),
        _heads_struct(config, batch, length, dtype),
    )
    decode = attention.choose(device, one, cached, masked=True)
    model = Transformer(config)
    weights = model.init(jax.random.PRNGKey(spec.seed), dtype)
    prompt = jax.random.randint(
        data_key(spec.seed), (batch, prompt_len), 0, config.vocab, jnp.int32
    )
    run = Generator(model, weights, prompt, length, prefill, decode)
    return run.steps(new_tokens), run.settings()


# ------------------------------------------------------------------------- reference methods


def canonical_weights(
    name: str, seed: int, params: Mapping[str, int] | None = None
) -> dict[str, np.ndarray]:
    """A fresh model's weights under the checkpoint names; `params` shape it (a workload's
    resolved parameters; None: the catalogue's defaults)."""
    if not params:
        from fwbench.spec import load_catalogue

        params = load_catalogue().get(name).resolve_params({})
    model = Transformer(transformer_config(name, params))
    return model.to_canonical(model.init(jax.random.PRNGKey(seed)))


def equivalence(case: EquivalenceCase) -> EquivalenceResult:
    """EquivalenceCase's steps for bert or gpt (the language-model loss), and for gpt with
    new_tokens the generate workload's greedy decoding (Generator, the benchmark's code) on
    the loaded weights before the optimizer step."""
    model = Transformer(transformer_config(case.model, case.params))
    params = model.from_canonical(case.weights)
    tokens = jnp.asarray(np.asarray(case.inputs).astype(np.int32))
    labels = jnp.asarray(np.asarray(case.labels).astype(np.int32))
    eval_logits = jax.jit(model.logits)(params, tokens)
    generated = gaps = None
    if case.new_tokens:
        if case.model != "gpt":
            raise ValueError(f"{case.model}: generation is gpt's only")
        run = Generator(model, params, tokens, tokens.shape[1] + case.new_tokens, keep_gaps=True)
        run.steps(case.new_tokens).generate()
        generated = np.stack([np.asarray(t) for t in run.tokens], axis=1).astype(np.int64)
        gaps = np.stack([np.asarray(g) for g in run.gaps], axis=1).astype(np.float32)
    optimizer = optimizer_for(case.optimizer)

    def loss_fn(p: Variables) -> Array:
        return language_model_loss(model.logits(p, tokens), labels)

    def step(p: Variables) -> tuple[Array, Array]:
        before, grads = jax.value_and_grad(loss_fn)(p)
        updates, _ = optimizer.update(grads, optimizer.init(p), p)
        return before, loss_fn(optax.apply_updates(p, updates))

    loss_before, loss_after = jax.jit(step)(params)
    return EquivalenceResult(
        param_count=model.trainable_count(),
        eval_logits=np.asarray(eval_logits, np.float32),
        loss_before=float(loss_before),
        loss_after=float(loss_after),
        generated=generated,
        generated_gaps=gaps,
    )
