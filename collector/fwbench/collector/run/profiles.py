"""A cell's profile (`collector run --profile`, protocol 1.10): what the run asks of each agent,
the check of what it sends back (validate.py calls `check_profile`), and the row's profile
columns (store/profile_columns.py).

An agent profiles after its timed loop, so the samples are the same with and without a
profile. Its operations come classed by the common mapping (fwbench/spec/op_classes.toml);
the collector checks every class is one of them, and adds "outside" (the step's wall time
less the operations' self times: the framework between kernels, Python, waiting) and
"unmapped" (names no rule maps, listed with the operations, never dropped)."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fwbench.agent.v1 import agent_pb2
from fwbench.spec import op_classes

PROFILES_SINCE = (1, 10)  # the protocol version that brought RunRequest.profile
UNMAPPED = "unmapped"  # the class column's name for names the mapping lacks
PROFILES = "profiles"  # the run folder's folder the agents write their traces into


class BadProfile(ValueError):
    """The profile breaks the protocol: (field, why), as ProtocolViolation takes them."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(field, why)
        self.field, self.why = field, why


def speaks_profiles(describe: agent_pb2.DescribeResponse) -> bool:
    major, _, minor = describe.spec_version.partition(".")
    return major.isdigit() and minor.isdigit() and (int(major), int(minor)) >= PROFILES_SINCE


def profile_request(
    steps: int, describe: agent_pb2.DescribeResponse, folder: Path | None
) -> agent_pb2.ProfileRequest | None:
    """RunRequest.profile for an agent: None when nothing is asked, or the agent's protocol
    has no profiles (its row says so: profile_columns). The trace folder is absolute: a local
    agent runs in a folder of its own, where a relative `--out` would put the trace."""
    if not steps or not speaks_profiles(describe):
        return None
    return agent_pb2.ProfileRequest(steps=steps, trace_dir=str(folder.resolve()) if folder else "")


def check_profile(request: agent_pb2.RunRequest, result: agent_pb2.RunResult) -> None:
    """Raises BadProfile where the profile does not answer the request: none when one was
    asked, another number of steps, a step of no time, a name empty or twice, a negative or
    impossible time or count, a class the mapping does not have, an unknown trace format."""
    asked = request.profile.steps if request.HasField("profile") else 0
    if not asked:
        return
    if not result.HasField("profile"):
        raise BadProfile("profile", f"{asked} profiled steps were asked; the result has none")
    profile = result.profile
    if profile.not_profiled:
        return
    if profile.steps != asked:
        raise BadProfile("profile.steps", f"{profile.steps} steps profiled, {asked} asked")
    if profile.step_nanoseconds <= 0:
        raise BadProfile("profile.step_nanoseconds", f"not positive ({profile.step_nanoseconds})")
    known = set(op_classes.classes())
    seen: set[str] = set()
    for operation in profile.operations:
        where = f"profile.operations[{operation.name!r}]"
        if not operation.name or operation.name in seen:
            raise BadProfile("profile.operations", f"a name empty or sent twice: {where}")
        seen.add(operation.name)
        if operation.self_nanoseconds < 0:
            raise BadProfile(where, f"negative self time ({operation.self_nanoseconds})")
        if not (math.isfinite(operation.calls) and operation.calls >= 0):
            raise BadProfile(where, f"calls {operation.calls} is no count")
        if operation.op_class and operation.op_class not in known:
            raise BadProfile(where, f"class {operation.op_class!r} is not a common class")
    if profile.trace_file and profile.trace_format not in op_classes.TRACE_FORMATS:
        raise BadProfile("profile.trace_format", f"{profile.trace_format!r} is no trace format")


def profile_columns(
    asked_steps: int,
    describe: agent_pb2.DescribeResponse,
    result: agent_pb2.RunResult,
    median_seconds: float | None,
    run_folder: Path | None,
) -> dict[str, Any]:
    """The row's profile columns: empty when nothing was asked; a note when nothing came."""
    if not asked_steps:
        return {}
    if not speaks_profiles(describe):
        return {
            "profile_note": f"the agent speaks protocol {describe.spec_version}: profiles came "
            "with 1.10"
        }
    profile = result.profile
    if profile.not_profiled or not result.HasField("profile"):
        return {
            "profiler": profile.profiler or describe.profiler or None,
            "profile_note": profile.not_profiled or "the agent sent no profile",
        }
    step = profile.step_nanoseconds / 1e9
    classes = class_seconds(profile)
    inside = sum(classes.values())
    classes[op_classes.OUTSIDE] = max(step - inside, 0.0)
    trace, note = _trace(profile, run_folder)
    return {
        "profiler": profile.profiler or describe.profiler,
        "profile_steps": profile.steps,
        "profile_step_seconds": step,
        "profile_effect": step / median_seconds if median_seconds else None,
        # Classed, outside every operation included: what is not unmapped.
        "profile_coverage": 1 - classes.get(UNMAPPED, 0.0) / sum(classes.values()),
        "profile_classes": json.dumps(classes),
        "profile_operations": json.dumps(
            [
                [o.name, o.op_class, o.self_nanoseconds / 1e9, o.calls]
                for o in sorted(profile.operations, key=lambda o: -o.self_nanoseconds)
            ]
        ),
        "profile_trace": trace,
        "profile_note": note,
    }


def class_seconds(profile: agent_pb2.ProfileResult) -> dict[str, float]:
    """Seconds per step by class, in the mapping's order, then "unmapped"."""
    found: dict[str, float] = {}
    for operation in profile.operations:
        name = operation.op_class or UNMAPPED
        found[name] = found.get(name, 0.0) + operation.self_nanoseconds / 1e9
    order = [*op_classes.classes(), UNMAPPED]
    return {name: found[name] for name in order if name in found}


def _trace(profile: agent_pb2.ProfileResult, run_folder: Path | None) -> tuple[str | None, str]:
    """The trace's path (relative to the run folder where it lies in it), and a note where the
    agent wrote it out of this host's sight (a container's own filesystem)."""
    if not profile.trace_file:
        return None, ""
    path = Path(profile.trace_file)
    if not path.is_file():
        return None, f"the trace stayed where the agent wrote it: {profile.trace_file}"
    if run_folder is not None and path.resolve().is_relative_to(run_folder.resolve()):
        return str(path.resolve().relative_to(run_folder.resolve())), ""
    return str(path), ""


def profile_classes(row: Mapping[str, Any]) -> dict[str, float]:
    """A row's profile_classes column, read back ({} when the row has no profile)."""
    text = row.get("profile_classes")
    return dict(json.loads(text)) if isinstance(text, str) and text else {}


def profile_text(row: Mapping[str, Any], shown: int = 3) -> str:
    """The cell line's profile: "; profile: convolution 62%, optimizer 20%, outside 9% of a
    step (5 steps, 1.04x the timed one)", or why there is none; "" when none was asked."""
    note = row.get("profile_note")
    classes = profile_classes(row)
    if not classes:
        return f"; not profiled: {note}" if isinstance(note, str) and note else ""
    step = float(row["profile_step_seconds"])
    largest = sorted(classes.items(), key=lambda item: -item[1])[:shown]
    shares = ", ".join(f"{name} {seconds / step:.0%}" for name, seconds in largest)
    effect = row.get("profile_effect")
    stretch = f", {float(effect):.2f}x the timed one" if isinstance(effect, float) else ""
    return f"; profile: {shares} of a step ({row['profile_steps']} steps{stretch})"
