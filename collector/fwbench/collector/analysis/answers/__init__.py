"""What a run found, said first: `collector compare`, the end-of-run summary and the report open
with it. The decided verdicts come first, one line each ("tf-eigen is slower than tf-mkl in
resnet18 infer bs=1: 0.89x [0.83, 0.97]"); then what stayed undecided, grouped by its one
reason, each reason once with the command that would likely decide it, not repeated on every
row (the first run of a new user used to open with 36 comparisons, each with the same
five-line note). The per-comparison tables follow, their repeated notes as numbered notes
under the table (footnoted).

One answer per question: a run measured `--until-decided` answers with its sequential
decisions (decisions.py), whose error rates hold over the looks that made them. They are the
verdicts of the comparisons they cover, in every output (with_decisions); the pooled
fixed-level statistics of those comparisons still describe (speedup, interval) but call
nothing, since a fixed-level test re-run after the looks would not hold its rates. A
comparison the run did not ask (an A/A twin against another agent's baseline) keeps its
fixed-level verdict, labelled so."""

from __future__ import annotations

from fwbench.collector.analysis.answers.build import (
    answers,
    run_answers,
    run_comparisons,
    with_decisions,
)
from fwbench.collector.analysis.answers.found import (
    FIXED_LEVEL,
    SEQUENTIAL,
    Answers,
    Found,
    Undecided,
    answers_title,
    footnoted,
    markdown_answers,
    repeated_phrases,
    rich_answers,
)
from fwbench.collector.analysis.answers.reasons import (
    MEASURED_REASON,
    ONE_PROCESS_REASON,
    rerun,
)

__all__ = [
    "FIXED_LEVEL",
    "MEASURED_REASON",
    "ONE_PROCESS_REASON",
    "SEQUENTIAL",
    "Answers",
    "Found",
    "Undecided",
    "answers",
    "answers_title",
    "footnoted",
    "markdown_answers",
    "repeated_phrases",
    "rerun",
    "rich_answers",
    "run_answers",
    "run_comparisons",
    "with_decisions",
]
