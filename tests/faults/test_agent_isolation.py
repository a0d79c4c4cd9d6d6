"""An agent never imports from the directory the collector was started in: a user's
`inspect.py` (or any module named like one the agent imports) there is never executed inside
the agent. A real local agent (the framework-free fake plugin), started by the real command."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fake_agent import write_fake_agents

# The console script, as users run it (`python -m` would put the working directory on the
# collector's own sys.path, which is Python's rule, not the agent's).
COLLECTOR = Path(sys.executable).with_name("collector")

PLANTED = """
from pathlib import Path
Path(__file__).with_name("imported-inside-the-agent").write_text("yes")
"""


def test_modules_in_the_working_directory_are_not_imported_by_agents(tmp_path: Path) -> None:
    manifests = write_fake_agents(tmp_path / "agents", {"fake": {}})
    work = tmp_path / "work"
    work.mkdir()
    for name in ("inspect", "json", "grpc", "numpy"):  # stdlib and third-party names alike
        (work / f"{name}.py").write_text(PLANTED)
    done = subprocess.run(
        [str(COLLECTOR), "describe", "fake", "--manifests", str(manifests), "--json"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert '"framework": "fake"' in done.stdout
    assert not (work / "imported-inside-the-agent").exists()
