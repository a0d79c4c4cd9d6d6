"""The transformer entries of the catalogue (attention, bert, gpt, generate): their FLOPs and
parameter counts against the published models and a count written out by hand, the decode
model of generation, and the rules between parameters that refuse a shape before anything
runs. Each framework's own parameter count is checked against these formulas in its plugin's
tests and in tests/equivalence."""

from __future__ import annotations

from importlib import resources

import pytest

from fwbench.runtime.architectures import (
    mlm_positions,
    transformer_config,
    transformer_parameters,
)
from fwbench.spec import Catalogue, CatalogueError, load_catalogue
from fwbench.spec.catalogue import evaluate_expression, evaluate_rule, parse_catalogue

SMALL = {"layers": 2, "hidden": 64, "heads": 4, "vocab": 500, "context": 128, "seq_len": 16}


@pytest.fixture(scope="module")
def catalogue() -> Catalogue:
    return load_catalogue()


def _parameters(catalogue: Catalogue, name: str, given: dict[str, int]) -> int:
    workload = catalogue.get(name)
    params = workload.resolve_params({k: v for k, v in given.items() if k in workload.params})
    return int(evaluate_expression(workload.parameters, params))


def test_default_shapes_are_the_published_models(catalogue: Catalogue) -> None:
    # Hugging Face's BertForMaskedLM (bert-base-uncased) and GPT2LMHeadModel (gpt2).
    assert _parameters(catalogue, "bert", {}) == 109_514_298
    assert _parameters(catalogue, "gpt", {}) == 124_439_808
    bert = catalogue.get("bert").resolve_params({})
    assert (bert["layers"], bert["hidden"], bert["heads"], bert["seq_len"]) == (12, 768, 12, 128)
    assert bert["vocab"] == 30522
    gpt = catalogue.get("gpt").resolve_params({})
    assert (gpt["layers"], gpt["hidden"], gpt["heads"], gpt["vocab"]) == (12, 768, 12, 50257)
    assert gpt["context"] == 1024


@pytest.mark.parametrize("given", [{}, SMALL, {**SMALL, "layers": 1, "vocab": 7, "hidden": 8}])
@pytest.mark.parametrize("name", ["bert", "gpt"])
def test_the_formula_is_the_count_written_out(catalogue: Catalogue, name: str, given) -> None:
    workload = catalogue.get(name)
    params = workload.resolve_params({k: v for k, v in given.items() if k in workload.params})
    config = transformer_config(name, params)
    assert _parameters(catalogue, name, given) == transformer_parameters(config)


def _gpt_forward(layers: int, hidden: int, vocab: int, seq: int, logits: int) -> float:
    """FLOPs of GPT-2's forward over `seq` tokens counted layer by layer, causal attention
    counting the (query, key) pairs it uses; LM head for the last `logits` positions."""
    dense = 2 * hidden * (3 * hidden) + 2 * hidden * hidden + 2 * 2 * hidden * 4 * hidden
    pairs = seq * (seq + 1) / 2
    attention = 2 * 2 * hidden * pairs  # QK^T and PV, all heads together
    return layers * (seq * dense + attention) + logits * 2 * hidden * vocab


def test_gpt_flops_count_every_dense_product_and_the_causal_pairs(catalogue: Catalogue) -> None:
    params = catalogue.get("gpt").resolve_params(SMALL)
    assert catalogue.flops_per_item("gpt", "infer", params) == pytest.approx(
        _gpt_forward(2, 64, 500, 16, logits=16)
    )


def test_bert_flops_count_attention_both_ways_and_the_mlm_head(catalogue: Catalogue) -> None:
    h, s, v, layers = 64, 16, 500, 2
    dense = s * (2 * h * 3 * h + 2 * h * h + 2 * 2 * h * 4 * h)
    attention = 2 * 2 * h * s * s
    head = s * (2 * h * h + 2 * h * v)
    params = catalogue.get("bert").resolve_params(
        {k: v for k, v in SMALL.items() if k != "context"}
    )
    assert catalogue.flops_per_item("bert", "infer", params) == layers * (dense + attention) + head


def test_generation_flops_are_a_prefill_and_its_decode_steps(catalogue: Catalogue) -> None:
    layers, hidden, vocab, prompt, new = 2, 64, 500, 10, 6
    params = {k: v for k, v in SMALL.items() if k != "seq_len"}
    params |= {"prompt_len": prompt, "new_tokens": new}
    dense = 2 * hidden * 3 * hidden + 2 * hidden * hidden + 2 * 2 * hidden * 4 * hidden
    expected = _gpt_forward(layers, hidden, vocab, prompt, logits=1)
    for step in range(1, new):  # a token at position prompt + step - 1 sees prompt + step keys
        expected += layers * (dense + 2 * 2 * hidden * (prompt + step)) + 2 * hidden * vocab
    assert catalogue.flops_per_item("generate", "infer", params) == pytest.approx(expected)


def test_decode_moves_the_weights_each_step_and_the_growing_cache(catalogue: Catalogue) -> None:
    workload = catalogue.get("generate")
    params = workload.resolve_params(
        {
            "layers": 2,
            "hidden": 64,
            "heads": 4,
            "vocab": 500,
            "context": 128,
            "prompt_len": 10,
            "new_tokens": 6,
        }
    )
    assert workload.decode_steps(params) == 5
    assert workload.prompt_tokens(params) == 10
    gpt = transformer_parameters(transformer_config("gpt", params))
    weights = gpt - (128 - 1) * 64  # of the position table, one row a step
    cache = sum(2 * 2 * 64 * (10 + step) for step in range(1, 6))  # K and V, 2 layers
    batch = 3
    assert workload.decode_bytes(params, batch, "float32") == 4 * (5 * weights + batch * cache)
    assert workload.decode_bytes(params, batch, "bfloat16") == 2 * (5 * weights + batch * cache)
    assert workload.kv_cache_bytes(params, batch, "float32") == 4 * batch * 2 * 2 * 64 * 15
    assert workload.decode_bytes(params, 1, "int4") is None
    # weights held quantised (1.0625 bytes each, Q8_0's), the cache in the row's dtype
    quantised = 1.0625 * 5 * weights + 4 * batch * cache
    assert workload.decode_bytes(params, batch, "float32", 1.0625) == quantised


@pytest.mark.parametrize(
    ("workload", "given", "field", "says"),
    [
        ("bert", {"heads": 5}, "params.heads", "heads must divide hidden (hidden=768)"),
        ("gpt", {"seq_len": 2048}, "params.seq_len", "must fit the context (context=1024)"),
        ("generate", {"prompt_len": 1000}, "params.new_tokens", "context=1024, prompt_len=1000"),
        ("gpt", {"layers": 0}, "params.layers", "allowed 1..128"),
        ("attention", {"causal": 2}, "params.causal", "allowed 0..1"),
    ],
)
def test_a_shape_out_of_its_rules_is_refused_naming_the_parameter(
    catalogue: Catalogue, workload: str, given: dict[str, int], field: str, says: str
) -> None:
    with pytest.raises(CatalogueError) as error:
        catalogue.get(workload).resolve_params(given)
    assert error.value.field == field
    assert str(error.value).startswith(f"{field}=") and says in str(error.value)


def test_rules_are_one_comparison_and_name_known_parameters() -> None:
    assert evaluate_rule("a % b == 0", {"a": 6, "b": 3})
    assert not evaluate_rule("a + b <= 4", {"a": 3, "b": 2})
    with pytest.raises(CatalogueError, match="one comparison"):
        evaluate_rule("a < b < c", {"a": 1, "b": 2, "c": 3})
    with pytest.raises(CatalogueError, match="unsupported"):
        evaluate_rule("__import__('os') == 0", {})
    entry = (
        '[workloads.x]\nkind = "op"\ndescription = "d"\nitem = "i"\nphases = ["infer"]\n'
        'max_batch_size = 1\nflops_forward = "1"\nparams.a = {{ default = 2, min = 1, max = 9 }}\n'
        'constraints = [{{ rule = "{rule}", param = "a", says = "s" }}]\n'
    )
    text = (resources.files("fwbench.spec") / "workloads.toml").read_text("utf-8")
    base = text.split("[workloads.gemm]")[0]
    with pytest.raises(CatalogueError, match="names unknown parameters"):
        parse_catalogue(base + entry.format(rule="a < zz"))
    with pytest.raises(CatalogueError, match="out of range"):  # the default breaks its own rule
        parse_catalogue(base + entry.format(rule="a > 5"))


def test_only_generation_has_a_decode_model(catalogue: Catalogue) -> None:
    assert [n for n, w in catalogue.workloads.items() if w.generation] == ["generate"]
    assert catalogue.get("generate").model == "gpt" and catalogue.get("generate").phases == (
        "infer",
    )
    with pytest.raises(CatalogueError, match="not a generation"):
        catalogue.get("gpt").decode_steps({})


def test_masked_lm_positions_are_fifteen_percent_evenly_spread() -> None:
    assert len(mlm_positions(128)) == 19 and mlm_positions(128)[:3] == (0, 6, 13)
    assert mlm_positions(1) == (0,)
    assert all(0 <= p < 512 for p in mlm_positions(512)) and len(mlm_positions(512)) == 77


def test_causal_attention_counts_half_the_pairs_and_their_diagonal(catalogue: Catalogue) -> None:
    base = {"heads": 2, "seq_len": 8, "head_dim": 4}
    full = catalogue.flops_per_item("attention", "infer", {**base, "causal": 0})
    causal = catalogue.flops_per_item("attention", "infer", {**base, "causal": 1})
    assert full == 4 * 2 * 4 * 64
    assert causal == 4 * 2 * 4 * (8 * 9 / 2)
