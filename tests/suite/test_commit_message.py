"""The commit-msg hook (.ci/commit_msg.py, named in .pre-commit-config.yaml at the commit-msg
stage): a real git commit through it is refused for a long subject or a missing body and
accepted for a subject of at most 72 characters with a body; docs/contributing.md says why."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
HOOK = ROOT / ".ci" / "commit_msg.py"


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.org"}
    env |= {"GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.org"}
    return subprocess.run(
        ["git", *args], cwd=repo, env=env, capture_output=True, text=True, timeout=60
    )


def test_the_pre_commit_configuration_runs_the_hook_on_commit_messages() -> None:
    config = yaml.safe_load((ROOT / ".pre-commit-config.yaml").read_text())
    hooks = {hook["id"]: hook for repo in config["repos"] for hook in repo["hooks"]}
    hook = hooks["commit-message"]
    assert hook["stages"] == ["commit-msg"] and hook["entry"].endswith(".ci/commit_msg.py")


def test_git_refuses_a_long_subject_or_no_body_and_takes_a_good_message(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    assert _git(tmp_path, "init", "-q", str(repo)).returncode == 0
    hook = repo / ".git" / "hooks" / "commit-msg"
    hook.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{HOOK}" "$1"\n')
    hook.chmod(0o755)
    (repo / "a.txt").write_text("a\n")
    assert _git(repo, "add", "a.txt").returncode == 0
    long = _git(repo, "commit", "-q", "-m", "x" * 73, "-m", "Why: a test.")
    assert long.returncode != 0 and "the subject is 73 characters; at most 72" in long.stderr
    bare = _git(repo, "commit", "-q", "-m", "Add a.txt")
    assert bare.returncode != 0 and "no body" in bare.stderr
    glued = _git(repo, "commit", "-q", "-m", "Add a.txt\nWhy: glued to the subject.")
    assert glued.returncode != 0 and "second line must be blank" in glued.stderr
    good = _git(repo, "commit", "-q", "-m", "Add a.txt", "-m", "Why: the test needs a file.")
    assert good.returncode == 0, good.stderr
    assert _git(repo, "log", "--format=%s").stdout.split("\n")[0] == "Add a.txt"


def test_this_repositorys_recent_commits_keep_the_rule() -> None:
    """The last commits (of this session's work on, 2026-12-06) pass the hook's check."""
    sys.path.insert(0, str(HOOK.parent))
    try:
        from commit_msg import problems
    finally:
        sys.path.pop(0)
    shown = subprocess.run(
        ["git", "log", "-5", "--format=%B%x00"], cwd=ROOT, capture_output=True, text=True
    )
    if shown.returncode != 0:  # not a git checkout (an unpacked archive): nothing to read
        return
    messages = [m.strip("\n") for m in shown.stdout.split("\0") if m.strip()]
    assert messages and all(not problems(m) for m in messages), [problems(m) for m in messages]
