"""Input that only the agents can judge is still refused before anything is written: a mode
name that none of the selected agents offers (a typo) names the modes they do offer."""

from __future__ import annotations

from pathlib import Path

from fault_cli import collector


def test_a_mode_no_agent_offers_is_refused_with_the_offered_modes(
    tmp_path: Path, start_agent: object
) -> None:
    address = start_agent("honest")  # type: ignore[operator]
    out = tmp_path / "run"
    done = collector(
        tmp_path,
        "run",
        f"--agents=honest@{address}",
        "--workloads=gemm",
        "--modes=egaer",
        "--out",
        str(out),
    )
    assert done.returncode == 2, done.stderr
    assert (
        "mode 'egaer' is offered by none of the agents (honest); they offer: eager" in done.stderr
    )
    assert not out.exists()
    listed = collector(tmp_path, "results", "--json")
    # Nothing recorded: no store was made (refused by name), or an empty one lists no run.
    refused = listed.returncode == 2 and "there is no such file" in listed.stderr
    assert refused or (listed.returncode == 0 and listed.stdout.strip() == "[]"), listed


def test_an_attached_agent_must_be_what_its_name_says(tmp_path: Path, start_agent: object) -> None:
    address = start_agent("honest")  # type: ignore[operator]
    out = tmp_path / "run"
    done = collector(tmp_path, "run", f"--agents=torch-cpu@{address}", "--out", str(out))
    assert done.returncode == 2, done.stderr
    assert f"the agent at {address} is 'honest' (liar 1, variant honest), not 'torch-cpu'" in (
        " ".join(done.stderr.split())
    )
    assert not out.exists()


def test_one_address_given_twice_is_refused(tmp_path: Path, start_agent: object) -> None:
    address = start_agent("honest")  # type: ignore[operator]
    done = collector(tmp_path, "run", f"--agents=honest@{address},other@{address}")
    assert done.returncode == 2 and "is given twice" in done.stderr
