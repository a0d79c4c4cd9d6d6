"""The transformer workloads in PyTorch (torch_plugin/transformers.py): the published models'
parameter counts and checkpoint names, the catalogue's FLOPs against PyTorch's own
FlopCounterMode, greedy generation on the KV cache against the full forward pass, the attention
op's fused and plain kernels against each other, and the settings each row reports."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from torch.utils.flop_counter import FlopCounterMode

from fwbench.runtime.architectures import transformer_parameters
from fwbench.runtime.plugin import PluginContext, WorkloadSpec
from fwbench.spec import load_catalogue
from fwbench.spec.catalogue import evaluate_expression
from fwbench.torch_plugin import transformers
from fwbench.torch_plugin.plugin import TorchPlugin

# torch.compile imports modules that still use torch.jit.script_method internally.
pytestmark = pytest.mark.filterwarnings(
    "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning"
)
CATALOGUE = load_catalogue()
SHAPES_FILE = Path(__file__).parents[1] / "equivalence" / "transformer_shapes.json"
SMALL = {"layers": 2, "hidden": 64, "heads": 4, "vocab": 500, "context": 128, "seq_len": 16}


def _params(workload: str, given: dict[str, int]) -> dict[str, int]:
    definition = CATALOGUE.get(workload)
    return definition.resolve_params({k: v for k, v in given.items() if k in definition.params})


def _model(name: str, given: dict[str, int]) -> torch.nn.Module:
    torch.manual_seed(0)
    return transformers.build_transformer(transformers.config_for(name, _params(name, given)))


@pytest.mark.parametrize(("name", "published"), [("bert", 109_514_298), ("gpt", 124_439_808)])
def test_default_shapes_have_the_published_parameter_counts(name: str, published: int) -> None:
    model = _model(name, {})
    assert transformers.parameter_count(model) == published
    formula = CATALOGUE.get(name).parameters
    assert evaluate_expression(formula, _params(name, {})) == published


@pytest.mark.parametrize("name", ["bert", "gpt"])
def test_small_shapes_count_as_the_formula_says(name: str) -> None:
    params = _params(name, SMALL)
    model = _model(name, SMALL)
    config = transformers.config_for(name, params)
    assert transformers.parameter_count(model) == transformer_parameters(config)
    assert transformers.parameter_count(model) == evaluate_expression(
        CATALOGUE.get(name).parameters, params
    )


def test_weights_carry_hugging_faces_checkpoint_names() -> None:
    bert = set(_model("bert", SMALL).state_dict())
    for key in (
        "bert.embeddings.word_embeddings.weight",
        "bert.embeddings.token_type_embeddings.weight",
        "bert.encoder.layer.1.attention.self.query.weight",
        "bert.encoder.layer.0.attention.output.LayerNorm.bias",
        "bert.encoder.layer.0.intermediate.dense.weight",
        "bert.encoder.layer.0.output.dense.bias",
        "cls.predictions.bias",
        "cls.predictions.transform.dense.weight",
    ):
        assert key in bert, key
    gpt = _model("gpt", SMALL).state_dict()
    for key in (
        "transformer.wte.weight",
        "transformer.h.1.attn.c_attn.weight",
        "transformer.h.0.mlp.c_proj.bias",
        "transformer.ln_f.weight",
    ):
        assert key in gpt, key
    assert gpt["transformer.h.0.attn.c_attn.weight"].shape == (3 * 64, 64)  # (out, in)
    # Tied: the decoder and the LM head are the word embeddings, not weights of their own.
    assert not any("decoder" in k or "lm_head" in k for k in (*bert, *gpt))


def _count(fn, *args) -> int:
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        fn(*args)
    return counter.get_total_flops()


@pytest.fixture
def plain(monkeypatch: pytest.MonkeyPatch) -> None:
    """scaled_dot_product_attention as its three operations: FlopCounterMode counts nothing
    for the fused CPU kernel, but counts matmuls."""

    def attend(q, k, v, attn_mask=None, is_causal=False):  # type: ignore[no-untyped-def]
        assert attn_mask is None
        return transformers.plain_attention(q, k, v, is_causal)

    monkeypatch.setattr(F, "scaled_dot_product_attention", attend)


@pytest.mark.usefixtures("plain")
def test_bert_flops_are_what_pytorch_counts() -> None:
    params = _params("bert", SMALL)
    tokens = torch.randint(0, 500, (1, params["seq_len"]))
    counted = _count(_model("bert", SMALL), tokens)
    assert CATALOGUE.flops_per_item("bert", "infer", params) == counted


@pytest.mark.usefixtures("plain")
def test_gpt_flops_are_what_pytorch_counts_less_the_masked_half() -> None:
    """The plain products compute every (query, key) pair and mask the later ones; the
    catalogue charges only the s(s+1)/2 a causal row uses: 2 x hidden x s(s-1) per layer
    fewer."""
    params = _params("gpt", SMALL)
    s, h = params["seq_len"], params["hidden"]
    counted = _count(_model("gpt", SMALL), torch.randint(0, 500, (1, s)))
    masked = params["layers"] * 2 * h * s * (s - 1)
    assert CATALOGUE.flops_per_item("gpt", "infer", params) == counted - masked


@pytest.mark.parametrize("causal", [0, 1])
def test_the_plain_kernel_agrees_with_the_fused_one(causal: int) -> None:
    q, k, v = (torch.randn(2, 3, 10, 8, dtype=torch.float64) for _ in range(3))
    fused = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
    torch.testing.assert_close(transformers.plain_attention(q, k, v, bool(causal)), fused)
    params = {"heads": 3, "seq_len": 10, "head_dim": 8, "causal": 0}
    counted = _count(transformers.plain_attention, q[:1], k[:1], v[:1])
    assert CATALOGUE.flops_per_item("attention", "infer", params) == counted


@pytest.fixture(scope="module")
def plugin() -> TorchPlugin:
    return TorchPlugin(PluginContext(device="cpu"))


def _spec(name: str, phase: str, mode: str, given: dict[str, int], batch: int = 2) -> WorkloadSpec:
    return WorkloadSpec(
        CATALOGUE.get(name), phase, batch, "float32", _params(name, given), 0, 0, mode
    )


@pytest.mark.parametrize("mode", ["eager", "compile"])
def test_greedy_generation_on_the_cache_is_the_full_forwards_argmax(mode: str) -> None:
    params = _params("generate", {**SMALL, "prompt_len": 7, "new_tokens": 9})
    config = transformers.config_for("generate", params)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(config)
    for weight in model.parameters():  # larger weights: varied tokens, not one repeated
        if weight.dim() == 2:
            weight.data.mul_(4)
    wrap = (lambda fn: fn) if mode == "eager" else torch.compile
    steps, run = transformers.build_generation(
        params,
        3,
        torch.float32,
        torch.device("cpu"),
        torch.Generator().manual_seed(1),
        mode,
        wrap,
        model=model,
        keep_gaps=True,
    )
    assert steps.decode_steps == 8
    steps.generate()
    generated = torch.stack(run.tokens, dim=1)
    assert generated.shape == (3, 9) and len(set(generated.flatten().tolist())) > 3
    sequence = torch.cat([run.prompt, generated], dim=1)
    with torch.no_grad():
        full = model.eval()(sequence[:, :-1])
    assert torch.equal(full[:, 6:].argmax(dim=-1), generated)
    steps.generate()  # a second generation starts over: the same tokens
    assert torch.equal(torch.stack(run.tokens, dim=1), generated)


def test_each_workload_runs_and_names_its_kernel(plugin: TorchPlugin) -> None:
    small = {**SMALL, "head_dim": 8, "prompt_len": 8, "new_tokens": 4}
    for name, modes in (
        ("attention", ("eager", "plain")),
        ("bert", ("eager",)),
        ("gpt", ("eager",)),
    ):
        for phase in ("train", "infer"):
            for mode in modes:
                built = plugin.build(_spec(name, phase, mode, small))
                plugin.synchronize(built.step())
                kernel = built.settings.extra["attention_kernel"]
                expected = "plain:" if mode == "plain" else "sdpa:"
                assert kernel.startswith(expected), (name, phase, mode, kernel)
    built = plugin.build(_spec("generate", "infer", "eager", small))
    assert built.generation is not None and built.generation.decode_steps == 3
    extra = built.settings.extra
    assert extra["kv_cache"].startswith("preallocated for 12 positions; each step attends over")
    assert int(extra["kv_cache_allocated_bytes"]) == 2 * 2 * 2 * 12 * 64 * 4  # K+V, layers


def test_a_training_step_lowers_the_language_model_loss(plugin: TorchPlugin) -> None:
    for name in ("bert", "gpt"):
        built = plugin.build(_spec(name, "train", "eager", SMALL))
        losses = [float(built.step().detach()) for _ in range(3)]
        assert losses[2] < losses[0], (name, losses)


def test_generate_is_inference_only_and_the_op_has_a_plain_mode(plugin: TorchPlugin) -> None:
    capabilities = plugin.describe().capabilities
    assert capabilities["generate"].phases == ("infer",)
    assert capabilities["attention"].modes == ("eager", "compile", "plain")
    assert capabilities["gpt"].modes == ("eager", "compile")


def test_the_checked_in_listing_is_torchs_state_dict() -> None:
    """tests/equivalence/transformer_shapes.json: names, shapes and order the TensorFlow and
    JAX plugins' tests hold their canonical weights to, in environments without torch."""
    listed = json.loads(SHAPES_FILE.read_text())
    for name in ("bert", "gpt"):
        state = _model(name, listed["params"]).state_dict()
        assert {k: list(v.shape) for k, v in state.items()} == listed[name]
        assert list(state) == list(listed[name])


def test_autocast_keeps_float32_weights_and_says_so() -> None:
    """FWBENCH_AUTOCAST=on: a bfloat16 model cell holds float32 weights and runs under
    torch.autocast (its logits come out in bfloat16), its row says so; a single op stays pure
    and says why."""
    plugin = TorchPlugin(PluginContext(device="cpu", autocast=True))
    spec = WorkloadSpec(
        CATALOGUE.get("gpt"), "train", 2, "bfloat16", _params("gpt", SMALL), 0, 0, "eager"
    )
    built = plugin.build(spec)
    assert built.settings.extra["dtype_policy"].startswith("autocast: float32 weights")
    loss = built.step()
    assert loss.dtype == torch.float32 and torch.isfinite(loss)
    infer = plugin.build(dataclasses.replace(spec, phase="infer"))
    assert infer.step().dtype == torch.bfloat16  # the products ran in bfloat16
    generate = plugin.build(
        WorkloadSpec(
            CATALOGUE.get("generate"),
            "infer",
            1,
            "bfloat16",
            _params("generate", {**SMALL, "prompt_len": 4, "new_tokens": 3}),
            0,
            0,
            "eager",
        )
    )
    assert generate.generation is not None
    generate.generation.generate()
    assert "autocast" in generate.settings.extra["dtype_policy"]
    gemm = WorkloadSpec(
        CATALOGUE.get("gemm"), "infer", 1, "bfloat16", {"m": 8, "n": 8, "k": 8}, 0, 0, "eager"
    )
    assert (
        "applies to the benchmark steps of models"
        in (plugin.build(gemm).settings.extra["dtype_policy"])
    )
