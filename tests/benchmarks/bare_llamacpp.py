"""llama.cpp's own figure for the generate workload's decode, run inside the llamacpp-cpu
environment by bench_llamacpp_anchor.py: the same GGUF file as the agent writes (the plugin's
gguf_model, same shape, seed and weight type), the same context options and thread count,
and the same greedy loop (the plugin's Generator); what is timed is llama.cpp's own counter,
llama_perf_context's t_eval_ms over n_eval one-token decodes (the time inside llama_decode),
reset before each round; and the same decode steps by this script's clock (the plugin's loop:
llama_decode, the logits' argmax in NumPy, the Python between them, with no harness around).
Prints one JSON object: each round's decode tokens per second by llama.cpp's counter
(decode_tokens_per_second) and by the script's clock (loop_tokens_per_second).
Batch 1 only: llama.cpp counts a llama_decode of one token as an eval and one of more tokens
(a step of several sequences) as prompt processing.

    PYTHON bare_llamacpp.py --layers 2 --hidden 128 --heads 4 --vocab 1000 --context 1024 \\
        --prompt-len 128 --new-tokens 128 --threads 2 --rounds 5 --generations 10
"""

from __future__ import annotations

import argparse
import json
import time

import llama_cpp as llama
import numpy as np

from fwbench.llamacpp_plugin.generation import Generator
from fwbench.llamacpp_plugin.gguf_model import fresh_weights
from fwbench.llamacpp_plugin.session import ContextOptions, Session
from fwbench.runtime.architectures import transformer_config


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    for name in ("layers", "hidden", "heads", "vocab", "context", "prompt-len", "new-tokens"):
        p.add_argument(f"--{name}", type=int, required=True)
    p.add_argument("--threads", type=int, required=True)
    p.add_argument("--weights", default="F32", choices=("F32", "F16", "Q8_0"))
    p.add_argument("--flash-attn", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--generations", type=int, default=10, help="per round")
    args = p.parse_args()
    shape = {"layers": args.layers, "hidden": args.hidden, "heads": args.heads}
    config = transformer_config("gpt", {**shape, "vocab": args.vocab, "context": args.context})
    length = args.prompt_len + args.new_tokens
    kv = "float16" if args.weights == "F16" else "float32"
    options = ContextOptions(1, length, args.prompt_len, args.threads, kv, args.flash_attn)
    session = Session(config, fresh_weights(config, args.seed), args.weights, options)
    prompts = np.random.default_rng(args.seed).integers(0, config.vocab, (1, args.prompt_len))
    run = Generator(session, prompts, args.new_tokens)
    run.prefill()  # warm-up
    rounds, loops = [], []
    for _ in range(args.rounds):
        llama.llama_perf_context_reset(session.context)
        looped = 0
        for _ in range(args.generations):
            run.prefill()
            start = time.perf_counter_ns()
            for _ in range(args.new_tokens - 1):
                run.decode()
            looped += time.perf_counter_ns() - start
        perf = llama.llama_perf_context(session.context)
        rounds.append(perf.n_eval / (perf.t_eval_ms / 1e3))  # one-token llama_decode calls
        loops.append(args.generations * (args.new_tokens - 1) / (looped / 1e9))
    print(json.dumps({"decode_tokens_per_second": rounds, "loop_tokens_per_second": loops}))


if __name__ == "__main__":
    main()
