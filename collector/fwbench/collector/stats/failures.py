"""Processes that cannot stand in a verdict: a comparison one of whose sides had a process
fail in its cell, or run otherwise than asked, is never called, by `compare`
(analysis/compare.py) or by `--until-decided` (run/decide.py).

- A failed process: the processes that finished cannot stand for one that did not. A process
  that ran out of time or memory is the slow or the big one, and leaving it out would favour
  the side it failed on.
- A process that ran otherwise than asked (the row's `settings_mismatch`: another thread
  count, dtype or mode than the one asked for): its figure is true for what ran, but a
  verdict from it would answer another question than the one asked.
- A process whose outputs differ from the reference's (a user's model file, the row's
  `outputs_match` False): it computed something else, so its speed is no answer.

An interfered process (run/interference.py: other processes took the agent's CPUs while it was
timed) is different: what slowed it came from outside and says nothing of the agent, so it is
left out and the comparison is made from the others; only a side with no other process is
never called."""

from __future__ import annotations

FAILED = "failed"  # a row's status (store/schema.py STATUSES)
FAILURE_TEXT = 160  # characters of a failure kept where a verdict names it
FAILED_NOTE = (
    "the processes that finished cannot stand for the failed ones (one that ran out of time "
    "or memory is the slow or the big one): never called; measure again once the failure is "
    "understood"
)


def failure_text(code: str | None, error: str | None) -> str:
    """A failed row's "ERROR_CODE: error", cut to FAILURE_TEXT characters."""
    text = ": ".join(part for part in (code or "", " ".join((error or "").split())) if part)
    return text if len(text) <= FAILURE_TEXT else text[: FAILURE_TEXT - 3] + "..."


OTHERWISE_NOTE = (
    "what ran is not what was asked, so a verdict would answer another question: never called; "
    "see the rows' settings_mismatch"
)


DIFFERED_NOTE = (
    "a process's outputs differ from the reference's (the rows' outputs_note): the two did not "
    "compute the same thing, so their speed is not compared: never called (docs/your-model.md)"
)


INTERFERED_NOTE = (
    "other processes took the agent's CPUs while every process of a side was timed: never "
    "called; measure again on a quiet host (`collector doctor` shows what runs; `--quiet-host "
    "60` waits for quiet before each cell; `--until-decided` measures interfered cells again)"
)
