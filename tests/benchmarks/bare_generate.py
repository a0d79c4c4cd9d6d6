"""The bare-script side of the generation check: GPT-2 greedy decoding with a preallocated KV
cache timed the way a careful one-off script would (perf_counter_ns around the prefill and
each decode step; no gRPC, no runtime, no collector), in float32 on the CPU at the threads
torch picks. Run with the torch agent environment's python. Two implementations:

  --implementation plugin  the torch agent's own (fwbench.torch_plugin.transformers, eager):
                           the same computation, so fwbench against it is the harness's cost;
  --implementation own     written here in plain functional PyTorch, no fwbench import (weights
                           in a dict, F.linear and F.layer_norm): what a hand-tuned script gets,
                           so the agent against it is the cost of an idiomatic nn.Module model;
  --implementation huggingface
                           Hugging Face transformers' GPT2LMHeadModel.generate (greedy, its
                           default dynamic cache) on the same weights as `own`: what most
                           people run. `--overlay DIR` holds transformers (appended to sys.path,
                           after the environment's own torch and numpy); a streamer takes a
                           clock reading as each token appears, so the prefill is the time from
                           the prompt to the first token and each decode step the time between
                           two tokens (generate's own per-step work included).

Usage: python bare_generate.py --layers L --hidden H --heads N --vocab V --context C
           --prompt-len P --new-tokens T --batch B --warmup W --iterations I
           [--implementation plugin|own|huggingface [--overlay DIR]]
       -> JSON {"prefill_ns": [I values], "decode_ns": [I x (T - 1) values], "tokens": [...]}

The model is GPT-2's (pre-LayerNorm, tanh GELU, tied LM head, learned positions); each decode
step attends over the filled part of the cache (as the torch agent's eager mode).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import torch
import torch.nn.functional as F  # noqa: N812

SHAPE = ("layers", "hidden", "heads", "vocab", "context", "prompt_len", "new_tokens")


def init(layers: int, hidden: int, vocab: int, context: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)

    def normal(*shape: int) -> torch.Tensor:
        return torch.randn(*shape) * 0.02

    weights = {"wte": normal(vocab, hidden), "wpe": normal(context, hidden)}
    weights |= {"ln_f.w": torch.ones(hidden), "ln_f.b": torch.zeros(hidden)}
    for i in range(layers):
        weights |= {
            f"{i}.ln1.w": torch.ones(hidden),
            f"{i}.ln1.b": torch.zeros(hidden),
            f"{i}.qkv.w": normal(3 * hidden, hidden),
            f"{i}.qkv.b": torch.zeros(3 * hidden),
            f"{i}.proj.w": normal(hidden, hidden),
            f"{i}.proj.b": torch.zeros(hidden),
            f"{i}.ln2.w": torch.ones(hidden),
            f"{i}.ln2.b": torch.zeros(hidden),
            f"{i}.fc.w": normal(4 * hidden, hidden),
            f"{i}.fc.b": torch.zeros(4 * hidden),
            f"{i}.out.w": normal(hidden, 4 * hidden),
            f"{i}.out.b": torch.zeros(hidden),
        }
    return weights


def forward(w, tokens, start, keys, values, layers, heads):  # type: ignore[no-untyped-def]
    """Logits of the last position; the new keys and values go into the cache at `start`."""
    batch, length = tokens.shape
    hidden = w["wte"].shape[1]
    x = w["wte"][tokens] + w["wpe"][start : start + length]
    end = start + length
    for i in range(layers):
        h = F.layer_norm(x, (hidden,), w[f"{i}.ln1.w"], w[f"{i}.ln1.b"], 1e-5)
        q, k, v = F.linear(h, w[f"{i}.qkv.w"], w[f"{i}.qkv.b"]).split(hidden, dim=-1)
        q, k, v = (t.view(batch, length, heads, -1).transpose(1, 2) for t in (q, k, v))
        keys[i][:, :, start:end] = k
        values[i][:, :, start:end] = v
        causal = length > 1  # the prompt attends causally; one new token sees the whole past
        a = F.scaled_dot_product_attention(
            q, keys[i][:, :, :end], values[i][:, :, :end], is_causal=causal
        )
        a = a.transpose(1, 2).reshape(batch, length, hidden)
        x = x + F.linear(a, w[f"{i}.proj.w"], w[f"{i}.proj.b"])
        h = F.layer_norm(x, (hidden,), w[f"{i}.ln2.w"], w[f"{i}.ln2.b"], 1e-5)
        h = F.gelu(F.linear(h, w[f"{i}.fc.w"], w[f"{i}.fc.b"]), approximate="tanh")
        x = x + F.linear(h, w[f"{i}.out.w"], w[f"{i}.out.b"])
    x = F.layer_norm(x[:, -1], (hidden,), w["ln_f.w"], w["ln_f.b"], 1e-5)
    return F.linear(x, w["wte"])


def plugin_generation(args: argparse.Namespace) -> dict[str, list]:
    """The torch agent's generate workload, eager, timed here by hand."""
    from fwbench.torch_plugin import transformers

    params = {name: getattr(args, name) for name in SHAPE}
    torch.manual_seed(0)
    steps, _ = transformers.build_generation(
        params,
        args.batch,
        torch.float32,
        torch.device("cpu"),
        torch.Generator().manual_seed(1),
        "eager",
        lambda fn: fn,
    )
    prefill_ns: list[int] = []
    decode_ns: list[int] = []
    for iteration in range(args.warmup + args.iterations):
        start = time.perf_counter_ns()
        steps.prefill()
        end = time.perf_counter_ns()
        parts = [end - start]
        for _ in range(steps.decode_steps):
            start = end
            steps.decode()
            end = time.perf_counter_ns()
            parts.append(end - start)
        if iteration >= args.warmup:
            prefill_ns.append(parts[0])
            decode_ns += parts[1:]
    return {"prefill_ns": prefill_ns, "decode_ns": decode_ns, "tokens": []}


def huggingface_model(w: dict[str, torch.Tensor], args: argparse.Namespace):  # type: ignore[no-untyped-def]
    """Hugging Face's GPT-2 at this shape holding `w` (its Conv1D weights are (in, out): the
    transposes of F.linear's)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=args.vocab,
        n_positions=args.context,
        n_embd=args.hidden,
        n_layer=args.layers,
        n_head=args.heads,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        layer_norm_epsilon=1e-5,
    )
    model = GPT2LMHeadModel(config).eval()
    state = {"transformer.wte.weight": w["wte"], "transformer.wpe.weight": w["wpe"]}
    state |= {"transformer.ln_f.weight": w["ln_f.w"], "transformer.ln_f.bias": w["ln_f.b"]}
    ours = {"ln_1": "ln1", "ln_2": "ln2", "attn.c_attn": "qkv", "attn.c_proj": "proj"}
    ours |= {"mlp.c_fc": "fc", "mlp.c_proj": "out"}
    for i in range(args.layers):
        for theirs, mine in ours.items():
            weight = w[f"{i}.{mine}.w"]
            state[f"transformer.h.{i}.{theirs}.weight"] = weight if "ln" in mine else weight.T
            state[f"transformer.h.{i}.{theirs}.bias"] = w[f"{i}.{mine}.b"]
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    model.tie_weights()
    return model


class Clock:
    """A generate() streamer: a clock reading each time generate hands it tokens (the prompt
    first, then each new token of the whole batch)."""

    def __init__(self) -> None:
        self.readings: list[int] = []

    def put(self, _: torch.Tensor) -> None:
        self.readings.append(time.perf_counter_ns())

    def end(self) -> None:
        pass


def huggingface_generation(args: argparse.Namespace) -> dict[str, list]:
    sys.path.append(args.overlay)
    model = huggingface_model(init(args.layers, args.hidden, args.vocab, args.context), args)
    generator = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, args.vocab, (args.batch, args.prompt_len), generator=generator)
    prefill_ns: list[int] = []
    decode_ns: list[int] = []
    tokens: list[list[int]] = []
    with torch.inference_mode():
        for iteration in range(args.warmup + args.iterations):
            clock = Clock()
            out = model.generate(
                prompt,
                attention_mask=torch.ones_like(prompt),
                do_sample=False,
                max_new_tokens=args.new_tokens,
                min_new_tokens=args.new_tokens,
                pad_token_id=0,
                eos_token_id=None,
                streamer=clock,
            )
            assert len(clock.readings) == args.new_tokens + 1, len(clock.readings)
            steps = [b - a for a, b in zip(clock.readings, clock.readings[1:], strict=False)]
            if iteration >= args.warmup:
                prefill_ns.append(steps[0])
                decode_ns += steps[1:]
            tokens = out[:, args.prompt_len :].tolist()
    return {"prefill_ns": prefill_ns, "decode_ns": decode_ns, "tokens": tokens}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in (*SHAPE, "batch", "warmup", "iterations"):
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, required=True)
    parser.add_argument("--implementation", choices=("plugin", "own", "huggingface"), default="own")
    parser.add_argument("--overlay", default="", help="where transformers is (huggingface)")
    args = parser.parse_args()
    if args.implementation == "plugin":
        print(json.dumps(plugin_generation(args)))
        return
    if args.implementation == "huggingface":
        print(json.dumps(huggingface_generation(args)))
        return
    w = init(args.layers, args.hidden, args.vocab, args.context)
    generator = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, args.vocab, (args.batch, args.prompt_len), generator=generator)
    length = args.prompt_len + args.new_tokens
    shape = (args.batch, args.heads, length, args.hidden // args.heads)
    keys = [torch.zeros(shape) for _ in range(args.layers)]
    values = [torch.zeros(shape) for _ in range(args.layers)]
    prefill_ns: list[int] = []
    decode_ns: list[int] = []
    tokens: list[list[int]] = []
    with torch.inference_mode():
        for iteration in range(args.warmup + args.iterations):
            timed = iteration >= args.warmup
            start = time.perf_counter_ns()
            token = forward(w, prompt, 0, keys, values, args.layers, args.heads).argmax(-1)
            end = time.perf_counter_ns()
            generated = [token]
            if timed:
                prefill_ns.append(end - start)
            for step in range(args.new_tokens - 1):
                start = end
                position = args.prompt_len + step
                logits = forward(
                    w, token.unsqueeze(1), position, keys, values, args.layers, args.heads
                )
                token = logits.argmax(-1)
                end = time.perf_counter_ns()
                generated.append(token)
                if timed:
                    decode_ns.append(end - start)
            tokens = torch.stack(generated, dim=1).tolist()
    print(json.dumps({"prefill_ns": prefill_ns, "decode_ns": decode_ns, "tokens": tokens}))


if __name__ == "__main__":
    main()
