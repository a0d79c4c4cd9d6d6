"""Runs a command with busy processes beside it: `make test-stress` runs the suite's
timing-sensitive tests this way, to show that none of their outcomes depends on how busy the
host is (issue #54).

    python3 tests/stress.py [--busy N] -- COMMAND [ARG ...]

Each busy process spins on the CPU at the normal priority, as another user's job or a noisy
CI neighbour would, from before COMMAND starts until it ends; N defaults to 2 (every CPU of
a 2-CPU CI host). Exits with COMMAND's status. Standard library only."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

SPIN = "while True: pass"


def main(argv: list[str]) -> int:
    busy = 2
    if argv[:1] == ["--busy"]:
        busy, argv = int(argv[1]), argv[2:]
    if argv[:1] != ["--"] or len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(busy)]
    print(f"stress: {busy} busy processes beside `{' '.join(argv[1:])}`", flush=True)
    try:
        return subprocess.run(argv[1:], check=False).returncode
    except KeyboardInterrupt:
        return 130
    finally:
        for spinner in spinners:
            spinner.send_signal(signal.SIGKILL)
            spinner.wait()
        print(f"stress: the {busy} busy processes stopped", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main(sys.argv[1:]))
