"""The collector's calls to one agent about the user's model (model_prepare.py,
model_export.py): the signature of a file, and one untimed step of it, whose outputs are the
reference (or an export's check against it)."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import TYPE_CHECKING

import grpc

from fwbench.agent.v1 import agent_pb2
from fwbench.collector.run.model_file import ModelRefused
from fwbench.collector.run.model_prepared import PreparedModel
from fwbench.spec import model_files
from fwbench.spec.enums import PHASE_VALUES
from fwbench.spec.model_files import ModelFileError, TensorInfo

if TYPE_CHECKING:
    import numpy as np

    from fwbench.collector.run.work import AgentWork

# An untimed step: one iteration, no warm-up, whatever the run's loop settings.
_UNTIMED_LOOP = {"warmup_iterations": 0, "min_iterations": 1, "max_iterations": 1}


def inspect(
    reader: AgentWork, model: agent_pb2.ModelFile, timeout: float | None
) -> agent_pb2.ModelSignature:
    """The reader's InspectModel of `model`; ModelRefused naming it when it cannot read it."""
    reader.awake()
    try:
        return reader.handle.client.inspect_model(
            agent_pb2.InspectModelRequest(model=model), timeout or 300.0
        )
    except grpc.RpcError as error:
        raise ModelRefused(
            f"--model {Path(model.path).name}: {reader.handle.name} cannot read it: "
            f"{error.details()}"
        ) from None


def signature_inputs(signature: agent_pb2.ModelSignature) -> tuple[TensorInfo, ...]:
    return tuple(
        TensorInfo(t.name, tuple(None if d < 0 else int(d) for d in t.shape), t.dtype)
        for t in signature.inputs
    )


def untimed_outputs(
    prepared: PreparedModel,
    agent: AgentWork,
    batch: int,
    seed: int,
    timeout: float | None,
    count_flops: bool = False,
) -> dict[str, np.ndarray]:
    """One untimed step of `agent` at `batch` on the file it runs (the reference's outputs,
    or an export's check); ModelRefused when it cannot run it or sends no outputs. With
    `count_flops` (the reference's step) the agent also counts the forward FLOPs with its
    framework's counter (protocol 1.9), kept in prepared.flops[batch]."""
    agent.awake()
    name = agent.handle.name
    model = prepared.model_file(batch, name)
    request = agent_pb2.RunRequest(
        run_id=f"untimed-{secrets.token_hex(8)}",
        workload=prepared.asked.workload,
        phase=PHASE_VALUES["infer"],
        batch_size=batch,
        seed=seed,
        model=model,
        count_flops=count_flops,
        min_seconds=0.0,
        **_UNTIMED_LOOP,  # type: ignore[arg-type]
    )
    what = f"--model {Path(model.path).name}"
    who = f"the reference agent {name}" if name == prepared.reader else name
    try:
        result = next(
            (e.result for e in agent.handle.client.run(request, timeout) if e.HasField("result")),
            None,
        )
    except grpc.RpcError as error:
        raise ModelRefused(
            f"{what}: {who} could not run it at batch {batch}: {error.details()}"
        ) from None
    if result is None or not result.outputs:
        raise ModelRefused(f"{what}: {who} sent no outputs for it")
    if count_flops:
        sent = result.flops if result.HasField("flops") else None
        prepared.flops[batch] = sent or agent_pb2.FlopCount(
            not_counted=f"{name} counts no FLOPs (protocol {agent.describe.spec_version}, "
            "counts from 1.9)"
        )
    try:
        return model_files.output_arrays(result.outputs)
    except ModelFileError as error:
        raise ModelRefused(f"{what}: {who} sent unreadable outputs: {error}") from None
