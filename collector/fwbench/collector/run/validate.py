"""Nothing an agent says is stored before it is checked: a RunResult must answer its request
and keep the protocol (agent.proto). A reply that does not is a failed cell whose error names
the field and says the agent broke the protocol, never an `ok` row.

The checks: the run id is echoed; every sample positive, and without an accuracy result (whose
samples are the epochs after the first, so a target reached in epoch 1 leaves none) at least
one, no more than the request's max_iterations and at least its min_iterations (unless max is
lower); build and first-iteration times non-negative; the measure window ends
after it starts and holds the samples (their sum fits in it); accuracy fields in range; a
generation workload's parts there (and only there), one prefill per sample and the catalogue's
decode steps per sample, every part positive and a sample's parts within the sample; a profile
where one was asked, answering it (profiles.py)."""

from __future__ import annotations

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.run.generation import WEIGHT_BYTES_KEY, weight_bytes_per_parameter
from fwbench.collector.run.profiles import BadProfile, check_profile
from fwbench.spec import Catalogue, CatalogueError

ERROR_CODE = "PROTOCOL_VIOLATION"
# The window is read from a wall clock, the samples from a monotonic one: allow the two a
# little disagreement before calling the samples impossible.
WINDOW_SLACK_NANOSECONDS = 5_000_000
# A generation's parts are timed inside its sample on the same clock: they can only exceed it
# by rounding.
PARTS_SLACK_NANOSECONDS = 1_000


def iteration_limit(catalogue: Catalogue, name: str, given: int) -> int:
    """min_iterations or max_iterations as the agent applies it: 0 stands for the default."""
    return int(given or catalogue.run_limits[name].default)


class ProtocolViolation(ValueError):
    """The agent's reply breaks the protocol; `field` names the offending field."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(f"the agent broke the protocol: {field}: {why}")
        self.field = field


def check_result(
    request: agent_pb2.RunRequest, result: agent_pb2.RunResult, catalogue: Catalogue
) -> None:
    """Raises ProtocolViolation for the first rule `result` breaks."""
    if result.run_id != request.run_id:
        raise ProtocolViolation("run_id", f"{result.run_id!r} answers {request.run_id!r}")
    accuracy = result.HasField("accuracy")
    _check_samples(list(result.sample_nanoseconds), empty_allowed=accuracy)
    if not accuracy:
        _check_count(request, len(result.sample_nanoseconds), catalogue)
    for field in ("build_nanoseconds", "first_iteration_nanoseconds"):
        if getattr(result, field) < 0:
            raise ProtocolViolation(field, f"negative ({getattr(result, field)})")
    _check_window(result)
    if result.HasField("accuracy"):
        _check_accuracy(result.accuracy)
    _check_generation(request, result, catalogue)
    try:
        check_profile(request, result)
    except BadProfile as error:
        raise ProtocolViolation(error.field, error.why) from None


def _check_samples(samples: list[int], empty_allowed: bool) -> None:
    if not samples and not empty_allowed:
        raise ProtocolViolation("sample_nanoseconds", "no samples")
    bad = [s for s in samples if s <= 0]
    if bad:
        raise ProtocolViolation(
            "sample_nanoseconds", f"{len(bad)} of {len(samples)} not positive (e.g. {bad[0]})"
        )


def _check_count(request: agent_pb2.RunRequest, count: int, catalogue: Catalogue) -> None:
    most = iteration_limit(catalogue, "max_iterations", request.max_iterations)
    least = min(iteration_limit(catalogue, "min_iterations", request.min_iterations), most)
    if not least <= count <= most:
        raise ProtocolViolation(
            "sample_nanoseconds", f"{count} samples; the request allows {least} to {most}"
        )


def _check_window(result: agent_pb2.RunResult) -> None:
    started = result.measure_started_unix_nanoseconds
    window = result.measure_ended_unix_nanoseconds - started
    if started <= 0 or window < 0:
        raise ProtocolViolation(
            "measure_ended_unix_nanoseconds", "the window ends before it starts"
        )
    if sum(result.sample_nanoseconds) > window + WINDOW_SLACK_NANOSECONDS:
        raise ProtocolViolation(
            "sample_nanoseconds",
            f"the samples add up to {sum(result.sample_nanoseconds)} ns, more than the "
            f"measure window's {window} ns",
        )


def _check_accuracy(accuracy: agent_pb2.AccuracyResult) -> None:
    for field in ("target_accuracy", "final_accuracy"):
        value = getattr(accuracy, field)
        if not 0.0 <= value <= 1.0:
            raise ProtocolViolation(f"accuracy.{field}", f"{value} is not a fraction")
    if accuracy.epochs_to_target > accuracy.epochs:
        raise ProtocolViolation("accuracy.epochs_to_target", "more than the epochs run")
    if accuracy.reached != (accuracy.epochs_to_target > 0):
        raise ProtocolViolation("accuracy.reached", "disagrees with epochs_to_target")


def _check_generation(
    request: agent_pb2.RunRequest, result: agent_pb2.RunResult, catalogue: Catalogue
) -> None:
    try:
        workload = catalogue.get(request.workload)
        steps = workload.decode_steps(dict(request.params)) if workload.generation else None
    except CatalogueError:  # the agent ran it, so it knew the workload; nothing to hold it to
        steps = None
    given = result.HasField("generation")
    if steps is None:
        if given:
            raise ProtocolViolation("generation", f"{request.workload} is not a generation")
        return
    if not given:
        raise ProtocolViolation("generation", "missing: a generation workload reports its parts")
    parts = result.generation
    samples = list(result.sample_nanoseconds)
    if parts.decode_steps_per_sample != steps:
        raise ProtocolViolation(
            "generation.decode_steps_per_sample",
            f"{parts.decode_steps_per_sample}; the catalogue's {request.workload} decodes "
            f"{steps} per generation for these parameters",
        )
    try:
        weight_bytes_per_parameter(result.settings.extra)
    except ValueError as error:
        raise ProtocolViolation(f"settings.extra.{WEIGHT_BYTES_KEY}", str(error)) from None
    prefill, decode = list(parts.prefill_nanoseconds), list(parts.decode_step_nanoseconds)
    if len(prefill) != len(samples) or len(decode) != len(samples) * steps:
        raise ProtocolViolation(
            "generation",
            f"{len(prefill)} prefills and {len(decode)} decode steps for {len(samples)} "
            f"samples of {steps} decode steps each",
        )
    for field, values in (("prefill_nanoseconds", prefill), ("decode_step_nanoseconds", decode)):
        bad = [v for v in values if v <= 0]
        if bad:
            raise ProtocolViolation(f"generation.{field}", f"{len(bad)} not positive")
    for index, sample in enumerate(samples):
        parts_ns = prefill[index] + sum(decode[index * steps : (index + 1) * steps])
        if parts_ns > sample + PARTS_SLACK_NANOSECONDS:
            raise ProtocolViolation(
                "generation",
                f"sample {index}: its prefill and decode steps add up to {parts_ns} ns, more "
                f"than the sample's {sample} ns",
            )
