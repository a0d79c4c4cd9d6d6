"""The gpt and generate workloads on a llama.cpp Session.

gpt (infer): the cell's batch of seq_len-token sequences as one llama_batch (sequence s at
positions 0..seq_len-1, its own KV stream), logits kept at every position; each step empties
the cache first, so every step computes the same thing.

generate: greedy decoding as the other plugins' Generator. The prefill is one llama_batch of
every sequence's prompt (logits at each prompt's last position) after the cache is emptied;
each decode step one llama_batch of one token per sequence at the next position. The argmax
(and, for the equivalence test, the top-1 minus top-2 gap) is taken in NumPy on llama.cpp's
logits buffer, as the other plugins take theirs in their framework."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from fwbench.llamacpp_plugin.session import Batch, Session, sequences_batch
from fwbench.runtime.plugin import GenerationSteps


class FullSequences:
    """The gpt workload's inference: every position's logits of a batch of sequences."""

    def __init__(self, session: Session, tokens: np.ndarray) -> None:
        self.session, self.shape = session, tokens.shape
        self.batch = sequences_batch(np.asarray(tokens, np.int32), "all")

    def step(self) -> Session:
        self.session.clear()
        self.session.decode(self.batch)
        return self.session

    def logits(self) -> np.ndarray:
        """(sequences, length, vocab) float32, a copy."""
        self.step()
        rows = self.shape[0] * self.shape[1]
        return self.session.logits(rows).reshape(*self.shape, -1).copy()


class Generator:
    """Greedy generation of `new_tokens` for every prompt of `prompts` (sequences, length).
    `prefill()` starts over and makes the first token, `decode()` each next one; each returns
    the session (synchronize's handle). With `keep_gaps`, `tokens` and `gaps` keep each step's
    tokens and top-1 minus top-2 logit."""

    def __init__(
        self, session: Session, prompts: np.ndarray, new_tokens: int, keep_gaps: bool = False
    ) -> None:
        self.session, self.keep_gaps = session, keep_gaps
        self.sequences, self.prompt_len = prompts.shape
        self.length = self.prompt_len + new_tokens
        self.prefill_batch = sequences_batch(np.asarray(prompts, np.int32), "last")
        self.step_batch = Batch(self.sequences)
        every = np.arange(self.sequences)
        self.step_batch.fill(every, every, every, np.ones(self.sequences, np.int8))
        self.position = 0
        self.tokens: list[np.ndarray] = []
        self.gaps: list[np.ndarray] = []

    def _choose(self) -> Session:
        logits = self.session.logits(self.sequences)
        token = logits.argmax(axis=1)
        self.step_batch.tokens[: self.sequences] = token
        if self.keep_gaps:
            top = np.sort(logits, axis=1)[:, -2:]
            self.tokens.append(token.astype(np.int64))
            self.gaps.append(top[:, 1] - top[:, 0])
        return self.session

    def prefill(self) -> Session:
        self.tokens, self.gaps = [], []
        self.session.clear()
        self.session.decode(self.prefill_batch)
        self.position = self.prompt_len
        return self._choose()

    def decode(self) -> Session:
        if self.position >= self.length - 1:
            raise RuntimeError(f"the generation holds {self.length} positions, all filled")
        self.step_batch.positions[: self.sequences] = self.position
        self.session.decode(self.step_batch)
        self.position += 1
        return self._choose()

    def generated(self) -> tuple[np.ndarray, np.ndarray]:
        """(sequences, steps) int64 tokens and float32 gaps of the last generation."""
        return np.stack(self.tokens, axis=1), np.stack(self.gaps, axis=1).astype(np.float32)


def generation_steps(run: Generator, params: Mapping[str, int]) -> GenerationSteps:
    return GenerationSteps(run.prefill, run.decode, params["new_tokens"] - 1)
