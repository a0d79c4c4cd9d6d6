"""The commit-msg hook (.pre-commit-config.yaml; docs/contributing.md says why): a subject of
at most 72 characters that says what changed, a blank line, then a body that says why and what
was measured. Merges, reverts and fixup!/squash! commits need no body. Standard library only.

    python .ci/commit_msg.py MESSAGE_FILE     exit 1, saying what is wrong, when it breaks a rule
"""

from __future__ import annotations

import sys
from pathlib import Path

MAX_SUBJECT = 72
NO_BODY_NEEDED = ("Merge ", "Revert ", "fixup! ", "squash! ", "amend! ")


def problems(message: str) -> list[str]:
    """What is wrong with `message` (git's comment lines and its scissors cut ignored)."""
    text = message.split("# ------------------------ >8 ------------------------")[0]
    lines = [line.rstrip() for line in text.splitlines() if not line.startswith("#")]
    while lines and not lines[-1]:
        lines.pop()
    if not lines or not lines[0].strip():
        return ["the subject (first line) is empty: say what changed"]
    subject, found = lines[0], []
    if len(subject) > MAX_SUBJECT:
        found.append(
            f"the subject is {len(subject)} characters; at most {MAX_SUBJECT}: say what changed, "
            "and why in the body"
        )
    if len(lines) > 1 and lines[1]:
        found.append("the second line must be blank: the subject, a blank line, then the body")
    body = [line for line in lines[2:] if line.strip()]
    if not body and not subject.startswith(NO_BODY_NEEDED):
        found.append(
            "no body: after a blank line, say why the change was made and what was measured"
        )
    return found


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: commit_msg.py MESSAGE_FILE", file=sys.stderr)
        return 2
    found = problems(Path(argv[1]).read_text(encoding="utf-8"))
    for problem in found:
        print(f"commit message: {problem}", file=sys.stderr)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
